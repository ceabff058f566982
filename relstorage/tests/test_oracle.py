"""The Oracle adapter against a real server: run only where one is
configured (RELSTORAGE_TEST_ORACLE_*, see dbs.py), skipped with that
reason otherwise. ZODB's conformance suites for Oracle are in
test_conformance_oracle.py."""
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

from .dbs import DatabaseFactory
from .dbs import admin_query
from .dbs import oracle_params
from .dbs import require


@pytest.fixture(params=[True, False], ids=['HP', 'HF'])
def oracle(request):
    require('oracle')
    factory = DatabaseFactory('oracle', request.param)
    factory.storage(zap=True).close()
    yield factory
    factory.cleanup()


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
        assert adapter.dbms_lock is not None
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
