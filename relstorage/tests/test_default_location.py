"""Two sites, each with its own zope.conf holding the same bare
``<relstorage>`` section, opened one database (the per-user default),
with no warning: the second site showed the first one's content. A
database with no data-dir now belongs to the config file it was read from
(relstorage.defaultlocation)."""
import io
import json
import logging
import os
import shutil

import pytest
import transaction
import ZODB.config

from relstorage import zodbcheck
from relstorage import zodbinfo
from relstorage import zodbpack
from relstorage.config import storage_from_string
from relstorage.exceptions import ConfigurationError

ZOPE_CONF = """\
%import relstorage
<zodb>
  <relstorage>
  </relstorage>
</zodb>
"""


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    """The per-user location, inside the test's directory."""
    home = tmp_path / 'xdg'
    monkeypatch.setenv('XDG_DATA_HOME', str(home))
    return home / 'relstorage'


def _instance(root, text=ZOPE_CONF):
    """An instance folder with etc/zope.conf; the config file's path."""
    (root / 'etc').mkdir(parents=True)
    conf = root / 'etc' / 'zope.conf'
    conf.write_text(text)
    return conf


def _db(conf):
    with open(conf) as f:
        return ZODB.config.databaseFromFile(f)


def _write(conf, **items):
    db = _db(conf)
    try:
        with db.transaction() as conn:
            conn.root().update(items)
        return db.storage._adapter.data_dir
    finally:
        db.close()


def _read(conf):
    db = _db(conf)
    try:
        with db.transaction() as conn:
            return dict(conn.root())
    finally:
        db.close()


def test_two_sites_with_the_same_bare_section_keep_their_own_databases(
        tmp_path, xdg):
    site1 = _instance(tmp_path / 'site1')
    site2 = _instance(tmp_path / 'site2')
    dir1 = _write(site1, site='one')
    assert _read(site2) == {}
    dir2 = _write(site2, site='two')
    assert _read(site1) == {'site': 'one'}
    assert _read(site2) == {'site': 'two'}
    # Under each instance's var, as Zope keeps Data.fs; nothing per user.
    assert dir1 == str(tmp_path / 'site1' / 'var' / 'relstorage' / 'default')
    assert dir2 == str(tmp_path / 'site2' / 'var' / 'relstorage' / 'default')
    assert (tmp_path / 'site1' / 'var' / 'relstorage' / 'default'
            / 'relstorage.sqlite3').exists()
    assert not xdg.exists()


def test_sqlite3_sections_without_data_dir_too(tmp_path, xdg):
    text = ZOPE_CONF.replace('<relstorage>\n', '<relstorage>\nname main\n'
                             '<sqlite3>\n</sqlite3>\n')
    site1 = _instance(tmp_path / 'site1', text)
    site2 = _instance(tmp_path / 'site2', text)
    assert _write(site1, site='one') == str(
        tmp_path / 'site1' / 'var' / 'relstorage' / 'main')
    assert _read(site2) == {}


def test_a_shared_included_section_is_still_each_sites_own(tmp_path, xdg):
    shared = tmp_path / 'shared' / 'storage.conf'
    shared.parent.mkdir()
    shared.write_text('<relstorage>\n</relstorage>\n')
    text = '%%import relstorage\n<zodb>\n%%include %s\n</zodb>\n' % shared
    site1 = _instance(tmp_path / 'site1', text)
    site2 = _instance(tmp_path / 'site2', text)
    _write(site1, site='one')
    assert _read(site2) == {}
    assert not (tmp_path / 'shared' / 'var').exists()


def _zodbinfo(conf):
    out = io.StringIO()
    assert zodbinfo.main(['--json', '--exact', str(conf)], out=out) == 0
    (report,) = json.loads(out.getvalue())['storages']
    return report


def test_console_tools_open_the_database_of_their_site(tmp_path, xdg):
    site1 = _instance(tmp_path / 'site1')
    site2 = _instance(tmp_path / 'site2')
    _write(site2, site='two')
    dir1 = _write(site1, site='one', counter=0)
    for count in range(1, 4):
        _write(site1, counter=count)
    report = _zodbinfo(site1)
    assert report['database'] == 'SQLite database in %s' % dir1
    assert report['transactions'] == 5      # its own, not site2's

    # zodbpack packs that database: the old revisions of the root go.
    db = _db(site1)
    try:
        before = len(db.storage.history(b'\0' * 8, size=100))
    finally:
        db.close()
    assert before == 5
    assert zodbpack.main(['-d', '0', str(site1)], out=io.StringIO()) == 0
    db = _db(site1)
    try:
        assert len(db.storage.history(b'\0' * 8, size=100)) == 1
    finally:
        db.close()
    assert _read(site1) == {'site': 'one', 'counter': 3}
    assert _zodbinfo(site2)['transactions'] == 2

    out = io.StringIO()
    assert zodbcheck.main(['--json', str(site1)], out=out,
                          err=io.StringIO()) == 0
    assert json.loads(out.getvalue())['storages'][0]['name']


def test_config_files_in_one_folder_are_refused_one_database(tmp_path,
                                                              xdg):
    folder = tmp_path / 'confs'
    folder.mkdir()
    first, second = folder / 'a.conf', folder / 'b.conf'
    first.write_text(ZOPE_CONF)
    second.write_text(ZOPE_CONF)
    data_dir = _write(first, site='a')
    assert data_dir == str(folder / 'var' / 'relstorage' / 'default')
    with pytest.raises(ConfigurationError) as exc:
        _db(second)
    message = str(exc.value)
    assert str(first) in message
    assert 'data-dir %s' % data_dir in message
    # The console tools say the same, and open nothing.
    err = io.StringIO()
    assert zodbcheck.main([str(second)], out=io.StringIO(), err=err) == 1
    assert str(first) in err.getvalue()
    # Shared deliberately, it is the same database.
    second.write_text(ZOPE_CONF.replace(
        '<relstorage>\n', '<relstorage>\n<sqlite3>\ndata-dir %s\n'
        '</sqlite3>\n' % data_dir))
    assert _read(second) == {'site': 'a'}


def test_an_instance_moved_as_a_whole_keeps_its_database(tmp_path, xdg):
    site = _instance(tmp_path / 'site')
    _write(site, site='one')
    shutil.move(str(tmp_path / 'site'), str(tmp_path / 'moved'))
    assert _read(tmp_path / 'moved' / 'etc' / 'zope.conf') == {'site': 'one'}


def test_a_database_made_in_the_per_user_location_stays_with_its_site(
        tmp_path, xdg, caplog):
    # As earlier versions made it, from any configuration.
    storage = storage_from_string('<relstorage>\n</relstorage>\n')
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        conn.root()['site'] = 'old'
    db.close()
    legacy = xdg / 'default'
    assert (legacy / 'relstorage.sqlite3').exists()

    site1 = _instance(tmp_path / 'site1')
    site2 = _instance(tmp_path / 'site2')
    with caplog.at_level(logging.WARNING):
        assert _read(site1) == {'site': 'old'}
    assert any(str(legacy) in r.getMessage() and str(site1) in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)
    from relstorage.defaultlocation import MARKER
    assert (legacy / MARKER).exists()
    assert not (tmp_path / 'site1' / 'var').exists()
    # The first config file to open it keeps it ...
    assert _write(site1, more=1) == str(legacy)
    # ... and no other configuration gets it without saying so.
    with pytest.raises(ConfigurationError) as exc:
        _db(site2)
    assert str(site1) in str(exc.value)
    assert 'data-dir %s' % legacy in str(exc.value)
    with pytest.raises(ConfigurationError):
        storage_from_string('<relstorage>\n</relstorage>\n')
    # A site given a directory of its own gets a database of its own.
    os.makedirs(tmp_path / 'site2' / 'var' / 'relstorage' / 'default')
    assert _read(site2) == {}
    assert _read(site1) == {'site': 'old', 'more': 1}


def test_a_config_given_as_a_string_keeps_the_per_user_default(xdg):
    for _ in range(2):
        storage = storage_from_string('<relstorage>\n</relstorage>\n')
        try:
            assert storage._adapter.data_dir == str(xdg / 'default')
        finally:
            storage.close()
    transaction.abort()
