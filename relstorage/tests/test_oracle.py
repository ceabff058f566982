"""The Oracle adapter against a real server: run only where one is
configured (RELSTORAGE_TEST_ORACLE_*, see dbs.py), skipped with that
reason otherwise. ZODB's conformance suites for Oracle are in
test_conformance_oracle.py.

Besides Oracle's own tests, the adapter tests every database runs that
need nothing but the ``factory`` fixture run here on Oracle: this
module's ``factory`` and ``hp_factory`` give them Oracle test schemas.
(Those that inspect a server in its own SQL, kill its sessions or start
other processes through database-specific helpers are not among them.)"""
import os
import threading

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob

from relstorage.adapters.adapter import StoreSession
from relstorage.adapters.oracle import OracleAdapter
from relstorage.exceptions import CommitLockTimeout
from relstorage.exceptions import DatabaseUnavailable
from relstorage.exceptions import HistoryModeMismatch
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import admin_query
from relstorage.testing.dbs import oracle_params
from relstorage.testing.dbs import require

from . import test_blobs
from . import test_errors
from . import test_pack
from . import test_readahead
from . import test_records
from . import test_storage


def _emptied(keep_history):
    require('oracle')
    factory = DatabaseFactory('oracle', keep_history)
    factory.storage(zap=True).close()
    return factory


@pytest.fixture(params=[True, False], ids=['HP', 'HF'])
def oracle(request):
    factory = _emptied(request.param)
    yield factory
    factory.cleanup()


@pytest.fixture(params=[True, False], ids=['oracle-HP', 'oracle-HF'])
def factory(request):
    """The shared tests' fixture (conftest.py), on Oracle."""
    factory = _emptied(request.param)
    yield factory
    factory.cleanup()


@pytest.fixture
def hp_factory():
    factory = _emptied(True)
    yield factory
    factory.cleanup()


#: The shared adapter tests that run here on Oracle.
SHARED_TESTS = (
    test_storage.test_cache_is_shared_by_connections_of_one_storage,
    test_storage.test_tids_strictly_increase,
    test_storage.test_lock_wait_past_commit_lock_timeout_is_a_clear_transient_error,
    test_storage.test_failed_poll_makes_the_next_one_invalidate_everything,
    test_storage.test_tpc_begin_with_bad_tid_does_not_block_later_commits,
    test_storage.test_own_commits_are_not_reported_back_as_invalidations,
    test_storage.test_own_commit_after_anothers_is_not_an_invalidation,
    test_storage.test_row_locks_read_exactly_the_oids_asked_for,
    test_pack.test_pack_removes_garbage_and_old_revisions,
    test_pack.test_pack_without_gc_keeps_unreachable_objects,
    test_pack.test_pack_to_a_time_before_an_earlier_pack_is_refused,
    test_pack.test_pack_waits_while_the_commit_lock_is_busy,
    test_pack.test_prepack_only_then_pack_with_its_state,
    test_pack.test_full_pack_discards_an_earlier_prepack_state,
    test_blobs.test_blob_cache_shrinks_back_under_its_limit,
    test_blobs.test_missing_blob_in_database_names_oid_and_tid,
    test_blobs.test_missing_blob_in_shared_dir_names_oid_tid_and_file,
    test_blobs.test_shared_blob_dir_holds_the_data_not_the_database,
    test_blobs.test_blob_dirs_are_private,
    test_blobs.test_replaced_undone_and_packed_blobs_leave_no_rows,
    test_blobs.test_aborted_transaction_leaves_no_blob_behind,
    test_blobs.test_storage_without_blob_dir_is_not_a_blob_storage,
    test_records.test_record_iternext_walks_current_records_in_oid_order,
    test_records.test_delete_object,
    test_records.test_delete_object_with_stale_serial_conflicts,
    test_records.test_prefetch_fills_the_shared_cache,
    test_records.test_copy_from_filestorage,
    test_records.test_restore_with_old_tid_is_refused_and_leaves_nothing_locked,
    test_readahead.test_walk_reads_ahead_and_lookup_does_not,
    test_readahead.test_read_ahead_is_never_stale,
    test_readahead.test_damaged_row_read_ahead_fails_only_its_own_load,
    test_readahead.test_walk_goes_on_through_btree_buckets,
    test_errors.test_corrupt_record_names_the_object_and_loses_nothing,
    test_errors.test_oids_above_the_columns_range,
)
# Collected here under their own names, with this module's fixtures.
globals().update({test.__name__: test for test in SHARED_TESTS})


def test_round_trip_of_small_large_and_empty_values(oracle, tmp_path):
    storage = oracle.storage(blob_dir=str(tmp_path / 'blobs'))
    db = ZODB.DB(storage)
    try:
        big = os.urandom(5 << 20)          # beyond RAW's 32 KB
        with db.transaction() as conn:
            root = conn.root()
            root['small'] = PersistentMapping(v=b'x')
            root['big'] = PersistentMapping(v=big)
            root['empty_blob'] = Blob(b'')
            root['blob'] = Blob(b'y' * 3000000)    # three chunks
            # Zero bytes are NULL to Oracle: an empty user and description.
            conn.transaction_manager.get().setUser('')
        with db.transaction() as conn:
            root = conn.root()
            assert root['small']['v'] == b'x'
            assert root['big']['v'] == big
            with root['empty_blob'].open() as f:
                assert f.read() == b''
            with root['blob'].open() as f:
                assert f.read() == b'y' * 3000000
        if oracle.keep_history:
            info = storage.undoLog(0, 1)[0]
            assert info['user_name'] == b'' or info['user_name'] == ''
    finally:
        db.close()


def test_oids_come_from_the_sequence_in_blocks(oracle):
    adapter = oracle.adapter()
    store = StoreSession(adapter)
    try:
        blocks = adapter.new_oid_blocks(store, 3)
        firsts = [first for first, _ in blocks]
        assert len(set(firsts)) == 3
        assert all(count == 16 for _, count in blocks)
        # A restore of a larger oid moves the sequence past it.
        adapter.oids.raise_to(10 ** 6)
        (first, _), = adapter.new_oid_blocks(store, 1)
        assert first > 10 ** 6
    finally:
        store.close()


def test_commit_lock_waits_then_times_out(oracle):
    adapter = oracle.adapter(commit_lock_timeout=1)
    holder, waiter = StoreSession(adapter), StoreSession(adapter)
    try:
        holder.session.begin()
        adapter.locker.hold_commit_lock(holder.session,
                                        adapter.mover.last_tid_sql)
        assert adapter.locker.dbms_lock is not None
        waiter.session.begin()
        with pytest.raises(CommitLockTimeout):
            adapter.locker.hold_commit_lock(waiter.session,
                                            adapter.mover.last_tid_sql)
        assert adapter.locker.try_commit_lock(
            waiter.session, adapter.mover.last_tid_sql) is \
            adapter.locker.BUSY
        holder.session.rollback()
        # Released by the rollback.
        assert adapter.locker.try_commit_lock(
            waiter.session, adapter.mover.last_tid_sql) is not \
            adapter.locker.BUSY
    finally:
        holder.close()
        waiter.close()


def test_one_pack_at_a_time(oracle):
    adapter = oracle.adapter()
    one, two = StoreSession(adapter), StoreSession(adapter)
    try:
        assert adapter.locker.try_pack_lock(one.session)
        assert not adapter.locker.try_pack_lock(two.session)
        adapter.locker.release_pack_lock(one.session)
        assert adapter.locker.try_pack_lock(two.session)
    finally:
        one.close()
        two.close()


def test_concurrent_commits_and_pack(oracle):
    storage = oracle.storage()
    db = ZODB.DB(storage)
    errors = []

    def work(n):
        try:
            for i in range(10):
                tm = transaction.TransactionManager()
                conn = db.open(tm)
                try:
                    with tm:
                        conn.root()['w%d' % n] = PersistentMapping(i=i)
                finally:
                    conn.close()
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    db.pack()
    with db.transaction() as conn:
        assert [conn.root()['w%d' % n]['i'] for n in range(4)] == [9] * 4
    db.close()


def test_other_history_mode_is_refused(oracle):
    oracle.storage().close()
    other = OracleAdapter(options=Options(keep_history=not oracle.keep_history),
                          **oracle_params(oracle.keep_history))
    with pytest.raises(HistoryModeMismatch):
        RelStorage(other)


def test_wrong_password_is_named(oracle):
    params = dict(oracle_params(oracle.keep_history), password='not-it')
    with pytest.raises(DatabaseUnavailable) as exc:
        OracleAdapter(**params).connect(for_store=False)
    assert 'wrong user name or password' in str(exc.value)
    assert 'not-it' not in str(exc.value)


def test_commits_reach_other_instances(oracle):
    storage = oracle.storage()
    db = ZODB.DB(storage)
    try:
        other = storage.new_instance()
        other.poll_invalidations()
        with db.transaction() as conn:
            conn.root()['x'] = PersistentMapping(v=1)
        with db.transaction() as conn:
            oid = conn.root()['x']._p_oid
        # The other instance's poll names the changed objects.
        changed = other.poll_invalidations()
        assert changed is None or oid in changed
        assert other.load(oid)[0]
        other.release()
        rows = admin_query('oracle', oracle.keep_history,
                           'SELECT COUNT(*) FROM object_state')
        assert rows[0][0] >= 2
    finally:
        db.close()
