"""Upgrading real RelStorage 4 databases in place (``relstorage-upgrade``).

RelStorage 4.3 from PyPI, in a virtualenv of its own (kept between runs
in the user's cache directory, ``~/.cache/relstorage-tests/rs4``: see
relstorage.testing.cache; never in the checkout), builds each
database with rs4_workload.py and describes what it reads; after the
upgrade this storage must read exactly the same transactions, records,
current states and blobs, and go on committing.
"""
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
import unittest

import pytest
import ZODB
from ZODB.serialize import referencesf
from ZODB.tests import BasicStorage
from ZODB.tests import HistoryStorage
from ZODB.tests import IteratorStorage
from ZODB.tests import PackableStorage
from ZODB.tests import RevisionStorage
from ZODB.tests import TransactionalUndoStorage
from ZODB.tests.StorageTestBase import StorageTestBase

from relstorage.config import storage_from_string
from relstorage.exceptions import RelStorage4Database
from relstorage.testing import rs4_workload
from relstorage.testing.checkout import user_environment
from relstorage.testing.rs4venv import rs4_python
from relstorage.testing.dbs import DATABASES
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require
from relstorage.upgrade import main as upgrade_main

from .conformance import make_classes

def build_rs4(kind, keep_history, where, out, shared_blob_dir='',
              blob_cache=''):
    """Fill a RelStorage 4 database at *where* (its blobs in
    *shared_blob_dir* when given, else in the database with *blob_cache*
    as its blob cache); return what RelStorage 4 reads from it. It leaves
    nothing in its temporary directory."""
    blob_args = ([str(shared_blob_dir)] if shared_blob_dir
                 else [str(blob_cache), 'cache'] if blob_cache else [])
    python = rs4_python()
    scratch = tempfile.mkdtemp(prefix='rs4-workload-')
    try:
        done = subprocess.run(
            [python, rs4_workload.__file__, kind,
             'true' if keep_history else 'false', where, out] + blob_args,
            cwd=scratch, env=dict(user_environment(), TMPDIR=scratch),
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        assert os.listdir(scratch) == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with open(out) as f:
        return json.load(f)


def _config(kind, keep_history, where, blob_dir):
    adapter = rs4_workload.adapter_section(kind, where)
    return textwrap.dedent('''\
        %%import relstorage
        <relstorage>
          keep-history %s
          blob-dir %s
          blob-chunk-size 1024
        %s
        </relstorage>
        ''') % ('true' if keep_history else 'false', blob_dir, adapter)


_PG_EMPTY = (
    'SELECT lo_unlink(oid) FROM pg_largeobject_metadata '
    'WHERE lomowner = current_user::regrole',
    ('VIEW', "SELECT quote_ident(viewname) FROM pg_views "
             "WHERE schemaname = current_schema()"),
    ('TABLE', "SELECT quote_ident(tablename) FROM pg_tables "
              "WHERE schemaname = current_schema()"),
    ('SEQUENCE', "SELECT quote_ident(sequencename) FROM pg_sequences "
                 "WHERE schemaname = current_schema()"),
    ('FUNCTION', "SELECT p.oid::regprocedure::text FROM pg_proc p "
                 "WHERE p.pronamespace = current_schema()::regnamespace"),
)
_MYSQL_EMPTY = (
    'SET FOREIGN_KEY_CHECKS = 0',
    ('VIEW', "SELECT TABLE_NAME FROM information_schema.VIEWS "
             "WHERE TABLE_SCHEMA = DATABASE()"),
    ('TABLE', "SELECT TABLE_NAME FROM information_schema.TABLES "
              "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'"),
    ('PROCEDURE', "SELECT ROUTINE_NAME FROM information_schema.ROUTINES "
                  "WHERE ROUTINE_SCHEMA = DATABASE()"),
    'SET FOREIGN_KEY_CHECKS = 1',
)


class Site:
    """A RelStorage 4 database and the config file that opens it (on a
    server, the test server's ``misc`` database, emptied before and
    after); its blob-dir is the blob cache RelStorage 4 kept (layout
    ``zeocache``) and this storage keeps after the upgrade."""

    def __init__(self, kind, keep_history, tmp_path):
        self.kind, self.keep_history = kind, keep_history
        if kind == 'sqlite':
            self.factory = None
            self.where = str(tmp_path / 'data')
        else:
            require(kind)
            self.factory = DatabaseFactory(kind, keep_history)
            if kind == 'postgresql':
                self.where = pg_dsn(keep_history, 'misc')
            else:
                params = mysql_params(keep_history, 'misc')
                self.where = ':'.join(str(params[key]) for key in (
                    'host', 'port', 'user', 'passwd', 'db'))
            self.empty()
        self.config = tmp_path / 'site.conf'
        self.blob_dir = tmp_path / 'blobs'
        self.config.write_text(_config(kind, keep_history, self.where,
                                       self.blob_dir))
        self.tmp_path = tmp_path

    def empty(self):
        """Drop everything the user owns in the database: both storages'
        tables, views, routines, sequences and large objects."""
        adapter = self.factory.adapter('misc')
        session = adapter.connect(for_store=True)
        try:
            session.begin()
            for statement in (_PG_EMPTY if self.kind == 'postgresql'
                              else _MYSQL_EMPTY):
                if isinstance(statement, str):
                    session.execute(statement)
                    continue
                kind, query = statement
                for (name,) in session.fetchall(query):
                    session.execute('DROP %s IF EXISTS %s CASCADE' % (
                        kind, name) if self.kind == 'postgresql' else
                        'DROP %s IF EXISTS `%s`' % (kind, name))
            session.commit()
        finally:
            session.close()
            adapter.close()

    def build(self):
        return build_rs4(self.kind, self.keep_history, self.where,
                         str(self.tmp_path / 'rs4.json'),
                         blob_cache=self.blob_dir)

    def upgrade(self, *args):
        return upgrade_main(list(args) + [str(self.config)])

    def storage(self):
        return storage_from_string(self.config.read_text())

    def read(self):
        storage = self.storage()
        try:
            return json.loads(json.dumps(rs4_workload.dump(storage),
                                         sort_keys=True))
        finally:
            storage.close()


@pytest.fixture(params=[(db, kh) for db in DATABASES for kh in (True, False)],
                ids=['%s-%s' % (db, 'HP' if kh else 'HF')
                     for db in DATABASES for kh in (True, False)])
def site(request, tmp_path):
    kind, keep_history = request.param
    site = Site(kind, keep_history, tmp_path)
    yield site
    if site.factory is not None:
        site.empty()


def old_cache_entries(blob_dir):
    """What of RelStorage 4's blob cache (and of its removal) is left in
    *blob_dir*."""
    return sorted(p.name for p in blob_dir.iterdir()
                  if p.name.isdigit() or p.name == 'check_size.lock'
                  or p.name.startswith('.old-blob-cache-'))


def blob_files(blob_dir):
    return sorted(p.relative_to(blob_dir) for p in blob_dir.rglob('*.blob'))


def test_upgrade_reads_what_relstorage4_read(site, capsys):
    expected = site.build()
    assert len(expected['transactions']) >= (5 if site.keep_history else 3)
    # RelStorage 4 kept a blob cache in its layout: a directory ZODB does
    # not know.
    assert (site.blob_dir / '.layout').read_text() == 'zeocache'
    old_files = blob_files(site.blob_dir)
    assert len(old_files) >= len(rs4_workload.BLOB_SIZES)
    assert all(p.parent.name.isdigit() for p in old_files), old_files
    # Before: refused, naming the command.
    with pytest.raises(RelStorage4Database, match='relstorage-upgrade'):
        site.storage()
    assert site.upgrade('--dry-run') == 0
    report = capsys.readouterr().out
    assert 'nothing was changed' in report and 'revisions' in report
    with pytest.raises(RelStorage4Database):
        site.storage()
    assert site.upgrade() == 0
    said = capsys.readouterr().out
    # Every step, the references last, then the end.
    assert said.index('step 9 of 9: references') \
        < said.index('kept the references of') \
        < said.index('upgraded from RelStorage 4'), said
    # The blob cache was begun anew, in this storage's layout.
    assert (site.blob_dir / '.layout').read_text() == 'bushy'
    assert old_cache_entries(site.blob_dir) == []
    assert site.read() == expected
    # Each blob read was downloaded again, and signed.
    files = blob_files(site.blob_dir)
    assert files and all(str(p).startswith('0x') for p in files)
    assert all((site.blob_dir / ('%s.sig' % p)).exists() for p in files)
    # Running it again changes nothing.
    assert site.upgrade() == 0
    said = capsys.readouterr().out
    assert 'already upgraded' in said and 'step' not in said, said
    # The upgraded database goes on: a commit, a new oid above the old.
    storage = site.storage()
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        old_oids = {conn.root()[k]._p_oid for k in conn.root().keys()}
        conn.root()['after'] = after = ZODB.blob.Blob(b'new blob')
    with db.transaction() as conn:
        assert conn.root()['after']._p_oid > max(old_oids)
        assert after._p_oid == conn.root()['after']._p_oid
        with conn.root()['after'].open() as f:
            assert f.read() == b'new blob'
    db.close()
    # Dropping the old tables leaves the new ones whole.
    assert site.upgrade('--drop-old') == 0
    after_drop = site.read()
    root = '0' * 16       # changed by the commit above
    assert {oid: value for oid, value in after_drop['current'].items()
            if oid in expected['current'] and oid != root} == {
        oid: value for oid, value in expected['current'].items()
        if oid != root}
    if site.keep_history:
        assert after_drop['transactions'][:len(expected['transactions'])] \
            == expected['transactions']
    # Its first pack reads again only what changed since the upgrade:
    # the root and the new blob.
    storage = site.storage()
    try:
        time.sleep(0.01)
        packed = storage.pack_with_result(time.time(), referencesf)
        assert packed['prepack_unpickled'] == 2
    finally:
        storage.close()


def test_zodbconvert_copies_from_relstorage4(site, tmp_path, capsys):
    """Read as it is: copied into another database in one step, the
    RelStorage 4 database left as it was."""
    from relstorage.zodbconvert import main as zodbconvert
    expected = site.build()
    section = site.config.read_text().split('<relstorage>', 1)[1]
    convert = tmp_path / 'convert.conf'
    convert.write_text(
        '%%import relstorage\n<relstorage source>%s\n'
        '<relstorage destination>\n  keep-history %s\n  blob-dir %s\n'
        '  <sqlite3>\n    data-dir %s\n  </sqlite3>\n</relstorage>\n'
        % (section, 'true' if site.keep_history else 'false',
           tmp_path / 'copy-blobs', tmp_path / 'copy'))
    assert zodbconvert([str(convert)]) == 0, capsys.readouterr().err
    assert 'RelStorage 4 (history-' in capsys.readouterr().out
    copy = storage_from_string(
        '<relstorage>\n keep-history %s\n blob-dir %s\n <sqlite3>\n'
        '  data-dir %s\n </sqlite3>\n</relstorage>'
        % ('true' if site.keep_history else 'false', tmp_path / 'c2',
           tmp_path / 'copy'))
    try:
        assert json.loads(json.dumps(rs4_workload.dump(copy),
                                     sort_keys=True)) == expected
    finally:
        copy.close()
    # The source is as it was: still RelStorage 4's, and upgradable.
    with pytest.raises(RelStorage4Database):
        site.storage()
    assert site.upgrade() == 0
    assert site.read() == expected


@pytest.mark.parametrize('stop_in', ['states', 'blobs'])
def test_interrupted_upgrade_resumes(site, capsys, monkeypatch, stop_in):
    """Stopped in the middle of a step's batches, the upgrade resumes
    from the last batch it committed."""
    expected = site.build()
    from relstorage.adapters import upgrade as upgrade_module
    monkeypatch.setattr(upgrade_module, 'BATCH_OBJECTS', 2)
    original = upgrade_module.Upgrade._done
    batches = []

    def done_then_fail(self, session, step, **progress):
        original(self, session, step, **progress)
        if step == stop_in and progress:
            batches.append(progress)
            if len(batches) == 2:
                raise KeyboardInterrupt('the power went out')
    monkeypatch.setattr(upgrade_module.Upgrade, '_done', done_then_fail)
    with pytest.raises(KeyboardInterrupt):
        site.upgrade()
    with pytest.raises(RelStorage4Database, match='not finished'):
        site.storage()
    monkeypatch.setattr(upgrade_module.Upgrade, '_done', original)
    capsys.readouterr()
    assert site.upgrade() == 0
    out = capsys.readouterr().out
    # It went on from the batch after the last one committed.
    assert 'step 1 of' not in out
    assert 'objects up to 0x%x' % (batches[-1]['upgrade_%s_zoid'
                                               % stop_in]) not in out
    assert site.read() == expected


def _interrupt_keeping_references(monkeypatch):
    """Make the upgrade's last step stop as a power cut would, once the
    references are read and before they are recorded as kept."""
    from relstorage.storage import RelStorage
    original = RelStorage.keep_references

    def keep_then_fail(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise KeyboardInterrupt('the power went out')
    monkeypatch.setattr(RelStorage, 'keep_references', keep_then_fail)


def _read_then_pack_reads(site, expected):
    """The site reads what RelStorage 4 read, and its first pack unpickles
    nothing (every reference was kept)."""
    assert site.read() == expected
    storage = site.storage()
    try:
        assert storage.pack_with_result(
            time.time(), referencesf)['prepack_unpickled'] == 0
    finally:
        storage.close()


def test_interrupted_references_resume(site, capsys, monkeypatch):
    """Stopped in its last step, the upgrade leaves a site that opens
    (and reads its blobs), and the next run does that last step rather
    than call the database upgraded."""
    expected = site.build()
    _interrupt_keeping_references(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        site.upgrade()
    said = capsys.readouterr().out
    assert 'step 9 of 9: references' in said
    assert 'upgraded from RelStorage 4' not in said
    monkeypatch.undo()
    assert site.read() == expected
    assert site.upgrade('--dry-run') == 0
    assert 'a run would resume at step 9 of 9 (references)' \
        in capsys.readouterr().out
    # Not finished: RelStorage 4's tables are not dropped yet.
    assert site.upgrade('--drop-old') == 1
    assert 'next step: references' in capsys.readouterr().err
    assert site.upgrade() == 0
    said = capsys.readouterr().out
    assert 'step 8 of' not in said and 'already upgraded' not in said
    assert said.index('step 9 of 9: references') \
        < said.index('kept the references of') \
        < said.index('upgraded from RelStorage 4'), said
    assert site.upgrade() == 0
    assert 'already upgraded' in capsys.readouterr().out
    _read_then_pack_reads(site, expected)


def test_references_an_earlier_release_skipped(site, capsys, monkeypatch):
    """A database whose upgrade an earlier release finished without
    keeping the references (it failed at opening the blob cache, and
    recorded nothing of the last step): a run keeps them."""
    expected = site.build()
    from relstorage.adapters import upgrade as upgrade_module
    _interrupt_keeping_references(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        site.upgrade()
    monkeypatch.undo()
    # What such a release left: the schema marked complete, no row for
    # the last step, no references kept.
    storage = site.storage()
    session = storage._adapter.connect(for_store=True)
    try:
        session.begin()
        session.execute('DELETE FROM relstorage_meta WHERE name = %s',
                        (upgrade_module.REFERENCES_PENDING,))
        session.execute('DELETE FROM state_refs')
        session.commit()
    finally:
        session.close()
        storage.close()
    capsys.readouterr()
    assert site.upgrade() == 0
    said = capsys.readouterr().out
    assert 'step 9 of 9: references' in said and 'kept the references of' \
        in said and 'already upgraded' not in said, said
    assert site.upgrade() == 0
    assert 'already upgraded' in capsys.readouterr().out
    _read_then_pack_reads(site, expected)


@pytest.mark.parametrize('kind', ['postgresql', 'mysql'])
def test_refused_while_relstorage4_holds_the_database(tmp_path, capsys,
                                                      kind):
    site = Site(kind, True, tmp_path)
    try:
        _refused_while_held(site, tmp_path, capsys)
    finally:
        site.empty()


def _refused_while_held(site, tmp_path, capsys):
    expected = site.build()
    # A RelStorage 4 process with a transaction open, as a running site's
    # connections have between requests.
    holder = subprocess.Popen(
        [rs4_python(), '-c', textwrap.dedent('''
            import sys, ZODB, ZODB.config
            sys.path.insert(0, sys.argv[2])
            import rs4_workload
            rs4_workload.adjust_for_mariadb()
            storage = ZODB.config.storageFromString(sys.argv[1])
            db = ZODB.DB(storage)
            conn = db.open()
            conn.root()['m1']['n']
            print('holding', flush=True)
            sys.stdin.readline()
            db.close()
        '''), _config(site.kind, True, site.where, tmp_path / 'b4'),
         os.path.dirname(rs4_workload.__file__)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=tempfile.gettempdir(), env=user_environment())
    try:
        assert holder.stdout.readline().strip() == 'holding'
        assert site.upgrade() == 1
        err = capsys.readouterr().err
        assert 'in use' in err and 'id ' in err, err
    finally:
        holder.communicate('\n', timeout=60)
    # Nothing was changed: RelStorage 4's database is as it was.
    with pytest.raises(RelStorage4Database, match='relstorage-upgrade'):
        site.storage()
    assert site.upgrade() == 0
    assert site.read() == expected


@pytest.mark.parametrize('kind', ['sqlite', 'postgresql'])
def test_a_shared_blob_dir_is_used_as_it_is(tmp_path, kind):
    """A site with shared-blob-dir true keeps its blob directory: after
    the upgrade the same files are read, none copied."""
    site = Site(kind, True, tmp_path)
    try:
        blobs = tmp_path / 'shared-blobs'
        blobs.mkdir()
        expected = build_rs4(kind, True, site.where,
                             str(tmp_path / 'rs4.json'), str(blobs))
        site.config.write_text(site.config.read_text().replace(
            'blob-dir %s' % (tmp_path / 'blobs'),
            'blob-dir %s\n  shared-blob-dir true' % blobs))
        files = sorted(p.relative_to(blobs) for p in blobs.rglob('*.blob'))
        assert files
        assert site.upgrade() == 0
        assert site.read() == expected
        assert sorted(p.relative_to(blobs)
                      for p in blobs.rglob('*.blob')) == files
    finally:
        if site.factory is not None:
            site.empty()


def test_upgrade_refuses_the_other_history_mode(tmp_path, capsys):
    site = Site('sqlite', True, tmp_path)
    site.build()
    site.config.write_text(site.config.read_text().replace(
        'keep-history true', 'keep-history false'))
    assert site.upgrade() == 1
    assert 'set keep-history to true' in capsys.readouterr().err


def test_nothing_to_upgrade(tmp_path, capsys):
    site = Site('sqlite', False, tmp_path)
    assert site.upgrade() == 1
    assert 'holds no RelStorage 4 database' in capsys.readouterr().err


#: ZODB's suites run on each upgraded database: basic storage, iteration
#: and packing, and with history revisions, history and undo.
UPGRADED_SUITES = (BasicStorage.BasicStorage, IteratorStorage.IteratorStorage,
                   PackableStorage.PackableStorage,
                   RevisionStorage.RevisionStorage, HistoryStorage.HistoryStorage,
                   TransactionalUndoStorage.TransactionalUndoStorage)


def test_conformance_on_the_upgraded_database(site):
    """The upgraded database is this storage's own: ZODB's suites pass on
    it (each test starts by emptying it, which the zap also checks)."""
    site.build()
    assert site.upgrade() == 0
    if site.factory is None:
        factory, which = DatabaseFactory.in_child(
            'sqlite', site.keep_history, site.where), 'main'
    else:
        factory, which = site.factory, 'misc'
    mode = 'HP' if site.keep_history else 'HF'
    base = make_classes(site.kind)[
        '%s%sConformance' % ({'sqlite': 'SQLite', 'postgresql': 'PostgreSQL',
                              'mysql': 'MySQL'}[site.kind], mode)]

    class OnUpgraded(base):
        def setUp(self):
            StorageTestBase.setUp(self)
            self.factory = factory
            self._storage = factory.storage(which, zap=True)
            self._clients = []

        def tearDown(self):
            for client in self._clients:
                client.close()
            StorageTestBase.tearDown(self)

        def open(self, **kwargs):
            if self._storage is not None:
                self._storage.close()
            self._storage = factory.storage(which, **kwargs)

        def _new_storage_client(self):
            client = factory.storage(which)
            self._clients.append(client)
            return client

    names = sorted({name for suite in UPGRADED_SUITES for name in vars(suite)
                    if name.startswith('test') and callable(
                        getattr(OnUpgraded, name, None))})
    tests = unittest.TestSuite(OnUpgraded(name) for name in names)
    result = unittest.TestResult()
    tests.run(result)
    assert not result.failures and not result.errors, (
        result.failures + result.errors)[:3]
    assert result.testsRun - len(result.skipped) >= (
        55 if site.keep_history else 20), (result.testsRun, result.skipped)
