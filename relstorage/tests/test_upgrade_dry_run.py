"""``relstorage-upgrade --dry-run`` reads only and says what a run would
do, with the status the run would have: on a missing SQLite directory,
on an empty server database, on a database this storage created, on an
untouched RelStorage 4 database and on an interrupted upgrade."""
import os

import pytest

from relstorage.testing.dbs import DATABASES

from .test_relstorage4_upgrade import Site
from .test_relstorage4_upgrade import site  # noqa: F401 -- a fixture

_TABLES = {
    'postgresql': "SELECT tablename FROM pg_tables "
                  "WHERE schemaname = current_schema()",
    'mysql': "SELECT TABLE_NAME FROM information_schema.TABLES "
             "WHERE TABLE_SCHEMA = DATABASE()",
}


def fingerprint(site):
    """What a write would change: on SQLite the data-dir's files (names,
    sizes, modification times), on a server its tables and the rows of
    relstorage_meta."""
    if site.kind == 'sqlite':
        if not os.path.exists(site.where):
            return None
        return sorted((entry.name, entry.stat().st_size,
                       entry.stat().st_mtime_ns)
                      for entry in os.scandir(site.where))
    adapter = site.factory.adapter('misc')
    session = adapter.connect(for_store=False)
    try:
        session.begin()
        tables = sorted(name for (name,) in session.fetchall(
            _TABLES[site.kind]))
        meta = (sorted(session.fetchall(
            'SELECT name, value FROM relstorage_meta'))
            if 'relstorage_meta' in tables else None)
        return tables, meta
    finally:
        session.rollback_quietly()
        session.close()
        adapter.close()


def test_missing_sqlite_directory_is_left_missing(tmp_path, capsys):
    site = Site('sqlite', True, tmp_path)
    assert not os.path.exists(site.where)
    for args in (['--dry-run'], [], ['--drop-old']):
        assert site.upgrade(*args) == 1, args
        assert 'holds no RelStorage 4 database' in capsys.readouterr().err
        assert not os.path.exists(site.where), args


@pytest.mark.parametrize('kind', [db for db in DATABASES if db != 'sqlite'])
def test_empty_server_database_gets_no_schema(tmp_path, capsys, kind):
    site = Site(kind, True, tmp_path)
    try:
        assert fingerprint(site) == ([], None)
        for args in (['--dry-run'], []):
            assert site.upgrade(*args) == 1, args
            assert 'holds no RelStorage 4 database' in \
                capsys.readouterr().err
            assert fingerprint(site) == ([], None), args
    finally:
        site.empty()


def test_database_of_this_storage_is_already_upgraded(site, capsys):
    site.storage().close()      # creates this storage's schema
    assert site.upgrade() == 0
    said = capsys.readouterr().out
    assert 'is already upgraded' in said
    before = fingerprint(site)
    assert site.upgrade('--dry-run') == 0
    out = capsys.readouterr()
    assert out.out == said and not out.err
    assert fingerprint(site) == before


def test_untouched_relstorage4_database_is_surveyed(site, capsys):
    site.build()
    before = fingerprint(site)
    assert site.upgrade('--dry-run') == 0
    out = capsys.readouterr().out
    assert 'nothing was changed' in out and 'revisions' in out
    assert fingerprint(site) == before


def test_interrupted_upgrade_would_resume(site, capsys, monkeypatch):
    expected = site.build()
    from relstorage.adapters import upgrade as upgrade_module
    original = upgrade_module.Upgrade._done

    def done_then_fail(self, session, step, **progress):
        original(self, session, step, **progress)
        if step == 'current':
            raise KeyboardInterrupt('the power went out')
    monkeypatch.setattr(upgrade_module.Upgrade, '_done', done_then_fail)
    with pytest.raises(KeyboardInterrupt):
        site.upgrade()
    monkeypatch.setattr(upgrade_module.Upgrade, '_done', original)
    capsys.readouterr()
    before = fingerprint(site)
    assert site.upgrade('--dry-run') == 0
    out = capsys.readouterr().out
    assert 'a run would resume at step 4 of 9 (current); nothing was ' \
        'changed' in out, out
    assert fingerprint(site) == before
    assert site.upgrade() == 0
    out = capsys.readouterr().out
    assert 'step 4 of 9: current' in out and 'step 3 of' not in out, out
    assert site.read() == expected


def _survey(report):
    """The dry run's counts (its indented lines but the timing)."""
    return [line for line in report.splitlines()
            if line.startswith('  ') and 'took' not in line]


def test_half_done_prepare_on_mysql_is_surveyed(tmp_path, capsys):
    """MySQL's prepare is not one transaction: stopped after its RENAME
    TABLE, it runs again, and the dry run surveys the renamed tables."""
    from relstorage.adapters.mysql.upgrade import MySQLUpgrade
    site = Site('mysql', True, tmp_path)
    try:
        expected = site.build()
        assert site.upgrade('--dry-run') == 0
        untouched = _survey(capsys.readouterr().out)
        assert any('revisions' in line for line in untouched), untouched
        adapter = site.factory.adapter('misc')
        session = adapter.connect(for_store=True)
        try:
            MySQLUpgrade(adapter).rename_old(session)
        finally:
            session.close()
            adapter.close()
        before = fingerprint(site)
        assert 'rs4_object_state' in before[0]
        assert site.upgrade('--dry-run') == 0
        assert _survey(capsys.readouterr().out) == untouched
        assert fingerprint(site) == before
        assert site.upgrade() == 0
        assert site.read() == expected
    finally:
        site.empty()
