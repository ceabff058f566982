"""The blob cache (``blob-dir`` with ``shared-blob-dir false``) trusts
nothing it finds on disk: its directory must be the process user's own and
writable by no one else, and a cached file is served only if it is a
regular file of that user, writable by no one else, exactly as long as the
blob in the database; anything else is downloaded again. A shared blob-dir
(the blobs' only home) only gets a warning."""
import contextlib
import errno
import logging
import os
import stat
import threading

import pytest
import transaction
import ZODB
from ZODB.blob import Blob
from ZODB.POSException import POSKeyError

from relstorage.blobs.cachesize import cache_files
from relstorage.blobs.cachesize import shrink
from relstorage.exceptions import ConfigurationError
from relstorage.testing.dbs import DatabaseFactory

from .inspecting import execute

PAYLOAD = b'the real blob, as committed. ' * 300
OTHER_UID = 65534  # nobody


@contextlib.contextmanager
def _db(factory, blob_dir, **kw):
    db = ZODB.DB(factory.storage(blob_dir=str(blob_dir), **kw))
    try:
        yield db
    finally:
        db.close()


def _commit_blob(factory, blob_dir):
    """Commit PAYLOAD as root['b'] through a storage whose cache is
    *blob_dir*; the cache path of its revision."""
    with _db(factory, blob_dir) as db:
        with db.transaction() as conn:
            conn.root()['b'] = Blob(PAYLOAD)
        with db.transaction() as conn:
            blob = conn.root()['b']
            blob._p_activate()
            oid, tid = blob._p_oid, blob._p_serial
        return db.storage.fshelper.getBlobFilename(oid, tid)


def _read_blob(factory, blob_dir, size=None):
    """What the application reads as root['b'] through a new storage on
    the cache *blob_dir* (at most *size* bytes)."""
    with _db(factory, blob_dir) as db:
        with db.transaction() as conn:
            with conn.root()['b'].open('r') as f:
                return f.read(-1 if size is None else size)


def _plant(path, data, mode=0o400, uid=None):
    """Put a regular file holding *data* at *path*, as a local user
    would (renamed over whatever is there)."""
    temp = path + '.planted'
    with open(temp, 'wb') as f:
        f.write(data)
    os.chmod(temp, mode)
    if uid is not None:
        os.chown(temp, uid, -1)
    os.replace(temp, path)


def _forged():
    return b'X' * len(PAYLOAD)


@pytest.fixture
def cache(factory, tmp_path):
    """``(cache dir, cached path of root['b'])`` after the commit."""
    blob_dir = tmp_path / 'cache'
    return blob_dir, _commit_blob(factory, blob_dir)


# Files in the cache


def test_a_file_another_user_put_there_is_not_served(factory, cache,
                                                     caplog):
    blob_dir, path = cache
    _plant(path, _forged(), uid=OTHER_UID)
    with caplog.at_level(logging.WARNING, 'relstorage.blobs'):
        assert _read_blob(factory, blob_dir) == PAYLOAD
    assert any(path in r.getMessage() and 'uid %d' % OTHER_UID
               in r.getMessage() for r in caplog.records), caplog.text
    # Replaced by the storage's own download.
    st = os.lstat(path)
    assert st.st_uid == os.geteuid() and stat.S_ISREG(st.st_mode)


@pytest.mark.parametrize('mode', [0o666, 0o620, 0o602])
def test_a_file_others_may_write_is_not_served(factory, cache, mode):
    blob_dir, path = cache
    _plant(path, _forged(), mode=mode)
    assert _read_blob(factory, blob_dir) == PAYLOAD


def test_a_symlink_at_a_blob_is_not_followed(factory, cache, tmp_path):
    # The target is an ordinary file of the same size and owner (a link to
    # /etc/shadow would be followed just the same, but its text does not
    # belong in a test's output).
    blob_dir, path = cache
    target = tmp_path / 'elsewhere'
    target.write_bytes(_forged())
    target.chmod(0o400)
    os.replace(_symlink_beside(path, str(target)), path)
    assert _read_blob(factory, blob_dir) == PAYLOAD
    assert not os.path.islink(path)
    assert target.read_bytes() == _forged()  # never written through


def test_a_symlink_to_dev_zero_is_not_followed(factory, cache):
    blob_dir, path = cache
    os.replace(_symlink_beside(path, '/dev/zero'), path)
    # At most one byte more than the blob is read, so the old behaviour
    # fails here instead of reading forever.
    assert _read_blob(factory, blob_dir, len(PAYLOAD) + 1) == PAYLOAD


def _symlink_beside(path, target):
    link = path + '.link'
    os.symlink(target, link)
    return link


def test_a_fifo_at_a_blob_does_not_hang(factory, cache):
    blob_dir, path = cache
    os.remove(path)
    os.mkfifo(path, 0o600)
    done = threading.Event()

    def release():
        # Only if a reader still waits on the FIFO after a while: open
        # it for writing and close it, so that reader sees an empty file
        # (and the test fails on its assertion rather than hanging).
        while not done.wait(10):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno not in (errno.ENXIO, errno.ENOENT):
                    raise

    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    try:
        assert _read_blob(factory, blob_dir) == PAYLOAD
    finally:
        done.set()
        releaser.join()
    assert stat.S_ISREG(os.lstat(path).st_mode)


@pytest.mark.parametrize('size', [0, len(PAYLOAD) // 2, len(PAYLOAD) - 1,
                                  len(PAYLOAD) + 1])
def test_a_file_of_the_wrong_size_is_downloaded_again(factory, cache,
                                                      size):
    # What a crash can leave (a file cut short), or anything else that is
    # not as long as the blob in the database.
    blob_dir, path = cache
    _plant(path, PAYLOAD[:size].ljust(size, b'!'))
    assert _read_blob(factory, blob_dir) == PAYLOAD
    assert os.path.getsize(path) == len(PAYLOAD)


def test_a_good_cached_file_is_served_as_is(factory, cache):
    blob_dir, path = cache
    before = os.lstat(path)
    assert _read_blob(factory, blob_dir) == PAYLOAD
    after = os.lstat(path)
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)


def test_a_file_of_the_right_size_with_other_bytes_is_not_served(
        factory, cache, caplog):
    # The process user's own, read-only, as long as the blob: only its
    # signature (keyed with the database's cache key) tells it apart.
    blob_dir, path = cache
    assert os.path.exists(path + '.sig')
    _plant(path, _forged())
    with caplog.at_level(logging.WARNING, 'relstorage.blobs'):
        assert _read_blob(factory, blob_dir) == PAYLOAD
    assert any(path in r.getMessage() and 'signature' in r.getMessage()
               for r in caplog.records), caplog.text


def test_a_file_without_a_signature_is_downloaded_again(factory, cache):
    # A cache filled by an earlier version, say.
    blob_dir, path = cache
    os.remove(path + '.sig')
    before = os.lstat(path)
    assert _read_blob(factory, blob_dir) == PAYLOAD
    assert os.lstat(path).st_ino != before.st_ino
    assert os.path.exists(path + '.sig')
    again = os.lstat(path)
    assert _read_blob(factory, blob_dir) == PAYLOAD
    assert os.lstat(path).st_ino == again.st_ino


def test_without_a_cache_key_files_are_checked_by_size(sqlite, tmp_path,
                                                       caplog):
    # A read-only storage on a database that has no cache key yet cannot
    # sign: it says so and checks the size only.
    blob_dir = tmp_path / 'cache'
    path = _commit_blob(sqlite, blob_dir)
    execute(sqlite, ('DELETE FROM relstorage_meta WHERE name = %s',
                     ('cache_key',)))
    with caplog.at_level(logging.WARNING, 'relstorage.blobs'):
        with _db(sqlite, blob_dir, read_only=True) as db:
            with db.transaction() as conn:
                with conn.root()['b'].open('r') as f:
                    assert f.read() == PAYLOAD
            _plant(path, PAYLOAD[:-1])
            with db.transaction() as conn:
                with conn.root()['b'].open('r') as f:
                    assert f.read() == PAYLOAD
    assert 'size only' in caplog.text


def test_removing_cached_files_removes_their_signatures(factory, tmp_path):
    blob_dir = tmp_path / 'cache'
    path = _commit_blob(factory, blob_dir)
    assert os.path.exists(path + '.sig')
    shrink(str(blob_dir), 0)
    assert not os.path.exists(path)
    assert not os.path.exists(path + '.sig')
    assert not os.path.exists(os.path.dirname(path))


@pytest.mark.parametrize('chunk_size', [1000, 870, 8700, 10000])
def test_the_size_is_that_of_the_blob_in_the_database(factory, tmp_path,
                                                       chunk_size):
    # Several chunks, the last short or empty, or one: the size the
    # database gives matches the blob's (a good file is kept), and a file
    # one byte short does not pass.
    assert len(PAYLOAD) == 8700
    with _db(factory, tmp_path / 'writer', blob_chunk_size=chunk_size) as db:
        with db.transaction() as conn:
            conn.root()['b'] = Blob(PAYLOAD)
    blob_dir = tmp_path / 'cache'
    assert _read_blob(factory, blob_dir) == PAYLOAD  # downloaded
    [(_, _, path)] = cache_files(str(blob_dir))
    before = os.lstat(path)
    assert _read_blob(factory, blob_dir) == PAYLOAD
    assert os.lstat(path).st_ino == before.st_ino
    _plant(path, PAYLOAD[:-1])
    assert _read_blob(factory, blob_dir) == PAYLOAD
    assert os.path.getsize(path) == len(PAYLOAD)


@pytest.fixture(params=['sqlite', 'postgresql', 'mysql'])
def history_free(request):
    f = DatabaseFactory(request.param, False)
    f.storage(zap=True).close()
    yield f
    f.cleanup()


def test_a_replaced_revision_is_served_only_from_a_file_that_passes(
        history_free, tmp_path):
    # Without history, a replaced revision is gone from the database but
    # older snapshots still see it (ZODB's IExternalGC test loads its
    # blob): its cached file is served after the checks that need no
    # database, a link planted there is not.
    blob_dir = tmp_path / 'cache'
    with _db(history_free, blob_dir) as db:
        with db.transaction() as conn:
            conn.root()['b'] = Blob(PAYLOAD)
            conn.root()['c'] = Blob(PAYLOAD)
        with db.transaction() as conn:
            first = {}
            for key in 'bc':
                blob = conn.root()[key]
                blob._p_activate()
                first[key] = (blob._p_oid, blob._p_serial)
        with db.transaction() as conn:
            for key in 'bc':
                with conn.root()[key].open('w') as f:
                    f.write(b'newer')
        storage = db.storage
        kept = storage.loadBlob(*first['b'])
        with open(kept, 'rb') as f:
            assert f.read() == PAYLOAD
        planted = storage.fshelper.getBlobFilename(*first['c'])
        target = tmp_path / 'elsewhere'
        target.write_bytes(_forged())
        os.replace(_symlink_beside(planted, str(target)), planted)
        with pytest.raises(POSKeyError):
            storage.loadBlob(*first['c'])


# The cache directory (the same code whatever the database)


@pytest.fixture
def sqlite():
    f = DatabaseFactory('sqlite', True)
    yield f
    f.cleanup()


@contextlib.contextmanager
def _umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def test_cache_created_owner_only_whatever_the_umask(sqlite, tmp_path):
    blob_dir = tmp_path / 'missing' / 'parent' / 'cache'
    with _umask(0):
        path = _commit_blob(sqlite, blob_dir)
        fresh = tmp_path / 'fresh'
        assert _read_blob(sqlite, fresh) == PAYLOAD
    for d in (tmp_path / 'missing', tmp_path / 'missing' / 'parent',
              blob_dir, fresh):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    # The committed file and the downloaded one: read-only (as ZODB
    # wants) and the owner's only.
    downloaded = os.path.join(str(fresh), os.path.relpath(path,
                                                          str(blob_dir)))
    for f in (path, downloaded):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o400, f


@pytest.mark.parametrize('mode', [0o777, 0o1777, 0o770, 0o720, 0o702])
def test_a_cache_dir_others_may_write_is_refused(sqlite, tmp_path, mode):
    blob_dir = tmp_path / 'cache'
    blob_dir.mkdir()
    blob_dir.chmod(mode)
    with pytest.raises(ConfigurationError) as exc:
        sqlite.storage(blob_dir=str(blob_dir)).close()
    msg = str(exc.value)
    assert str(blob_dir) in msg and 'writable by' in msg
    assert os.listdir(blob_dir) == []


def test_a_cache_dir_another_user_owns_is_refused(sqlite, tmp_path):
    blob_dir = tmp_path / 'cache'
    blob_dir.mkdir(mode=0o700)
    os.chown(blob_dir, OTHER_UID, -1)
    with pytest.raises(ConfigurationError) as exc:
        sqlite.storage(blob_dir=str(blob_dir)).close()
    msg = str(exc.value)
    assert str(blob_dir) in msg and 'owned by uid %d' % OTHER_UID in msg
    assert os.listdir(blob_dir) == []


@pytest.mark.parametrize('mode, uid, why', [
    (0o775, None, 'writable by its group'),
    (0o755, OTHER_UID, 'owned by uid %d' % OTHER_UID)])
def test_a_shared_blob_dir_others_may_write_is_used_with_a_warning(
        sqlite, tmp_path, caplog, mode, uid, why):
    # shared-blob-dir: the directory is the blobs' only home, set up by
    # whoever deploys several clients on it; it keeps working.
    blob_dir = tmp_path / 'shared'
    blob_dir.mkdir()
    blob_dir.chmod(mode)
    if uid is not None:
        os.chown(blob_dir, uid, -1)
    with caplog.at_level(logging.WARNING, 'relstorage.blobs'):
        with _db(sqlite, blob_dir, shared_blob_dir=True) as db:
            with db.transaction() as conn:
                conn.root()['b'] = Blob(PAYLOAD)
            with db.transaction() as conn:
                with conn.root()['b'].open('r') as f:
                    assert f.read() == PAYLOAD
    assert stat.S_IMODE(os.stat(blob_dir).st_mode) == mode
    assert any(str(blob_dir) in r.getMessage() and why in r.getMessage()
               for r in caplog.records), caplog.text
    transaction.abort()
