"""Iteration over current records, deletion (IExternalGC), prefetch and
copying from a FileStorage."""
import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileStorage
from ZODB.POSException import POSKeyError
from ZODB.utils import z64


def assert_same_history(source, dest):
    """Every transaction (tid, metadata) and record (oid, tid, data)
    equal; records within a transaction are compared in oid order, which
    is the order relstorage iterates them in."""
    def transactions(storage):
        it = storage.iterator()
        try:
            return [((t.tid, t.user, t.description, t.extension),
                     sorted((r.oid, r.tid, r.data) for r in t)) for t in it]
        finally:
            getattr(it, 'close', lambda: None)()
    expected, actual = transactions(source), transactions(dest)
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual):
        assert want == got


def _fill(storage, n=5):
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        for i in range(n):
            conn.root()[i] = PersistentMapping(i=i)
    with db.transaction() as conn:
        conn.root()[0]['i'] = 'changed'
    return db


def test_record_iternext_walks_current_records_in_oid_order(factory):
    storage = factory.storage()
    db = _fill(storage)
    try:
        seen = []
        next_oid = None
        while True:
            oid, tid, data, next_oid = storage.record_iternext(next_oid)
            assert storage.load(oid) == (data, tid)
            seen.append(oid)
            if next_oid is None:
                break
        assert seen == sorted(seen)
        assert len(seen) == len(storage) == 6  # root + 5
    finally:
        db.close()


def test_delete_object(factory):
    storage = factory.storage()
    db = _fill(storage)
    try:
        with db.transaction() as conn:
            victim = conn.root()[3]
            victim._p_activate()
            oid, serial = victim._p_oid, victim._p_serial
            del conn.root()[3]
        # A connection of another client has the object in its cache.
        other = factory.storage()
        watcher = other.new_instance()
        watcher.poll_invalidations()
        assert watcher.load(oid)[1] == serial
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.deleteObject(oid, serial, t)
        storage.tpc_vote(t)
        storage.tpc_finish(t)
        with pytest.raises(POSKeyError):
            storage.load(oid)
        assert len(storage) == 5
        # Its next poll reports the deletion, and the cached state is gone.
        assert oid in watcher.poll_invalidations()
        with pytest.raises(POSKeyError):
            watcher.load(oid)
        watcher.release()
        other.close()
    finally:
        db.close()


def test_delete_object_with_stale_serial_conflicts(factory):
    from ZODB.POSException import ConflictError
    storage = factory.storage()
    db = _fill(storage)
    try:
        with db.transaction() as conn:
            oid = conn.root()[0]._p_oid
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.deleteObject(oid, z64, t)
        with pytest.raises(ConflictError):
            storage.tpc_vote(t)
        storage.tpc_abort(t)
        assert storage.load(oid)
    finally:
        db.close()


def test_prefetch_fills_the_shared_cache(factory):
    storage = factory.storage()
    db = _fill(storage)
    try:
        with db.transaction() as conn:
            oids = [conn.root()[i]._p_oid for i in range(5)]
        storage._cache.clear()
        inst = storage.new_instance()
        inst.poll_invalidations()
        inst.prefetch(oids)
        trips = inst._view.load.session.round_trips
        for oid in oids:
            inst.load(oid)
        # All from the cache:
        assert inst._view.load.session.round_trips == trips
        inst.release()
    finally:
        db.close()


def test_copy_from_filestorage(factory, tmp_path):
    source = FileStorage(str(tmp_path / 'Data.fs'))
    db = ZODB.DB(source)
    for i in range(5):
        with db.transaction('txn %d' % i) as conn:
            conn.root()['k%d' % i] = PersistentMapping(v=i)
            conn.root()['k0']['v'] = i
    dest = factory.storage()
    try:
        dest.copyTransactionsFrom(source)
        if factory.keep_history:
            assert_same_history(source, dest)
            assert [d['description'] for d in dest.undoLog(0, 3)] == [
                b'txn 4', b'txn 3', b'txn 2']
        copied = ZODB.DB(dest)
        with copied.transaction() as conn:
            assert conn.root()['k0']['v'] == 4
            assert conn.root()['k4']['v'] == 4
        # New oids never collide with copied ones.
        with copied.transaction() as conn:
            conn.root()['new'] = PersistentMapping()
        with copied.transaction() as conn:
            assert len(conn.root()) == 6
        copied.close()
    finally:
        db.close()
        dest.close()
        transaction.abort()


def test_restore_with_old_tid_is_refused_and_leaves_nothing_locked(factory):
    from relstorage.exceptions import RelStorageError
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle
    storage = factory.storage()
    db = _fill(storage)
    try:
        last = storage.lastTransaction()
        oid = storage.new_oid()
        t = TransactionMetaData()
        storage.tpc_begin(t, z64[:-1] + b'\x01')  # older than everything
        storage.restore(oid, None, zodb_pickle(MinPO(1)), '', None, t)
        # Where the vote does all but the COMMIT (SQLite), the vote
        # refuses it; elsewhere the finish, which chooses the tid.
        if storage._adapter.supports_prepare_at_vote:
            with pytest.raises(RelStorageError) as exc:
                storage.tpc_vote(t)
        else:
            storage.tpc_vote(t)
            with pytest.raises(RelStorageError) as exc:
                storage.tpc_finish(t)
        assert 'transaction ids must increase' in str(exc.value)
        storage.tpc_abort(t)
        with pytest.raises(POSKeyError):
            storage.load(oid)
        assert storage.lastTransaction() == last
        # The commit lock was released: another client commits at once.
        other = ZODB.DB(factory.storage(commit_lock_timeout=2))
        with other.transaction() as conn:
            conn.root()['after'] = 1
        other.close()
    finally:
        db.close()
