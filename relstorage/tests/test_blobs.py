"""Blobs beyond ZODB's suite: big blobs in bounded memory, the cache
limit, separate caches in separate processes, missing data, and the rows
that replaced, undone and packed blobs leave behind."""
import hashlib
import json
import os
import stat
import subprocess
import sys
import time

import pytest
import transaction
import ZODB
import ZODB.interfaces
import ZODB.POSException
from ZODB.blob import Blob
from ZODB.POSException import POSKeyError
from ZODB.serialize import referencesf
from ZODB.utils import oid_repr
from ZODB.utils import tid_repr

from relstorage.blobs.cachesize import cache_files
from relstorage.blobs.cachesize import shrink
from relstorage.testing.dbs import DATABASES
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env


def _run_child(script, *args, timeout=600):
    proc = subprocess.run([sys.executable, '-c', script] + [str(a) for a
                                                            in args],
                          capture_output=True, text=True, env=child_env(),
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _chunk_rows(factory):
    adapter = factory.adapter()
    session = adapter.connect(for_store=False)
    try:
        session.begin()
        return session.scalar('SELECT COUNT(*) FROM blob_chunk')
    finally:
        session.rollback_quietly()
        session.close()


def _blob_db(factory, blob_dir, **kw):
    return ZODB.DB(factory.storage(blob_dir=str(blob_dir), **kw))


# A child process that stores, or reads back, a big blob and reports its
# peak memory (VmHWM) before and after.
BIG_BLOB = '''
import hashlib, json, sys, transaction, ZODB
from ZODB.blob import Blob
from relstorage.testing.dbs import DatabaseFactory

def peak_kb():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1])

db_name, keep_history, data_dir, blob_dir, action, mb = sys.argv[1:7]
factory = DatabaseFactory.in_child(db_name, keep_history, data_dir)
db = ZODB.DB(factory.storage(blob_dir=blob_dir))
before = peak_kb()
digest = hashlib.sha256()
piece = bytes(range(256)) * 4096  # 1 MiB
if action == 'write':
    with db.transaction() as conn:
        blob = conn.root()['big'] = Blob()
        with blob.open('w') as f:
            for i in range(int(mb)):
                data = piece[i % 256:] + piece[:i % 256]
                f.write(data)
                digest.update(data)
else:
    with db.transaction() as conn:
        with conn.root()['big'].open('r') as f:
            while True:
                data = f.read(1 << 20)
                if not data:
                    break
                digest.update(data)
db.close()
print(json.dumps({'before_kb': before, 'peak_kb': peak_kb(),
                  'sha256': digest.hexdigest()}))
'''


@pytest.mark.parametrize('db_name', DATABASES)
def test_200mb_blob_round_trip_in_bounded_memory(db_name, tmp_path):
    factory = DatabaseFactory(db_name, True)
    factory.storage(zap=True).close()
    try:
        mb = 200
        wrote = _run_child(BIG_BLOB, db_name, True, factory.data_dir(),
                           tmp_path / 'writer-cache', 'write', mb)
        # Another process with an empty cache downloads it from the
        # database.
        read = _run_child(BIG_BLOB, db_name, True, factory.data_dir(),
                          tmp_path / 'reader-cache', 'read', mb)
        assert read['sha256'] == wrote['sha256']
        for name, run in (('write', wrote), ('read', read)):
            grew_mb = (run['peak_kb'] - run['before_kb']) / 1024
            print('%s %s: peak memory grew by %.1f MB for a %d MB blob'
                  % (db_name, name, grew_mb, mb))
            # Chunks of blob-chunk-size (1 MB) at a time: the process never
            # holds more than a few of them.
            assert grew_mb < mb / 4, (name, run)
        # A whole number of full chunks, then an empty last one.
        assert _chunk_rows(factory) == mb + 1
    finally:
        factory.cleanup()


def test_blob_cache_shrinks_back_under_its_limit(factory, tmp_path):
    size, count, limit = 50000, 30, 400000
    db = _blob_db(factory, tmp_path / 'writer')
    with db.transaction() as conn:
        for i in range(count):
            conn.root()['b%d' % i] = Blob(bytes([i]) * size)
    db.close()
    cache = tmp_path / 'reader'
    storage = factory.storage(blob_dir=str(cache), blob_cache_size=limit,
                              blob_cache_size_check=10)
    db = ZODB.DB(storage)
    try:
        for i in range(count):
            with db.transaction() as conn:
                with conn.root()['b%d' % i].open() as f:
                    assert f.read() == bytes([i]) * size
            storage._blobs.checker.wait()
        used = sum(s for _, s, _ in cache_files(str(cache)))
        assert used <= limit
        # Shrinking removed the least recently used: the newest is still
        # cached, the oldest must come from the database again, and does.
        with db.transaction() as conn:
            newest = conn.root()['b%d' % (count - 1)]
            newest._p_activate()
            assert os.path.exists(storage.fshelper.getBlobFilename(
                newest._p_oid, newest._p_serial))
            oldest = conn.root()['b0']
            oldest._p_activate()
            path = storage.fshelper.getBlobFilename(oldest._p_oid,
                                                    oldest._p_serial)
            assert not os.path.exists(path)
            with oldest.open() as f:
                assert f.read() == bytes([0]) * size
    finally:
        db.close()


def test_external_cache_check_runs_in_another_process(tmp_path):
    factory = DatabaseFactory('sqlite', True)
    try:
        storage = factory.storage(blob_dir=str(tmp_path / 'c'),
                                  blob_cache_size=100000,
                                  blob_cache_size_check=50,
                                  blob_cache_size_check_external=True)
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            for i in range(10):
                conn.root()['b%d' % i] = Blob(b'x' * 30000)
        storage._blobs.checker.wait()
        used = sum(s for _, s, _ in cache_files(str(tmp_path / 'c')))
        assert used <= 100000
        db.close()
    finally:
        factory.cleanup()


def test_shrink_by_hand_and_lock(tmp_path):
    blob_dir = tmp_path / 'cache'
    (blob_dir / '0x01').mkdir(parents=True)
    for n in range(4):
        p = blob_dir / '0x01' / ('0x%016x.blob' % (n + 1))
        p.write_bytes(b'y' * 1000)
        os.utime(p, (1000 + n, 1000 + n))
    (blob_dir / 'tmp').mkdir()
    (blob_dir / 'tmp' / 'uncommitted.blob').write_bytes(b'z' * 5000)
    assert shrink(str(blob_dir), 2500) == (4000, 2000)
    left = sorted(p.name for p in (blob_dir / '0x01').iterdir())
    assert left == ['0x0000000000000003.blob', '0x0000000000000004.blob']
    assert (blob_dir / 'tmp' / 'uncommitted.blob').exists()
    out = subprocess.run(
        [sys.executable, '-m', 'relstorage.blobs.cachesize', str(blob_dir),
         '1000'], capture_output=True, text=True, env=child_env())
    assert out.returncode == 0, out.stderr
    assert '2000 bytes before, 1000 after' in out.stdout


READER = '''
import hashlib, json, sys, ZODB
from relstorage.testing.dbs import DatabaseFactory
db_name, keep_history, data_dir, blob_dir = sys.argv[1:5]
storage = DatabaseFactory.in_child(db_name, keep_history, data_dir).storage(
    blob_dir=blob_dir)
db = ZODB.DB(storage)
with db.transaction() as conn:
    blob = conn.root()['shared']
    blob._p_activate()
    with blob.open() as f:
        data = f.read()
    path = storage.fshelper.getBlobFilename(blob._p_oid, blob._p_serial)
db.close()
print(json.dumps({'sha256': hashlib.sha256(data).hexdigest(),
                  'path': path}))
'''


def test_two_processes_with_separate_caches_read_the_same_blob(
        factory, tmp_path):
    data = os.urandom(300000)
    db = _blob_db(factory, tmp_path / 'writer', blob_chunk_size=65536)
    with db.transaction() as conn:
        conn.root()['shared'] = Blob(data)
    db.close()
    results = [_run_child(READER, factory.db, factory.keep_history,
                          factory.data_dir(), tmp_path / name)
               for name in ('one', 'two')]
    expected = hashlib.sha256(data).hexdigest()
    assert [r['sha256'] for r in results] == [expected, expected]
    # Each process filled its own cache.
    assert results[0]['path'].startswith(str(tmp_path / 'one'))
    assert results[1]['path'].startswith(str(tmp_path / 'two'))
    assert all(os.path.exists(r['path']) for r in results)


def _committed_blob(db):
    with db.transaction() as conn:
        conn.root()['b'] = Blob(b'payload')
    with db.transaction() as conn:
        blob = conn.root()['b']
        blob._p_activate()
        assert blob._p_serial != b'\0' * 8
        return blob._p_oid, blob._p_serial


def test_missing_blob_in_database_names_oid_and_tid(factory, tmp_path):
    db = _blob_db(factory, tmp_path / 'a')
    oid, tid = _committed_blob(db)
    db.close()
    adapter = factory.adapter()
    session = adapter.connect(for_store=True)
    session.begin()
    session.execute('DELETE FROM blob_chunk')
    session.commit()
    session.close()
    storage = factory.storage(blob_dir=str(tmp_path / 'fresh-cache'))
    try:
        with pytest.raises(POSKeyError) as exc:
            storage.loadBlob(oid, tid)
        msg = str(exc.value)
        assert oid_repr(oid) in msg and tid_repr(tid) in msg
        assert 'missing from the database' in msg
        # A revision that never existed says so too.
        with pytest.raises(POSKeyError) as exc:
            storage.loadBlob(oid, b'\0' * 7 + b'\1')
        assert oid_repr(oid) in str(exc.value)
    finally:
        storage.close()


def test_missing_blob_in_shared_dir_names_oid_tid_and_file(factory,
                                                           tmp_path):
    db = _blob_db(factory, tmp_path / 'shared', shared_blob_dir=True)
    oid, tid = _committed_blob(db)
    storage = db.storage
    path = storage.loadBlob(oid, tid)
    os.remove(path)
    with pytest.raises(POSKeyError) as exc:
        storage.loadBlob(oid, tid)
    msg = str(exc.value)
    assert oid_repr(oid) in msg and tid_repr(tid) in msg and path in msg
    db.close()


def test_shared_blob_dir_holds_the_data_not_the_database(factory, tmp_path):
    db = _blob_db(factory, tmp_path / 'shared', shared_blob_dir=True)
    layout = db.storage.fshelper.layout
    oid, tid = _committed_blob(db)
    db.close()
    assert _chunk_rows(factory) == 0
    path = os.path.join(str(tmp_path / 'shared'),
                        layout.getBlobFilePath(oid, tid))
    with open(path, 'rb') as f:
        assert f.read() == b'payload'


def test_blob_dirs_are_private(factory, tmp_path):
    storage = factory.storage(blob_dir=str(tmp_path / 'private'))
    try:
        for path in (tmp_path / 'private', tmp_path / 'private' / 'tmp'):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    finally:
        storage.close()


def test_replaced_undone_and_packed_blobs_leave_no_rows(factory, tmp_path):
    db = _blob_db(factory, tmp_path / 'a', blob_chunk_size=1000)
    storage = db.storage
    with db.transaction() as conn:
        conn.root()['b'] = Blob(b'1' * 2500)       # 3 chunks
    with db.transaction() as conn:
        with conn.root()['b'].open('w') as f:
            f.write(b'2' * 500)                     # 1 chunk
    if factory.keep_history:
        assert _chunk_rows(factory) == 4
        # Undo brings the first blob back, as a copy of its own.
        undo_id = storage.undoLog(0, 1)[0]['id']
        db.undo(undo_id)
        transaction.commit()
        with db.transaction() as conn:
            with conn.root()['b'].open() as f:
                assert f.read() == b'1' * 2500
        assert _chunk_rows(factory) == 7
        time.sleep(0.01)
        storage.pack(time.time(), referencesf)
        assert _chunk_rows(factory) == 3    # the current revision only
    else:
        # The new blob replaced the old one and its chunks.
        assert _chunk_rows(factory) == 1
    with db.transaction() as conn:
        del conn.root()['b']
    time.sleep(0.01)
    storage.pack(time.time(), referencesf)
    assert _chunk_rows(factory) == 0
    db.close()


def test_aborted_transaction_leaves_no_blob_behind(factory, tmp_path):
    from ZODB.Connection import TransactionMetaData
    from ZODB.utils import z64
    storage = factory.storage(blob_dir=str(tmp_path / 'a'))
    try:
        oid = storage.new_oid()
        t = TransactionMetaData()
        storage.tpc_begin(t)
        path = os.path.join(storage.temporaryDirectory(), 'upload')
        with open(path, 'wb') as f:
            f.write(b'never committed')
        storage.storeBlob(oid, z64, b'a pickle', path, '', t)
        storage.tpc_vote(t)  # chunks uploaded, invisible to others
        storage.tpc_abort(t)
        assert _chunk_rows(factory) == 0
        assert os.listdir(storage.temporaryDirectory()) == []
        with pytest.raises(POSKeyError):
            storage.load(oid)
    finally:
        storage.close()


def test_blobs_configured_in_zope_conf(tmp_path):
    import ZODB.config
    db = ZODB.config.databaseFromString('''
        %%import relstorage
        <zodb>
          <relstorage>
            keep-history false
            blob-dir %s
            blob-cache-size 10mb
            blob-chunk-size 4kb
            <sqlite3>
              data-dir %s
            </sqlite3>
          </relstorage>
        </zodb>
        ''' % (tmp_path / 'blobs', tmp_path / 'data'))
    try:
        assert ZODB.interfaces.IBlobStorageRestoreable.providedBy(db.storage)
        options = db.storage._options
        assert (options.blob_cache_size, options.blob_chunk_size) == (
            10 * 1024 * 1024, 4096)
        with db.transaction() as conn:
            conn.root()['b'] = Blob(b'z' * 10000)
        with db.transaction() as conn:
            with conn.root()['b'].open() as f:
                assert f.read() == b'z' * 10000
    finally:
        db.close()


def test_unusable_blob_dir_is_a_clear_error(tmp_path):
    from relstorage.exceptions import ConfigurationError

    (tmp_path / 'file').write_text('not a directory')
    factory = DatabaseFactory('sqlite', True)
    try:
        with pytest.raises(ConfigurationError) as exc:
            factory.storage(blob_dir=str(tmp_path / 'file' / 'blobs'))
        assert 'blob-dir %s' % (tmp_path / 'file' / 'blobs') in str(
            exc.value)
    finally:
        factory.cleanup()


def test_storage_without_blob_dir_is_not_a_blob_storage(factory):
    storage = factory.storage()
    try:
        assert not ZODB.interfaces.IBlobStorage.providedBy(storage)
        assert not hasattr(storage, 'fshelper')
        db = ZODB.DB(storage)
        with pytest.raises(ZODB.POSException.Unsupported):
            with db.transaction() as conn:
                conn.root()['b'] = Blob(b'x')
    finally:
        storage.close()
