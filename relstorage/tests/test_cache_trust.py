"""``cache-local-dir`` trusts nothing it finds on disk.

A file whose states were changed (its checksum made to match again) is
not served and its states never reach the database; a pickle in it never
runs. A directory or file that another user owns or may write, anything
at the file's place that is not a regular file (a symbolic link, a
FIFO), and a file bigger than the cache allows are refused with a
warning naming the path, and the storage runs without them. What the
storage creates is its user's alone, whatever the umask.
"""
import io
import logging
import os
import pickletools
import stat
import threading
import zlib

import pytest
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.MappingStorage import MappingStorage

from relstorage.cache import persist
from relstorage.testing.atonce import at_once
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import require

from .cache_files import cached
from .cache_files import fill
from .cache_files import mode_factories
from .cache_files import open_db

N = 20
NOBODY = 65534
LOGGER = 'relstorage.cache.persist'


factory = mode_factories()


@pytest.fixture
def sqlite():
    f = DatabaseFactory('sqlite', True)
    yield f
    f.cleanup()


_open = open_db


def _fill(factory):
    fill(factory, N)


def _values(db):
    with db.transaction() as conn:
        return [conn.root()['o%d' % n]['n'] for n in range(N)]


_cached = cached


def _warm_file(factory, cache_dir):
    """Fill the database, run a storage that reads everything, and return
    the path of the file it left."""
    _fill(factory)
    db = _open(factory, cache_dir)
    _values(db)
    db.close()
    (name,) = [n for n in os.listdir(cache_dir) if n.endswith('.cache')]
    return os.path.join(str(cache_dir), name)


def _oid(factory, name):
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            return int.from_bytes(conn.root()[name]._p_oid, 'big')
    finally:
        db.close()


def _forge(path, oid, make_state):
    """Rewrite the file at *path* as someone who knows its layout but no
    secret would: the state of *oid* replaced by ``make_state(old)``,
    and the checksum computed again."""
    with open(path, 'rb') as f:
        data = f.read()
    trailer = persist._TRAILER
    body, fields = data[:-trailer.size], list(
        trailer.unpack(data[-trailer.size:]))
    pos = body.index(b'\n', len(persist.MAGIC)) + 1
    out = [body[:pos]]
    found = False
    while pos < len(body):
        entry_oid, tid, size = persist._ENTRY.unpack_from(body, pos)
        state = body[pos + persist._ENTRY.size:pos + persist._ENTRY.size
                     + size]
        pos += persist._ENTRY.size + size
        if entry_oid == oid:
            state = make_state(state)
            found = True
        out.append(persist._ENTRY.pack(entry_oid, tid, len(state)) + state)
    assert found
    new_body = b''.join(out)
    fields[1] = zlib.crc32(new_body)
    with open(path, 'wb') as f:
        f.write(new_body + trailer.pack(*fields))


def _record(obj):
    """The ZODB record (class pickle + state pickle) of *obj*."""
    storage = MappingStorage()
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        conn.root()['x'] = obj
    data, _ = storage.load(obj._p_oid)
    db.close()
    return data


def _class_pickle(record):
    """The first of the two pickles of a ZODB record."""
    for op, _, pos in pickletools.genops(io.BytesIO(record)):
        if op.name == 'STOP':
            return record[:pos + 1]
    raise AssertionError('no STOP')


def test_a_forged_state_is_neither_served_nor_committed(factory, tmp_path,
                                                        caplog):
    path = _warm_file(factory, tmp_path / 'cache')
    oid = _oid(factory, 'o5')
    forged = _record(PersistentMapping(n='forged'))
    _forge(path, oid, lambda old: forged)

    with caplog.at_level(logging.WARNING, LOGGER):
        db = _open(factory, tmp_path / 'cache')
    try:
        values = _values(db)
        # An ordinary commit that touches the object.
        with db.transaction() as conn:
            conn.root()['o5']['seen'] = True
    finally:
        db.close()
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            assert dict(conn.root()['o5']) == {'n': 5, 'seen': True}
    finally:
        db.close()
    assert values == list(range(N))
    assert 'ignoring %s' % path in caplog.text
    assert 'signature' in caplog.text
    # The key signing the files is in no message.
    adapter = factory.adapter()
    assert adapter.cache_key().hex() not in caplog.text
    adapter.close()


def test_a_pickle_in_a_forged_file_never_runs(factory, tmp_path):
    path = _warm_file(factory, tmp_path / 'cache')
    marker = tmp_path / 'marker'
    command = ('touch %s' % marker).encode()
    _forge(path, _oid(factory, 'o3'), lambda old: _class_pickle(old)
           + b"cos\nsystem\n(S'" + command + b"'\ntR.")
    db = _open(factory, tmp_path / 'cache')
    try:
        try:
            values = _values(db)
        except Exception:  # noqa: BLE001 -- what the marker tells counts
            values = None
        assert not marker.exists()
        assert values == list(range(N))
    finally:
        db.close()


def _refused(factory, tmp_path, caplog, what):
    """Open a storage on the cache directory; assert it warned naming
    *what* and used nothing from the directory."""
    with caplog.at_level(logging.WARNING, LOGGER):
        db = _open(factory, tmp_path / 'cache')
    try:
        assert _cached(db) == 0
        assert _values(db) == list(range(N))
    finally:
        db.close()
    assert what in caplog.text, caplog.text
    return caplog.text


@pytest.mark.parametrize('mode', [0o777, 0o1777, 0o770, 0o720, 0o702],
                         ids=lambda mode: '%04o' % mode)
def test_a_directory_others_may_write_is_refused(sqlite, tmp_path, caplog,
                                                 mode):
    path = _warm_file(sqlite, tmp_path / 'cache')
    before = os.stat(path)
    os.chmod(tmp_path / 'cache', mode)
    text = _refused(sqlite, tmp_path, caplog,
                    'not using %s: the directory is writable by'
                    % (tmp_path / 'cache'))
    assert 'running without the persistent cache' in text
    # Nothing was written there either.
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert sorted(os.listdir(tmp_path / 'cache')) == [os.path.basename(path)]


def test_a_directory_another_user_owns_is_refused(sqlite, tmp_path, caplog):
    path = _warm_file(sqlite, tmp_path / 'cache')
    before = os.stat(path)
    os.chown(tmp_path / 'cache', NOBODY, -1)
    _refused(sqlite, tmp_path, caplog,
             'not using %s: the directory is owned by uid %d'
             % (tmp_path / 'cache', NOBODY))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns


@pytest.mark.parametrize('change', ['chown', 'chmod-g', 'chmod-o'])
def test_a_file_another_user_owns_or_may_write_is_refused(
        sqlite, tmp_path, caplog, change):
    path = _warm_file(sqlite, tmp_path / 'cache')
    if change == 'chown':
        os.chown(path, NOBODY, -1)
        what = 'the file is owned by uid %d' % NOBODY
    else:
        os.chmod(path, 0o620 if change == 'chmod-g' else 0o602)
        what = 'the file is writable by'
    _refused(sqlite, tmp_path, caplog, 'ignoring %s: %s' % (path, what))
    # Closing wrote a new file of the storage's own, 0600.
    st = os.stat(path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o600)


def test_a_symlink_at_the_file_is_refused_and_never_followed(
        sqlite, tmp_path, caplog):
    path = _warm_file(sqlite, tmp_path / 'cache')
    # A whole, valid file -- but reached through a link.
    target = tmp_path / 'elsewhere.cache'
    os.replace(path, target)
    content = target.read_bytes()
    os.symlink(target, path)
    _refused(sqlite, tmp_path, caplog,
             'ignoring %s: it is a symbolic link' % path)
    # The link was replaced, not written through.
    assert not os.path.islink(path)
    assert target.read_bytes() == content


def test_a_symlink_to_dev_zero_is_refused(sqlite, tmp_path, caplog):
    path = _warm_file(sqlite, tmp_path / 'cache')
    os.remove(path)
    os.symlink('/dev/zero', path)
    _refused(sqlite, tmp_path, caplog,
             'ignoring %s: it is a symbolic link' % path)


def test_a_fifo_at_the_file_does_not_hang(sqlite, tmp_path, caplog):
    path = _warm_file(sqlite, tmp_path / 'cache')
    os.remove(path)
    os.mkfifo(path, 0o600)

    # Were the open to wait for a writer, this releases it (with an
    # empty read) so that the test ends and fails on what it asserts;
    # with O_NONBLOCK it finds no reader and does nothing.
    done = threading.Event()

    def release():
        if done.wait(60):
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)
    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    try:
        _refused(sqlite, tmp_path, caplog,
                 'ignoring %s: it is a FIFO, not a regular file' % path)
    finally:
        done.set()
        releaser.join()
    assert stat.S_ISREG(os.lstat(path).st_mode)


def test_a_file_bigger_than_the_cache_allows_is_refused(sqlite, tmp_path,
                                                        caplog):
    """A file written by a storage with a bigger cache, and a sparse file
    far too big to read, are refused by their size."""
    _fill(sqlite)
    db = _open(sqlite, tmp_path / 'cache', cache_local_mb=1)
    _values(db)
    db.close()
    (name,) = os.listdir(tmp_path / 'cache')
    path = str(tmp_path / 'cache' / name)
    size = os.path.getsize(path)
    # A cache whose bound is below the file's size.
    small = (size - 1000) / 1e6
    with caplog.at_level(logging.WARNING, LOGGER):
        db = _open(sqlite, tmp_path / 'cache', cache_local_mb=small)
    try:
        assert _cached(db) == 0
    finally:
        db.close()
    assert 'ignoring %s: it holds %d bytes, more than' % (path, size) \
        in caplog.text
    caplog.clear()
    with open(path, 'r+b') as f:
        f.truncate(1 << 40)
    _refused(sqlite, tmp_path, caplog,
             'ignoring %s: it holds %d bytes' % (path, 1 << 40))


def test_created_0700_and_0600_whatever_the_umask(sqlite, tmp_path):
    _fill(sqlite)
    cache_dir = tmp_path / 'a' / 'b' / 'cache'
    old = os.umask(0)
    try:
        db = _open(sqlite, cache_dir)
        _values(db)
        db.close()
    finally:
        os.umask(old)
    for d in (tmp_path / 'a', tmp_path / 'a' / 'b', cache_dir):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    (name,) = os.listdir(cache_dir)
    assert stat.S_IMODE(os.stat(cache_dir / name).st_mode) == 0o600
    # And the file is used by the next storage.
    db = _open(sqlite, cache_dir)
    try:
        assert _cached(db) == N
    finally:
        db.close()


# The key that signs the files lives in the database.

def _session_sql(factory, stmt, params=()):
    adapter = factory.adapter()
    session = adapter.connect(for_store=True)
    try:
        session.begin()
        session.execute(stmt, params)
        session.commit()
    finally:
        session.close()
        adapter.close()


def _forget_key(factory):
    """Make the database one created before the key existed."""
    _session_sql(factory, 'DELETE FROM relstorage_meta WHERE name = %s',
                 ('cache_key',))


sqlite_pg = mode_factories(('sqlite', 'postgresql'))


def test_an_older_database_gets_its_key_when_first_needed(sqlite_pg,
                                                          tmp_path):
    _fill(sqlite_pg)
    _forget_key(sqlite_pg)
    # A storage without cache-local-dir leaves the database as it was.
    ZODB.DB(sqlite_pg.storage()).close()
    adapter = sqlite_pg.adapter(read_only=True)
    assert adapter.setup.read_cache_key() is None
    path = _warm_file(sqlite_pg, tmp_path / 'cache')
    key = adapter.cache_key()
    adapter.close()
    assert len(key) == 32
    with open(path, 'rb') as f:
        assert persist.parse(f.read(), key, _identity(sqlite_pg))[1]
    db = _open(sqlite_pg, tmp_path / 'cache')
    try:
        assert _cached(db) == N
    finally:
        db.close()


def _identity(factory):
    adapter = factory.adapter()
    try:
        return persist._identity(adapter)
    finally:
        adapter.close()


def test_read_only_without_a_key_runs_without_the_file(sqlite_pg, tmp_path,
                                                       caplog):
    _fill(sqlite_pg)
    _forget_key(sqlite_pg)
    with caplog.at_level(logging.WARNING, LOGGER):
        db = _open(sqlite_pg, tmp_path / 'cache', read_only=True)
    try:
        assert _values(db) == list(range(N))
    finally:
        db.close()
    assert ('not using %s: ' % (tmp_path / 'cache')) in caplog.text
    assert 'holds no cache key yet, and the storage is read-only' \
        in caplog.text
    assert os.listdir(tmp_path / 'cache') == []
    # Once a storage that may write made the key, a read-only one uses
    # the file.
    _warm_file(sqlite_pg, tmp_path / 'cache')
    db = _open(sqlite_pg, tmp_path / 'cache', read_only=True)
    try:
        assert _cached(db) == N
        assert _values(db) == list(range(N))
    finally:
        db.close()


RO_USER = 'relstoragetest_ro'


def test_a_user_that_may_only_read_runs_without_then_with_the_file(
        tmp_path, caplog):
    """PostgreSQL, a user with SELECT only (scripts/testdb.sh makes it):
    it cannot create the key, so it warns and runs without the file; once
    the key exists it uses the file."""
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.exceptions import DatabaseUnavailable
    from relstorage.options import Options
    from relstorage.storage import RelStorage

    from relstorage.testing.dbs import PG_PASSWORD
    from relstorage.testing.dbs import PG_USER
    from relstorage.testing.dbs import in_ci
    from relstorage.testing.dbs import pg_dsn
    require('postgresql')
    factory = DatabaseFactory('postgresql', True)
    _fill(factory)
    _forget_key(factory)
    _session_sql(factory, 'GRANT SELECT ON ALL TABLES IN SCHEMA public TO '
                 + RO_USER)
    dsn = pg_dsn(True).replace('user=%s' % PG_USER, 'user=%s' % RO_USER
                               ).replace('password=%s' % PG_PASSWORD,
                                         'password=%s' % RO_USER)

    def open_db():
        return ZODB.DB(RelStorage(PostgreSQLAdapter(dsn, options=Options(
            keep_history=True, cache_local_dir=str(tmp_path / 'cache')))))
    try:
        with caplog.at_level(logging.WARNING, LOGGER):
            db = open_db()
    except DatabaseUnavailable as e:
        if in_ci():
            raise
        pytest.skip('no read-only test account (scripts/testdb.sh): %s' % e)
    try:
        assert _values(db) == list(range(N))
    finally:
        db.close()
    assert 'the database user may not create the cache key' in caplog.text
    assert 'permission denied for table relstorage_meta' in caplog.text
    assert 'password' not in caplog.text
    assert 'running without the persistent cache' in caplog.text
    assert os.listdir(tmp_path / 'cache') == []
    _warm_file(factory, tmp_path / 'cache')
    db = open_db()
    try:
        assert _cached(db) == N
    finally:
        db.close()


def test_processes_creating_the_key_at_once_agree(sqlite_pg):
    """Storages starting together on a database without a key: one
    creates it, the others read that one."""
    _fill(sqlite_pg)
    _forget_key(sqlite_pg)
    adapters = [sqlite_pg.adapter() for _ in range(4)]
    keys = at_once([adapter.cache_key for adapter in adapters])
    for adapter in adapters:
        adapter.close()
    assert all(isinstance(key, bytes) for key in keys), keys
    assert len(set(keys)) == 1


def test_a_directory_path_that_is_a_fifo_is_refused(sqlite, tmp_path,
                                                    caplog):
    _fill(sqlite)
    os.mkfifo(tmp_path / 'cache', 0o600)
    with caplog.at_level(logging.WARNING, LOGGER):
        db = _open(sqlite, tmp_path / 'cache')
    try:
        assert _values(db) == list(range(N))
    finally:
        db.close()
    assert ('not using %s: cannot open the directory'
            % (tmp_path / 'cache')) in caplog.text
