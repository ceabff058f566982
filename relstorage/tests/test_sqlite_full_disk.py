"""An SQLite database on a full disk: a commit fails at its vote, cleanly,
or not at all. Once tpc_vote succeeded, tpc_finish may not fail for lack
of room, or a transaction spanning another storage would be half applied.

The disk is a small tmpfs (mounting needs root; CI runs as root) filled by
a file until a given number of bytes is left; every fill level from none
to enough is tried."""
import contextlib
import os
import shutil
import sqlite3
import subprocess

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileStorage
from ZODB.POSException import POSKeyError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import newTid
from ZODB.utils import p64
from ZODB.utils import z64

from relstorage.adapters.sqlite import SQLiteAdapter
from relstorage.exceptions import DatabaseFull
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.dbs import in_ci

#: The tmpfs: room for the database, its WAL and the filler.
DISK_KB = 4096
#: Fill levels are this far apart (tmpfs allocates whole pages).
STEP = 4096
#: Consecutive levels at which the commit succeeded that end the loop.
ENOUGH = 8


@contextlib.contextmanager
def small_disk(tmp_path, kb=DISK_KB):
    mount = tmp_path / 'disk'
    mount.mkdir()
    try:
        subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%dk' % kb,
                        'tmpfs', str(mount)],
                       check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        reason = 'cannot mount a small tmpfs to fill (root needed): %s' % (
            getattr(e, 'stderr', None) or e)
        if in_ci():
            pytest.fail('CI=true and ' + reason)
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(['umount', str(mount)], check=True)


def fill(mount, leave):
    """Fill the disk at *mount* until *leave* bytes are free."""
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    assert free > leave, 'the disk is too small for the test'
    fd = os.open(mount / 'filler', os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, free - leave)
    finally:
        os.close(fd)


def empty(mount):
    for name in os.listdir(mount):
        path = mount / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def open_storage(data_dir, keep_history, blob_dir=None, pragmas=None):
    options = Options(keep_history=keep_history)
    if blob_dir is not None:
        options = Options(keep_history=keep_history, blob_dir=str(blob_dir),
                          shared_blob_dir=True)
    return RelStorage(SQLiteAdapter(str(data_dir), pragmas=pragmas,
                                    options=options))


def assert_unlocked(data_dir):
    """Nobody holds SQLite's write lock on the database."""
    conn = sqlite3.connect(str(data_dir / 'relstorage.sqlite3'), timeout=0,
                           isolation_level=None)
    try:
        conn.execute('BEGIN IMMEDIATE')
        conn.execute('ROLLBACK')
    finally:
        conn.close()


def store_all(storage, oids, value, serials, how='store', blob_dir=None):
    """Vote and finish a transaction storing *value* in *oids*: 'vote'
    when the vote failed with DatabaseFull (aborted), else 'committed'.
    A failure of tpc_finish goes out. *how*: 'store', 'restore' (a copied
    transaction, with its own tid) or 'blob' (the first object gets a
    blob, made in *blob_dir*)."""
    txn = TransactionMetaData()
    tid = None
    if how == 'restore':
        tid = newTid(storage.lastTransaction())
    storage.tpc_begin(txn, tid)
    for oid in oids:
        data = zodb_pickle(MinPO(value))
        if how == 'restore':
            storage.restore(oid, tid, data, '', None, txn)
        elif how == 'blob' and oid == oids[0]:
            path = os.path.join(blob_dir, 'new.blob')
            with open(path, 'wb') as f:
                f.write(value.encode() * 10)
            storage.storeBlob(oid, serials.get(oid, z64), data, path, '',
                              txn)
        else:
            storage.store(oid, serials.get(oid, z64), data, '', txn)
    try:
        storage.tpc_vote(txn)
    except DatabaseFull:
        storage.tpc_abort(txn)
        return 'vote'
    tid = storage.tpc_finish(txn)
    for oid in oids:
        serials[oid] = tid
    return 'committed'


def blob_files(blob_dir):
    return sorted(os.path.join(top, name)
                  for top, _, names in os.walk(blob_dir)
                  for name in names if name.endswith('.blob'))


def check_holds(data_dir, keep_history, expected, absent):
    """A storage opened anew loads *expected* ``{oid: value}`` and none of
    *absent*."""
    storage = open_storage(data_dir, keep_history)
    try:
        for oid, value in expected.items():
            data, _ = storage.load(oid)
            assert data == zodb_pickle(MinPO(value))
        for oid in absent:
            with pytest.raises(POSKeyError):
                storage.load(oid)
    finally:
        storage.close()


def levels(outcomes):
    """Fill levels (bytes left) from none upwards, until the commit
    succeeded at ENOUGH levels in a row; *outcomes* gets each level's."""
    leave = 0
    while outcomes[-ENOUGH:] != ['committed'] * ENOUGH:
        assert leave < DISK_KB * 1024 // 2, (
            'no commit succeeded with half the disk free: %s' % outcomes)
        yield leave
        leave += STEP


@pytest.mark.parametrize('how,count', [
    ('store', 40), ('store', 300), ('restore', 40), ('blob', 40)])
@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_full_disk_fails_the_vote_or_nothing(tmp_path, keep_history, how,
                                             count):
    """*count* objects of 3,000 bytes: 40 fit in the room reserved for
    the first commit's COMMIT (the disk fills around it), 300 do not (the
    room is taken anew, at their vote). Restored, their rows go through
    temp_store; with a blob, its file is placed in a shared blob-dir on
    a disk with room. After a vote that failed, the same instance
    commits once there is room again."""
    with small_disk(tmp_path) as mount:
        outcomes = []
        for leave in levels(outcomes):
            empty(mount)
            data_dir = mount / 'db'
            blob_dir = None
            if how == 'blob':
                blob_dir = tmp_path / ('blobs-%d' % leave)
                blob_dir.mkdir()
            storage = open_storage(data_dir, keep_history, blob_dir)
            try:
                serials = {}
                base = [storage.new_oid() for _ in range(5)]
                assert store_all(storage, base, 'base', serials) == \
                    'committed'
                new = [storage.new_oid() for _ in range(count)]
                fill(mount, leave)
                outcome = store_all(storage, base[:2] + new, 'x' * 3000,
                                    serials, how, tmp_path)
                outcomes.append(outcome)
                assert_unlocked(data_dir)
                if outcome == 'vote':
                    # Still on the full disk, another instance opens it.
                    check_holds(data_dir, keep_history,
                                dict.fromkeys(base, 'base'), new)
                    if blob_dir is not None:
                        assert blob_files(blob_dir) == []
                    (mount / 'filler').unlink()
                    assert store_all(storage, base[:2] + new, 'x' * 3000,
                                     serials, how, tmp_path) == 'committed'
                if blob_dir is not None:
                    with open(storage.loadBlob(base[0], serials[base[0]]),
                              'rb') as f:
                        assert f.read() == b'x' * 30000
            finally:
                # Room for the last close's checkpoint, which removes the
                # WAL and its index (else they stay, and the room module
                # keeps the index open, holding the mount busy).
                (mount / 'filler').unlink(missing_ok=True)
                storage.close()
            check_holds(data_dir, keep_history,
                        dict.fromkeys(base[:2] + new, 'x' * 3000), ())
        assert 'vote' in outcomes, outcomes


def test_full_disk_where_the_commit_grows_the_wal_index(tmp_path):
    """The WAL index (the -shm file) indexes 4,062 frames in its first
    32 KiB region, 4,096 in each next one. A commit whose last frames,
    those written by the COMMIT, are the first past that boundary makes
    the COMMIT grow the index, which on a full disk failed the finish
    (SQLITE_IOERR_SHMSIZE) when only the WAL's room was reserved: 8 fill
    levels did. Nothing checkpoints here (wal_autocheckpoint 0), so the
    WAL keeps growing: about 3,950 frames first, then 152 objects."""
    with small_disk(tmp_path, 48 * 1024) as mount:
        outcomes = []
        leave = 256 * 1024
        while outcomes[-ENOUGH:] != ['committed'] * ENOUGH:
            assert leave < 4 * 1024 * 1024, outcomes
            empty(mount)
            storage = open_storage(mount / 'db', True,
                                   pragmas={'wal_autocheckpoint': '0'})
            try:
                serials = {}
                oids = [storage.new_oid() for _ in range(3735)]
                for i in range(0, len(oids), 500):
                    store_all(storage, oids[i:i + 500], os.urandom(3900),
                              serials)
                new = [storage.new_oid() for _ in range(150)]
                fill(mount, leave)
                outcomes.append(store_all(storage, oids[:2] + new,
                                          os.urandom(3900), serials))
                assert_unlocked(mount / 'db')
            finally:
                (mount / 'filler').unlink(missing_ok=True)
                storage.close()
            leave += STEP
        assert 'vote' in outcomes, outcomes


def test_oid_counter_on_full_disk(tmp_path):
    """The oid counter's file (oids.sqlite3) on a full disk: new_oid()
    raises DatabaseFull, and a commit that must raise the counter past an
    oid chosen elsewhere fails at its vote, with nothing committed."""
    with small_disk(tmp_path) as mount:
        data_dir = mount / 'db'
        storage = open_storage(data_dir, True)
        try:
            serials = {}
            base = [storage.new_oid()]
            assert store_all(storage, base, 'base', serials) == 'committed'
            fill(mount, 0)
            with pytest.raises(DatabaseFull) as exc:
                for _ in range(1000):   # past the block already allocated
                    storage.new_oid()
            assert str(data_dir) in str(exc.value)
            explicit = p64(10 ** 6)
            assert store_all(storage, [explicit], 'x', serials) == 'vote'
            assert_unlocked(data_dir)
        finally:
            (mount / 'filler').unlink(missing_ok=True)
            storage.close()
        check_holds(data_dir, True, {base[0]: 'base'}, [explicit])


def test_full_disk_with_a_second_storage(tmp_path):
    """A transaction spanning a FileStorage (on a disk with room) and the
    SQLite database (on the full one) lands in both or in neither. The
    FileStorage finishes first (its sort key, a path, sorts before the
    SQLite one's)."""
    with small_disk(tmp_path) as mount:
        outcomes = []
        for leave in levels(outcomes):
            empty(mount)
            fs_path = tmp_path / ('Data-%d.fs' % leave)
            databases = {}
            fs_db = ZODB.DB(FileStorage(str(fs_path)), databases=databases,
                            database_name='fs')
            sql_db = ZODB.DB(open_storage(mount / 'db', True),
                             databases=databases, database_name='sql')
            try:
                manager = transaction.TransactionManager()
                conn = fs_db.open(manager)
                conn.root()['n'] = 0
                conn.get_connection('sql').root()['n'] = 0
                manager.commit()
                # Their oids are allocated now, before the disk is full.
                sql_conn = conn.get_connection('sql')
                objects = [PersistentMapping(v=b'x' * 3000)
                           for _ in range(40)]
                for obj in objects:
                    sql_conn.add(obj)
                fill(mount, leave)
                conn.root()['n'] = 1
                sql_root = sql_conn.root()
                sql_root['n'] = 1
                for i, obj in enumerate(objects):
                    sql_root[i] = obj
                try:
                    manager.commit()
                except DatabaseFull:
                    manager.abort()
                    outcomes.append('vote')
                else:
                    outcomes.append('committed')
                conn.close()
            finally:
                (mount / 'filler').unlink(missing_ok=True)
                fs_db.close()
                sql_db.close()
            fs_db = ZODB.DB(str(fs_path))
            sql_db = ZODB.DB(open_storage(mount / 'db', True))
            try:
                with fs_db.transaction() as fs_conn, \
                        sql_db.transaction() as sql_conn:
                    fs_n = fs_conn.root()['n']
                    sql_n = sql_conn.root()['n']
            finally:
                fs_db.close()
                sql_db.close()
            assert (fs_n, sql_n) == ((0, 0) if outcomes[-1] == 'vote'
                                     else (1, 1)), (leave, outcomes)
        assert 'vote' in outcomes, outcomes
