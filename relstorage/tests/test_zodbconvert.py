"""zodbconvert: FileStorage (with blobs) into every database and back,
compared transaction by transaction and byte by byte; incremental copies;
a copy killed midway and resumed; and the errors users meet."""
import io
import itertools
import os
import subprocess
import sys

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob
from ZODB.blob import is_blob_record
from ZODB.FileStorage import FileStorage
from ZODB.POSException import POSKeyError

from relstorage import zodbconvert
from relstorage.testing.dbs import DATABASES
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn


def build_source(path, blob_dir, start=0, count=12):
    """A FileStorage with metadata, blobs, changes, deletions and an undo;
    *start* continues an earlier build."""
    db = ZODB.DB(FileStorage(path, blob_dir=blob_dir))
    try:
        for i in range(start, start + count):
            t = transaction.begin()
            t.user = 'user%d' % i
            t.note('transaction %d' % i)
            t.setExtendedInfo('step', i)
            conn = db.open()
            root = conn.root()
            root['m%d' % i] = PersistentMapping(n=i, text='x' * (i * 50))
            if i % 3 == 0:
                root['blob%d' % i] = Blob(os.urandom(1000 * (i + 1)))
            if i % 4 == 1 and 'blob%d' % (i - 1) in root:
                with root['blob%d' % (i - 1)].open('w') as f:
                    f.write(b'rewritten %d' % i)
            if i % 5 == 4:
                root.pop('m%d' % (i - 2), None)
            t.commit()
            conn.close()
        if start == 0:
            # An undo: FileStorage records it with backpointers.
            undo_id = db.undoLog(0, 1)[0]['id']
            db.undo(undo_id)
            transaction.commit()
    finally:
        db.close()


def _blob_bytes(storage, oid, tid):
    with open(storage.loadBlob(oid, tid), 'rb') as f:
        return f.read()


def assert_same_history(src, dst):
    """Every transaction and record of *src* in *dst*, in order, equal,
    blobs byte for byte."""
    count = 0
    for t1, t2 in itertools.zip_longest(src.iterator(), dst.iterator()):
        assert t1 is not None and t2 is not None, 'transaction counts differ'
        assert t1.tid == t2.tid
        assert (t1.user, t1.description) == (t2.user, t2.description)
        assert t1.extension == t2.extension
        r1 = sorted(t1, key=lambda r: r.oid)
        r2 = sorted(t2, key=lambda r: r.oid)
        assert [(r.oid, r.tid, r.data) for r in r1] == [
            (r.oid, r.tid, r.data) for r in r2]
        for r in r1:
            if r.data and is_blob_record(r.data):
                assert _blob_bytes(src, r.oid, r.tid) == _blob_bytes(
                    dst, r.oid, r.tid)
        count += 1
    assert count > 10


def assert_same_current_state(src, dst):
    """What a history-free copy must hold: every current object of *src*
    with its state, serial and blob, and nothing that *src* lacks."""
    oids = {r.oid for t in src.iterator() for r in t}
    count = 0
    for oid in sorted(oids):
        try:
            data, tid = src.load(oid)
        except POSKeyError:  # deleted, or its creation undone
            with pytest.raises(POSKeyError):
                dst.load(oid)
            continue
        assert dst.load(oid) == (data, tid)
        if is_blob_record(data):
            assert _blob_bytes(src, oid, tid) == _blob_bytes(dst, oid, tid)
        count += 1
    assert len(dst) == count > 10


def relstorage_section(factory, name, blob_dir):
    if factory.db == 'sqlite':
        adapter = '<sqlite3>\n data-dir %s\n</sqlite3>' % factory.data_dir()
    elif factory.db == 'postgresql':
        adapter = '<postgresql>\n dsn %s\n</postgresql>' % pg_dsn(
            factory.keep_history)
    else:
        params = mysql_params(factory.keep_history)
        adapter = '<mysql>\n%s\n</mysql>' % '\n'.join(
            ' %s %s' % (k, v) for k, v in params.items() if v)
    return ('<relstorage %s>\n keep-history %s\n blob-dir %s\n%s\n'
            '</relstorage>\n' % (name, 'true' if factory.keep_history
                                 else 'false', blob_dir, adapter))


def filestorage_section(name, path, blob_dir):
    return ('<filestorage %s>\n path %s\n blob-dir %s\n</filestorage>\n'
            % (name, path, blob_dir))


def write_config(tmp_path, filename, source, destination):
    path = tmp_path / filename
    path.write_text('%import relstorage\n' + source + destination)
    return str(path)


def source_and_config(factory, tmp_path, **build):
    """A built source FileStorage and a config copying it into
    *factory*'s database: ``(path, blob dir, config path)``."""
    fs, blobs = str(tmp_path / 'Data.fs'), str(tmp_path / 'blobs')
    build_source(fs, blobs, **build)
    config = write_config(
        tmp_path, 'c.conf', filestorage_section('source', fs, blobs),
        relstorage_section(factory, 'destination', tmp_path / 'cache'))
    return fs, blobs, config


def compare_with_source(factory, fs, blobs, tmp_path, check):
    """Run *check(source, destination)* on the source FileStorage and
    *factory*'s database (through a fresh blob cache)."""
    src = FileStorage(fs, blob_dir=blobs, read_only=True)
    dst = factory.storage(blob_dir=str(tmp_path / 'check'))
    try:
        check(src, dst)
    finally:
        dst.close()
        src.close()


def run(config, *flags):
    out, err = io.StringIO(), io.StringIO()
    old = sys.stderr
    sys.stderr = err
    try:
        status = zodbconvert.main(list(flags) + [config], out=out)
    finally:
        sys.stderr = old
    return status, out.getvalue(), err.getvalue()


def test_round_trip_filestorage_database_filestorage(factory, tmp_path):
    fs = str(tmp_path / 'Data.fs')
    build_source(fs, str(tmp_path / 'blobs'))
    db_section = relstorage_section(factory, 'destination',
                                    tmp_path / 'cache')
    status, out, err = run(write_config(
        tmp_path, 'in.conf',
        filestorage_section('source', fs, tmp_path / 'blobs'), db_section))
    assert status == 0, err
    assert 'copied 1' in out and 'blobs' in out
    assert 'kept the references of' in out
    src = FileStorage(fs, blob_dir=str(tmp_path / 'blobs'), read_only=True)
    dst = factory.storage(blob_dir=str(tmp_path / 'check-cache'))
    try:
        if factory.keep_history:
            assert_same_history(src, dst)
        else:
            assert_same_current_state(src, dst)
        # The copy kept what each state refers to: the first pack reads
        # no state again.
        assert dst.keep_references()['prepack_unpickled'] == 0
    finally:
        dst.close()
    if not factory.keep_history:
        src.close()
        return
    # And back out into a new FileStorage.
    back = str(tmp_path / 'Back.fs')
    status, out, err = run(write_config(
        tmp_path, 'out.conf',
        db_section.replace('destination', 'source'),
        filestorage_section('destination', back, tmp_path / 'back-blobs')))
    assert status == 0, err
    copy = FileStorage(back, blob_dir=str(tmp_path / 'back-blobs'),
                       read_only=True)
    try:
        assert_same_history(src, copy)
    finally:
        copy.close()
        src.close()


@pytest.mark.parametrize('db_name', DATABASES)
def test_incremental_copy_adds_only_what_is_new(db_name, tmp_path):
    factory = DatabaseFactory(db_name, True)
    factory.storage(zap=True).close()
    try:
        fs, blobs, config = source_and_config(factory, tmp_path)
        assert run(config)[0] == 0
        # Copying again without a flag is refused: nothing is duplicated.
        status, _, err = run(config)
        assert status == 1 and 'is not empty' in err
        build_source(fs, blobs, start=100, count=5)
        status, out, err = run(config, '--incremental')
        assert status == 0, err
        assert 'copied 5 transactions' in out
        compare_with_source(factory, fs, blobs, tmp_path,
                            assert_same_history)
        # Nothing new: nothing copied.
        status, out, _ = run(config, '--incremental')
        assert status == 0 and 'copied 0 transactions' in out
    finally:
        factory.cleanup()


def _build_plain(path, start, count):
    """*count* transactions without blobs: new objects, changes, and
    deletions."""
    db = ZODB.DB(FileStorage(path))
    try:
        for i in range(start, start + count):
            with db.transaction() as conn:
                root = conn.root()
                root['a%d' % i] = PersistentMapping(n=i)
                root['b%d' % i] = PersistentMapping(n=-i)
                if i:
                    root['a%d' % (i - 1)]['n'] += 100
                if i % 4 == 3:
                    del root['b%d' % (i - 3)]
    finally:
        db.close()


@pytest.mark.parametrize('db_name', DATABASES)
def test_history_free_copy_commits_many_transactions_at_once(
        db_name, tmp_path, monkeypatch):
    """Into a history-free database, source transactions go in groups,
    each object keeping its own serial; a reader polling meanwhile sees
    every object change; an incremental copy resumes after a group."""
    from relstorage.storage import copy
    monkeypatch.setattr(copy, 'GROUP_RECORDS', 10)
    factory = DatabaseFactory(db_name, False)
    fs = str(tmp_path / 'Data.fs')
    _build_plain(fs, 0, 30)
    dst = factory.storage(zap=True)
    reader = factory.storage()
    commits = []
    finish = dst.tpc_finish
    dst.tpc_finish = lambda *a: commits.append(1) or finish(*a)
    try:
        assert reader.poll_invalidations() == []
        src = FileStorage(fs, read_only=True)
        result = copy.copy_transactions(src, dst)
        assert result['transactions'] == 31  # with the root's creation
        assert 3 <= len(commits) < 31
        assert dst.lastTransaction() == src.lastTransaction()
        assert_same_current_state(src, dst)
        changed = set(reader.poll_invalidations())
        assert changed == {r.oid for t in src.iterator() for r in t}
        src.close()

        _build_plain(fs, 30, 7)
        src = FileStorage(fs, read_only=True)
        after = copy.resume_point(src, dst)
        result = copy.copy_transactions(src, dst, after)
        assert result['transactions'] == 7
        assert_same_current_state(src, dst)
        src.close()
    finally:
        reader.close()
        dst.close()
        factory.cleanup()


KILLED_COPY = '''
import os, sys
from ZODB.FileStorage import FileStorage
from relstorage.storage.copy import copy_transactions
from relstorage.testing.dbs import DatabaseFactory
fs, blobs, db_name, data_dir, cache, kill_at = sys.argv[1:7]
src = FileStorage(fs, blob_dir=blobs, read_only=True)
dst = DatabaseFactory.in_child(db_name, True, data_dir).storage(
    blob_dir=cache)
votes = []
original = dst.tpc_vote

def tpc_vote(transaction):
    result = original(transaction)
    votes.append(1)
    if len(votes) == int(kill_at):
        # Rows and blob chunks are uploaded, the commit is not done.
        os.kill(os.getpid(), 9)
    return result

dst.tpc_vote = tpc_vote
copy_transactions(src, dst)
'''


@pytest.mark.parametrize('db_name', DATABASES)
def test_copy_killed_midway_resumes_with_incremental(db_name, tmp_path):
    factory = DatabaseFactory(db_name, True)
    factory.storage(zap=True).close()
    try:
        fs, blobs, config = source_and_config(factory, tmp_path, count=30)
        env = child_env()
        proc = subprocess.run(
            [sys.executable, '-c', KILLED_COPY, fs, blobs, db_name,
             factory.data_dir(), str(tmp_path / 'cache1'), '16'],
            env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == -9, proc.stderr
        partial = factory.storage()
        try:
            # Fifteen whole transactions, not a trace of the sixteenth.
            assert len(list(partial.iterator())) == 15
        finally:
            partial.close()
        status, out, err = run(config, '--incremental')
        assert status == 0, err
        compare_with_source(factory, fs, blobs, tmp_path,
                            assert_same_history)
    finally:
        factory.cleanup()


def test_dry_run_writes_nothing(tmp_path):
    factory = DatabaseFactory('sqlite', True)
    try:
        fs, blobs, config = source_and_config(factory, tmp_path)
        status, out, err = run(config, '--dry-run')
        assert status == 0, err
        assert 'would copy 1' in out
        dst = factory.storage()
        try:
            assert len(dst) == 0
        finally:
            dst.close()
    finally:
        factory.cleanup()


def _tables(db_name):
    """The tables in the test server's ``misc`` database."""
    if db_name == 'postgresql':
        import psycopg2
        conn = psycopg2.connect(pg_dsn(True, 'misc'))
        sql = ("SELECT table_name FROM information_schema.tables "
               "WHERE table_schema = 'public'")
    else:
        import MySQLdb
        conn = MySQLdb.connect(**mysql_params(True, 'misc'))
        sql = ('SELECT table_name FROM information_schema.tables '
               'WHERE table_schema = DATABASE()')
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


@pytest.mark.parametrize('db_name', ['postgresql', 'mysql'])
def test_dry_run_leaves_an_empty_server_database_empty(db_name, tmp_path):
    factory = DatabaseFactory(db_name, True)
    factory.adapter('misc').drop_all()
    assert _tables(db_name) == []
    fs, blobs = str(tmp_path / 'Data.fs'), str(tmp_path / 'blobs')
    build_source(fs, blobs, count=4)
    if db_name == 'postgresql':
        adapter = '<postgresql>\n dsn %s\n</postgresql>' % pg_dsn(
            True, 'misc')
    else:
        adapter = '<mysql>\n%s\n</mysql>' % '\n'.join(
            ' %s %s' % item for item in mysql_params(True, 'misc').items())
    cache = tmp_path / 'cache'
    config = write_config(
        tmp_path, 'c.conf', filestorage_section('source', fs, blobs),
        '<relstorage destination>\n blob-dir %s\n%s\n</relstorage>\n'
        % (cache, adapter))
    status, out, err = run(config, '--dry-run')
    assert status == 0, err
    assert 'would copy 6 transactions' in out
    destination = out.splitlines()[1]
    assert destination.startswith('destination: ')
    # Which database, and no password.
    assert ('database (%s=relstoragetest_misc host=127.0.0.1'
            % ('dbname' if db_name == 'postgresql' else 'db')) in destination
    assert 'pass' not in destination
    assert 'does not exist yet' in destination
    assert _tables(db_name) == []
    assert not cache.exists()


def test_dry_run_creates_no_sqlite_database_or_blob_dir(tmp_path):
    fs, blobs = str(tmp_path / 'Data.fs'), str(tmp_path / 'blobs')
    build_source(fs, blobs, count=4)
    empty_dir = tmp_path / 'empty'
    empty_dir.mkdir()
    for data_dir in (tmp_path / 'missing', empty_dir):
        cache = tmp_path / 'cache'
        config = write_config(
            tmp_path, 'c.conf', filestorage_section('source', fs, blobs),
            '<relstorage destination>\n blob-dir %s\n <sqlite3>\n'
            '  data-dir %s\n </sqlite3>\n</relstorage>\n'
            % (cache, data_dir))
        status, out, err = run(config, '--dry-run')
        assert status == 0, err
        assert ('destination: SQLite database in %s (does not exist yet'
                % data_dir) in out
        assert 'would copy 6 transactions' in out
        assert not cache.exists()
    assert not (tmp_path / 'missing').exists()
    assert list(empty_dir.iterdir()) == []


def _sqlite_with_data(keep_history):
    """A factory of an SQLite database whose root holds ``old``."""
    factory = DatabaseFactory('sqlite', keep_history)
    db = ZODB.DB(factory.storage())
    with db.transaction() as conn:
        conn.root()['old'] = PersistentMapping()
    db.close()
    return factory


def test_dry_run_into_a_database_with_data_changes_nothing(tmp_path):
    factory = _sqlite_with_data(True)
    try:
        fs, blobs, config = source_and_config(factory, tmp_path)
        status, out, err = run(config, '--dry-run')
        assert status == 1 and 'is not empty' in err
        status, out, err = run(config, '--dry-run', '--clear')
        assert status == 0, err
        assert 'would clear SQLite database in %s' % factory.data_dir() in out
        assert not (tmp_path / 'cache').exists()
        db = ZODB.DB(factory.storage())
        try:
            with db.transaction() as conn:
                assert list(conn.root()) == ['old']
            assert len(db.storage) == 2
        finally:
            db.close()
    finally:
        factory.cleanup()


def test_clear_replaces_the_destination(tmp_path):
    factory = _sqlite_with_data(False)
    try:
        fs, blobs, config = source_and_config(factory, tmp_path)
        status, out, err = run(config, '--clear')
        assert status == 0, err
        compare_with_source(factory, fs, blobs, tmp_path,
                            assert_same_current_state)
    finally:
        factory.cleanup()


@pytest.mark.parametrize('sections, flags, status, message', [
    ('', [], 2, 'missing: source, destination'),
    ('<filestorage source>\n path %(tmp)s/Data.fs\n</filestorage>\n',
     [], 2, 'missing: destination'),
    ('<filestorage source>\n path %(tmp)s/none.fs\n</filestorage>\n'
     '<filestorage destination>\n path %(tmp)s/out.fs\n</filestorage>\n',
     [], 1, 'none.fs does not exist'),
    ('<filestorage source>\n path %(tmp)s/Data.fs\n</filestorage>\n'
     '<filestorage destination>\n path %(tmp)s/out.fs\n</filestorage>\n',
     ['--clear'], 1, '--clear cannot empty'),
    ('<filestorage source>\n path %(tmp)s/Data.fs\n blob-dir %(tmp)s/b\n'
     '</filestorage>\n<relstorage destination>\n <sqlite3>\n'
     '  data-dir %(tmp)s/db\n </sqlite3>\n</relstorage>\n',
     [], 1, 'has no blob directory'),
    ('<nonsense source>\n</nonsense>\n', [], 2, 'nonsense'),
])
def test_errors_are_named(tmp_path, sections, flags, status, message):
    build_source(str(tmp_path / 'Data.fs'), str(tmp_path / 'b'), count=3)
    config = tmp_path / 'c.conf'
    config.write_text('%import relstorage\n'
                      + sections % {'tmp': tmp_path})
    got, out, err = run(str(config), *flags)
    assert got == status, (out, err)
    assert message in err
    assert not os.path.exists(str(tmp_path / 'none.fs'))


def test_missing_config_file(tmp_path):
    status, _, err = run(str(tmp_path / 'nope.conf'))
    assert status == 2 and 'no such configuration file' in err


@pytest.mark.parametrize('flag', ['--debug', '--trace'])
def test_relstorage4_logging_flags(tmp_path, flag):
    """RelStorage 4's --debug and --trace are taken: a copy runs as
    without them, and a failure comes with its traceback."""
    factory = DatabaseFactory('sqlite', True)
    try:
        fs, blobs, config = source_and_config(factory, tmp_path, count=2)
        command = [sys.executable, '-m', 'relstorage.zodbconvert']
        done = subprocess.run(command + [flag, config], capture_output=True,
                              text=True, env=child_env(), timeout=300)
        assert done.returncode == 0, done.stderr
        assert 'copied' in done.stdout, done.stdout
        missing = write_config(
            tmp_path, 'missing.conf',
            filestorage_section('source', tmp_path / 'none.fs', blobs),
            relstorage_section(factory, 'destination', tmp_path / 'cache'))
        for flags, traceback in (([flag], True), ([], False)):
            done = subprocess.run(command + flags + [missing],
                                  capture_output=True, text=True,
                                  env=child_env(), timeout=300)
            assert done.returncode == 1
            assert 'does not exist' in done.stderr
            assert ('Traceback' in done.stderr) == traceback, done.stderr
    finally:
        factory.cleanup()
