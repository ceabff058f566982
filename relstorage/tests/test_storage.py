"""relstorage's own tests of the storage against real databases: commits
seen across clients and processes, conflicts, readCurrent, polling."""
import os
import subprocess
import sys
import textwrap

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import ConflictError
from ZODB.POSException import ReadConflictError
from ZODB.tests.ConflictResolution import PCounter
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import p64
from ZODB.utils import u64

from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import wait_for



def _db(storage):
    return ZODB.DB(storage)


@pytest.fixture
def two_clients(factory):
    """Two databases on the same storage, as two processes would open."""
    db1 = _db(factory.storage())
    db2 = _db(factory.storage())
    yield db1, db2
    db1.close()
    db2.close()


def _commit(db, func):
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    try:
        tm.begin()
        func(conn.root())
        tm.commit()
    finally:
        conn.close()


def _read(db, func):
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    try:
        tm.begin()
        return func(conn.root())
    finally:
        tm.abort()
        conn.close()


def test_clients_see_each_others_commits(two_clients):
    db1, db2 = two_clients
    _commit(db1, lambda root: root.__setitem__('a', PersistentMapping(n=1)))
    assert _read(db2, lambda root: root['a']['n']) == 1
    _commit(db2, lambda root: root['a'].__setitem__('n', 2))
    assert _read(db1, lambda root: root['a']['n']) == 2


def test_open_connection_sees_commit_at_next_transaction(two_clients):
    db1, db2 = two_clients
    _commit(db1, lambda root: root.__setitem__('a', PersistentMapping(n=1)))
    tm = transaction.TransactionManager()
    conn = db2.open(transaction_manager=tm)
    tm.begin()
    assert conn.root()['a']['n'] == 1
    _commit(db1, lambda root: root['a'].__setitem__('n', 2))
    # Still the old snapshot inside the same transaction (MVCC)...
    assert conn.root()['a']['n'] == 1
    tm.abort()
    tm.begin()
    # ... and the new state after the poll at the next one.
    assert conn.root()['a']['n'] == 2
    tm.abort()
    conn.close()


def test_write_conflict_raises_conflict_error(two_clients):
    db1, db2 = two_clients
    _commit(db1, lambda root: root.__setitem__('a', PersistentMapping(n=0)))
    tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
    c1, c2 = db1.open(transaction_manager=tm1), db2.open(transaction_manager=tm2)
    tm1.begin()
    tm2.begin()
    c1.root()['a']['n'] = 1
    c2.root()['a']['n'] = 2
    tm1.commit()
    with pytest.raises(ConflictError):
        tm2.commit()
    tm2.abort()
    tm2.begin()
    assert c2.root()['a']['n'] == 1
    tm2.abort()
    c1.close()
    c2.close()


def test_resolvable_conflict_is_resolved(two_clients):
    db1, db2 = two_clients
    def setup(root):
        root['c'] = PCounter()
        root['c'].inc()  # PCounter keeps _value in its state once set
    _commit(db1, setup)
    tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
    c1, c2 = db1.open(transaction_manager=tm1), db2.open(transaction_manager=tm2)
    tm1.begin()
    tm2.begin()
    c1.root()['c'].inc()
    c2.root()['c'].inc()
    tm1.commit()
    tm2.commit()  # both increments survive
    assert _read(db1, lambda root: root['c']._value) == 3
    c1.close()
    c2.close()


def test_read_current_raises_read_conflict(two_clients):
    db1, db2 = two_clients
    def setup(root):
        root['a'] = PersistentMapping(n=0)
        root['b'] = PersistentMapping(n=0)
    _commit(db1, setup)
    tm2 = transaction.TransactionManager()
    c2 = db2.open(transaction_manager=tm2)
    tm2.begin()
    a = c2.root()['a']
    c2.root()['b']['n'] = a['n'] + 1  # loads a
    c2.readCurrent(a)
    # Another client changes what this transaction read.
    _commit(db1, lambda root: root['a'].__setitem__('n', 5))
    with pytest.raises(ReadConflictError):
        tm2.commit()
    tm2.abort()
    c2.close()
    assert _read(db1, lambda root: root['b']['n']) == 0


def test_poll_interval_delays_seeing_others_but_not_own_commits(factory):
    db1 = _db(factory.storage())
    _commit(db1, lambda root: root.__setitem__('a', PersistentMapping(n=1)))
    db2 = _db(factory.storage(poll_interval=3600))
    try:
        tm = transaction.TransactionManager()
        conn = db2.open(transaction_manager=tm)
        tm.begin()
        assert conn.root()['a']['n'] == 1
        tm.abort()
        _commit(db1, lambda root: root['a'].__setitem__('n', 2))
        if factory.db == 'mysql':
            # Within the poll interval the old snapshot is kept. (On
            # PostgreSQL and SQLite commits are announced to the instance,
            # which then polls: see test_postgresql and
            # test_sqlite_polls_within_the_interval_only_after_a_commit.)
            tm.begin()
            assert conn.root()['a']['n'] == 1
            tm.abort()
        else:
            def sees_it():
                tm.begin()
                try:
                    return conn.root()['a']['n'] == 2
                finally:
                    tm.abort()
            # PostgreSQL's announcement (a NOTIFY) reaches the listening
            # session shortly after the COMMIT, on its own.
            assert wait_for(sees_it)
        # A commit of its own forces the next poll.
        tm.begin()
        conn.root()['b'] = 1
        tm.commit()
        tm.begin()
        assert conn.root()['a']['n'] == 2
        tm.abort()
        conn.close()
    finally:
        db1.close()
        db2.close()


def test_cache_is_shared_by_connections_of_one_storage(factory):
    storage = factory.storage()
    db = _db(storage)
    try:
        _commit(db, lambda root: root.__setitem__('a', PersistentMapping(n=1)))
        db.cacheMinimize()
        hits = storage._cache.hits
        # A second connection (another storage instance) finds the pickles
        # the first one loaded or committed.
        tm = transaction.TransactionManager()
        c1 = db.open(transaction_manager=tm)
        tm2 = transaction.TransactionManager()
        c2 = db.open(transaction_manager=tm2)
        assert c1._storage is not c2._storage
        assert c2.root()['a']['n'] == 1
        assert storage._cache.hits > hits
        c1.close()
        c2.close()
    finally:
        db.close()


def test_tids_strictly_increase(factory):
    storage = factory.storage()
    db = _db(storage)
    try:
        tids = []
        for i in range(20):
            _commit(db, lambda root: root.__setitem__('n', i))
            tids.append(storage.lastTransaction())
        assert tids == sorted(set(tids))
    finally:
        db.close()


CHILD = textwrap.dedent('''
    import sys, time, transaction, ZODB
    from relstorage.testing.dbs import DatabaseFactory
    me, other = sys.argv[4:6]
    db = ZODB.DB(DatabaseFactory.in_child(*sys.argv[1:4]).storage())
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    for attempt in range(100):
        try:
            tm.begin()
            conn.root()[me] = 'written by ' + me
            tm.commit()
            break
        except Exception:
            tm.abort()
    deadline = time.time() + 60
    while time.time() < deadline:
        tm.begin()
        seen = conn.root().get(other)
        tm.abort()
        if seen:
            print(me, 'sees', repr(seen))
            break
        time.sleep(0.05)
    else:
        print(me, 'never saw', other)
        sys.exit(1)
    db.close()
''')


def test_two_processes_see_each_others_commits(factory):
    _db(factory.storage()).close()  # the schema and the root object exist
    env = child_env()
    args = [factory.db, str(factory.keep_history), factory.data_dir()]
    procs = [subprocess.Popen([sys.executable, '-c', CHILD] + args + [me, other],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, text=True)
             for me, other in (('p1', 'p2'), ('p2', 'p1'))]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    assert "p1 sees 'written by p2'" in outputs[0][0]
    assert "p2 sees 'written by p1'" in outputs[1][0]


@pytest.mark.parametrize('name', ['postgresql', 'mysql'])
def test_commit_and_poll_round_trips(name):
    """A commit of existing objects costs five round trips (lock rows,
    upload, commit lock + last tid, write + COMMIT; PostgreSQL's upload
    is a COPY, two: the statement, then its rows; on MySQL the fifth
    empties temp_store after the commit), an empty commit two; a poll
    that finds nothing new costs one, and a read-only transaction's end
    and the next one's snapshot one each."""
    from relstorage.testing.dbs import DatabaseFactory
    f = DatabaseFactory(name, True)
    storage = f.storage(zap=True)
    db = _db(storage)
    try:
        def setup(root):
            for i in range(10):
                root[i] = PersistentMapping(n=0)
        _commit(db, setup)
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        tm.begin()
        for i in range(10):
            conn.root()[i]['n'] = 1
        inst = conn._storage
        inst._commit.store_session()
        store = inst._commit.session.session
        before = store.round_trips
        tm.commit()
        assert store.round_trips - before == 5
        before = store.round_trips
        meta = TransactionMetaData()
        inst.tpc_begin(meta)
        inst.tpc_vote(meta)
        inst.tpc_finish(meta)
        assert store.round_trips - before == 2
        tm.begin()  # polls and sees its own commits
        load = inst._view.load.session
        polls = load.round_trips
        assert inst.poll_invalidations() == []  # nothing changed since
        assert load.round_trips - polls == 1
        # A snapshot begins in the message of its first read, and ends
        # (when ZODB is done with the transaction) in one more.
        tm.abort()
        for _ in range(2):
            before = load.round_trips
            assert (inst._view.load.snapshot_tid()
                    == u64(inst.lastTransaction()))
            assert load.in_transaction
            inst.afterCompletion()
            assert not load.in_transaction and not load.pending
            assert load.round_trips - before == 2
        conn.close()
    finally:
        db.close()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_sqlite_writes_rows_in_place_at_vote(keep_history):
    """SQLite's commit transaction is the only writer from vote on: the
    tid is chosen then and the rows go straight into their tables with
    multi-row statements, never through temp_store; a new object, a
    changed one and a deletion all read back right."""
    from ZODB.POSException import POSKeyError
    from ZODB.utils import z64

    from relstorage.testing.dbs import DatabaseFactory
    from relstorage.tests.test_record_iteration import commit_directly
    f = DatabaseFactory('sqlite', keep_history)
    storage = f.storage(zap=True)
    try:
        def commit(stores, deletions=()):
            return commit_directly(storage, stores, deletions)
        oids = [storage.new_oid() for _ in range(1200)]
        first = commit([(oid, z64, b'state %d' % i)
                        for i, oid in enumerate(oids)])
        session = storage._commit.store_session().session
        sent = []
        real = session.execute

        def record(stmt, params=()):
            sent.append(stmt)
            return real(stmt, params)
        session.execute = record
        second = commit([(oids[0], first, b'changed'),
                         (storage.new_oid(), z64, b'new')] +
                        [(oid, first, b'again %d' % i)
                         for i, oid in enumerate(oids[2:], 2)],
                        deletions=[(oids[1], first)])
        assert sent and not any('temp_store' in stmt for stmt in sent)
        # 1,200 rows in three statements per table, not one per row.
        inserts = [stmt for stmt in sent if stmt.startswith('INSERT INTO '
                                                            'object_state')]
        assert len(inserts) == 3
        storage.close()

        storage = f.storage()
        assert storage.load(oids[0]) == (b'changed', second)
        assert storage.load(oids[1199]) == (b'again 1199', second)
        with pytest.raises(POSKeyError):
            storage.load(oids[1])
        if keep_history:
            assert storage.loadSerial(oids[5], first) == b'state 5'
            assert [h['tid'] for h in storage.history(oids[0], 5)] == [
                second, first]
        assert storage.lastTransaction() == second > first
    finally:
        storage.close()
        f.cleanup()


def test_lock_wait_past_commit_lock_timeout_is_a_clear_transient_error(factory):
    from transaction.interfaces import TransientError
    from ZODB.Connection import TransactionMetaData
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle
    a = factory.storage()
    b = factory.storage(commit_lock_timeout=1)
    try:
        oid = a.new_oid()
        t = TransactionMetaData()
        a.tpc_begin(t)
        a.store(oid, None, zodb_pickle(MinPO(1)), '', t)
        a.tpc_vote(t)
        first = a.tpc_finish(t)
        # a holds the row lock (voted, not finished) ...
        ta = TransactionMetaData()
        a.tpc_begin(ta)
        a.store(oid, first, zodb_pickle(MinPO(2)), '', ta)
        a.tpc_vote(ta)
        # ... so b cannot lock the row within its timeout.
        tb = TransactionMetaData()
        b.tpc_begin(tb)
        b.store(oid, first, zodb_pickle(MinPO(3)), '', tb)
        with pytest.raises(TransientError) as exc:
            b.tpc_vote(tb)
        b.tpc_abort(tb)
        assert 'commit-lock-timeout' in str(exc.value)
        a.tpc_abort(ta)
        # Nothing is left locked: b commits at once now.
        tb = TransactionMetaData()
        b.tpc_begin(tb)
        b.store(oid, first, zodb_pickle(MinPO(3)), '', tb)
        b.tpc_vote(tb)
        b.tpc_finish(tb)
        assert b.load(oid)[0] == zodb_pickle(MinPO(3))
    finally:
        a.close()
        b.close()


def test_failed_poll_makes_the_next_one_invalidate_everything(factory):
    storage = factory.storage()
    db = _db(storage)
    try:
        _commit(db, lambda root: root.__setitem__('a', PersistentMapping(n=1)))
        inst = storage.new_instance()
        assert inst.poll_invalidations() == []
        _commit(db, lambda root: root['a'].__setitem__('n', 2))
        session = inst._view.load

        def broken(*args):
            raise RuntimeError('injected: the poll query failed')
        session.poll_changes = broken
        storage._cache.clear()  # so the poll must ask the database
        with pytest.raises(RuntimeError):
            inst.poll_invalidations()
        del session.poll_changes
        # What changed meanwhile is unknown: ZODB must drop its whole cache.
        assert inst.poll_invalidations() is None
        assert inst.poll_invalidations() == []
        inst.release()
    finally:
        db.close()


def test_tpc_begin_with_bad_tid_does_not_block_later_commits(factory):
    from ZODB.Connection import TransactionMetaData
    storage = factory.storage()
    try:
        with pytest.raises(Exception):
            storage.tpc_begin(TransactionMetaData(), b'not-8-bytes-long')
        t = TransactionMetaData()
        storage.tpc_begin(t)  # would hang if the lock had been kept
        storage.tpc_vote(t)
        storage.tpc_finish(t)
    finally:
        storage.close()


def test_own_commits_are_not_reported_back_as_invalidations(factory):
    """After a commit, the committing instance's next poll names only
    what others changed, so the objects it wrote stay loaded (no reload),
    also when another client committed between its snapshot and its own
    commit; an object another client changes after that commit is
    reported."""
    db1, db2 = _db(factory.storage()), _db(factory.storage())
    try:
        _commit(db1, lambda root: root.update(
            a=PersistentMapping(n=0), b=PersistentMapping(n=0)))
        tm = transaction.TransactionManager()
        conn = db1.open(transaction_manager=tm)
        tm.begin()
        root = conn.root()
        a, b = root['a'], root['b']
        a['n'] = b['n']  # both loaded
        tm.commit()
        tm.begin()  # polls
        assert a._p_changed is False and b._p_changed is False
        # Another client's commit is reported.
        _commit(db2, lambda r: r['b'].__setitem__('n', 1))
        tm.begin()
        assert a._p_changed is False
        assert b._p_changed is None  # a ghost: invalidated
        assert b['n'] == 1
        # A commit of another client between this snapshot and this
        # commit: only its change is reported.
        _commit(db2, lambda r: r['b'].__setitem__('n', 2))
        a['n'] = 2
        tm.commit()
        conn.getTransferCounts(True)
        tm.begin()
        assert a._p_changed is False and b._p_changed is None
        assert (a['n'], b['n']) == (2, 2)
        assert conn.getTransferCounts(True) == (1, 0)  # b alone
        # The other client changes what this one wrote: reported.
        a['n'] = 3
        tm.commit()
        _commit(db2, lambda r: r['a'].__setitem__('n', 4))
        tm.begin()
        assert a._p_changed is None
        assert a['n'] == 4
        tm.abort()
        conn.close()
    finally:
        db1.close()
        db2.close()


@pytest.mark.parametrize('peer_polls_first', [False, True],
                         ids=['database', 'index'])
def test_own_commit_after_anothers_is_not_an_invalidation(factory,
                                                           peer_polls_first):
    """An instance commits after another client did, since its view: its
    next poll names the other client's objects, not its own, whether the
    changes come from the database or (*peer_polls_first*) from the shared
    cache's change index, brought past both commits by another instance
    of the same storage."""
    storage, other = factory.storage(), factory.storage()
    try:
        oids = [storage.new_oid() for _ in range(3)]
        serials = {}

        def commit(instance, states):
            meta = TransactionMetaData()
            instance.tpc_begin(meta)
            for oid, state in states.items():
                instance.store(oid, serials.get(oid, b'\0' * 8),
                               zodb_pickle(MinPO(state)), '', meta)
            instance.tpc_vote(meta)
            tid = instance.tpc_finish(meta)
            serials.update((oid, tid) for oid in states)

        commit(storage, {oid: 0 for oid in oids})
        mine, peer = storage.new_instance(), storage.new_instance()
        theirs = other.new_instance()
        for instance in (mine, peer, theirs):
            instance.poll_invalidations()
        commit(theirs, {oids[0]: 1})
        commit(mine, {oids[1]: 1, oids[2]: 1})
        if peer_polls_first:
            assert sorted(peer.poll_invalidations()) == sorted(oids)
        asked = []
        load = mine._view.load
        real = load.poll_changes
        load.poll_changes = lambda tid: asked.append(tid) or real(tid)
        assert mine.poll_invalidations() == [oids[0]]
        # The database was asked for the changes unless the index had them.
        assert len(asked) == (0 if peer_polls_first else 1)
        commit(theirs, {oids[2]: 2})
        assert mine.poll_invalidations() == [oids[2]]
        for instance in (mine, peer, theirs):
            instance.release()
    finally:
        storage.close()
        other.close()


def test_history_free_instance_keeps_the_newest_states(monkeypatch):
    """Without history an instance keeps the states it committed (for
    conflict resolution), at most SEEN_LIMIT of them, the oldest
    forgotten first, however many commits go past the limit."""
    from ZODB.Connection import TransactionMetaData
    from ZODB.utils import z64

    from relstorage.storage import view as view_module

    from relstorage.testing.dbs import DatabaseFactory
    monkeypatch.setattr(view_module, 'SEEN_LIMIT', 50)
    f = DatabaseFactory('sqlite', False)
    storage = f.storage(zap=True)
    try:
        committed = []
        for t in range(6):
            meta = TransactionMetaData()
            storage.tpc_begin(meta)
            oids = [storage.new_oid() for _ in range(30)]
            for oid in oids:
                storage.store(oid, z64, b'state of %r' % oid, '', meta)
            storage.tpc_vote(meta)
            tid = storage.tpc_finish(meta)
            committed += [(oid, tid) for oid in oids]
        seen = storage._view.remembered
        assert len(seen) == 50
        assert list(seen) == [int.from_bytes(oid, 'big')
                              for oid, _ in committed[-50:]]
        oid, tid = committed[-1]
        assert storage.loadSerial(oid, tid) == b'state of %r' % oid
        # An instance (a ZODB connection's) remembers what it reads; reading
        # a remembered state again, from the shared cache, leaves it in place.
        instance = storage.new_instance()
        try:
            instance.poll_invalidations()
            for oid, tid in committed[-50:]:
                assert instance.load(oid) == (b'state of %r' % oid, tid)
            remembered = list(instance._view.remembered.items())
            assert [oid for oid, _ in remembered] == list(seen)
            hits = instance._cache.hits
            for oid, tid in reversed(committed[-50:]):
                assert instance.load(oid) == (b'state of %r' % oid, tid)
            assert instance._cache.hits == hits + 50
            assert list(instance._view.remembered.items()) == remembered
        finally:
            instance.release()
    finally:
        storage.close()
        f.cleanup()


def test_row_locks_read_exactly_the_oids_asked_for(factory):
    """Runs of consecutive oids are locked as ranges; what is locked and
    read is still exactly the rows asked for, on both sides of a gap, with
    missing oids among them."""
    storage = factory.storage()
    try:
        t = TransactionMetaData()
        storage.tpc_begin(t)
        oids = [u64(storage.new_oid()) for _ in range(80)]
        for oid in oids:
            storage.store(p64(oid), None, zodb_pickle(MinPO(oid)), '', t)
        storage.tpc_vote(t)
        tid = u64(storage.tpc_finish(t))
        missing = [oids[-1] + 100, oids[-1] + 101, oids[-1] + 102]
        # Short and long runs (a long one is a range on PostgreSQL).
        store = (oids[:10] + oids[12:13] + oids[15:17] + oids[20:60]
                 + oids[61:] + missing)
        read = oids[10:11] + oids[19:20]
        session = storage._commit.store_session()
        try:
            current = session.lock_and_read_current(store, read)
        finally:
            session.rollback()
        assert current == {oid: tid for oid in store + read
                           if oid not in missing}
    finally:
        storage.close()


def test_consecutive_oids_are_locked_by_range():
    from relstorage.adapters.locker import Locker
    locker = Locker(None, None)
    statements = list(locker.lock_statements(
        'object_state', list(range(1, 10001)), ' FOR UPDATE'))
    assert [(len(oids), params) for oids, _, params in statements] == [
        (10000, [1, 10000])]
    # Scattered oids: one parameter each, at most 500 per statement.
    scattered = list(range(1, 2400, 2))
    statements = list(locker.lock_statements('object_state', scattered, ''))
    assert [len(params) for _, _, params in statements] == [500, 500, 200]
    assert [oid for oids, _, _ in statements for oid in oids] == scattered
    assert [p for _, _, params in statements for p in params] == scattered


def test_postgresql_locks_long_runs_by_range_and_the_rest_as_one_array():
    from relstorage.adapters.postgresql.locker import LOCK_RANGES
    from relstorage.adapters.postgresql.locker import LONG_RUN
    from relstorage.adapters.postgresql.locker import PostgreSQLLocker
    locker = PostgreSQLLocker(None, None)
    oids = (list(range(1, 1001)) + [2000, 2001, 2005]
            + list(range(3000, 3000 + LONG_RUN - 1)))
    [(covered, sql, params)] = locker.lock_statements(
        'object_state', oids, ' FOR UPDATE')
    assert covered == oids
    assert sql == ('SELECT zoid, tid FROM object_state WHERE zoid BETWEEN '
                   '%s AND %s OR zoid = ANY(%s::bigint[]) ORDER BY zoid '
                   'FOR UPDATE')
    assert params == [1, 1000, '{%s}' % ','.join(map(str, oids[1000:]))]
    # Past LOCK_RANGES long runs, the others join the array.
    oids = [oid for start in range(0, 100 * (LOCK_RANGES + 2), 100)
            for oid in range(start, start + LONG_RUN)]
    [(_, sql, params)] = locker.lock_statements('object_state', oids, '')
    assert sql.count('BETWEEN') == LOCK_RANGES
    assert params[-1] == '{%s}' % ','.join(
        map(str, oids[LONG_RUN * LOCK_RANGES:]))


SIMULTANEOUS_OPEN = textwrap.dedent('''
    import sys, transaction, ZODB
    from ZODB.POSException import ConflictError
    from persistent.mapping import PersistentMapping
    from relstorage.adapters.sqlite.adapter import SQLiteAdapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    data_dir, name, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    import time
    time.sleep(max(0, start - time.time()))
    options = Options(keep_history=True)
    storage = RelStorage(SQLiteAdapter(data_dir, options=options),
                         options=options)
    for attempt in range(20):
        try:
            # Each process may find no root and add one: ZODB.DB's own
            # race, on every storage several processes share.
            db = ZODB.DB(storage)
            break
        except ConflictError:
            continue
    for attempt in transaction.manager.attempts(20):
        with attempt:
            db.open().root()[name] = PersistentMapping(n=1)
    db.close()
''')


def test_processes_opening_a_new_sqlite_database_at_once(tmp_path):
    """Application workers often start together: the first to open a new
    SQLite database switches it to WAL and creates the schema while the
    others open it; they wait for that, none fails."""
    import time
    for round_ in range(3):
        data_dir = str(tmp_path / ('db%d' % round_))
        start = time.time() + 1.5
        procs = [subprocess.Popen(
            [sys.executable, '-c', SIMULTANEOUS_OPEN, data_dir, 'p%d' % i,
             str(start)], env=child_env(), stderr=subprocess.PIPE)
            for i in range(4)]
        errors = [p.communicate(timeout=120)[1].decode() for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, errors
        from relstorage.adapters.sqlite.adapter import SQLiteAdapter
        from relstorage.options import Options
        from relstorage.storage import RelStorage
        options = Options(keep_history=True)
        db = ZODB.DB(RelStorage(SQLiteAdapter(data_dir, options=options),
                                options=options))
        try:
            assert sorted(_read(db, lambda root: list(root))) == [
                'p0', 'p1', 'p2', 'p3']
        finally:
            db.close()


def _commit_states(storage, count, size):
    from ZODB.utils import z64
    meta = TransactionMetaData()
    storage.tpc_begin(meta)
    for _ in range(count):
        storage.store(storage.new_oid(), z64, b'\x01' * size, '', meta)
    storage.tpc_vote(meta)
    storage.tpc_finish(meta)


def test_sqlite_checkpoints_in_a_thread_not_in_commits(tmp_path,
                                                       monkeypatch):
    """SQLite commits leave WAL checkpoints to a thread: the store
    session's automatic checkpoint is off, the thread copies the WAL back
    as commits write past the threshold, and the WAL file stays bounded
    through many commits (without checkpoints it would hold them all);
    with a wal_autocheckpoint of the user's, SQLite's own is kept."""
    import os

    from relstorage.adapters.sqlite.files import MAIN_FILE
    from relstorage.adapters.sqlite.adapter import SQLiteAdapter
    from relstorage.adapters.sqlite.checkpoint import Checkpointer
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    monkeypatch.setattr(Checkpointer, 'threshold', 256 * 1024)
    storage = RelStorage(SQLiteAdapter(str(tmp_path / 'db'),
                                       options=Options(keep_history=False)))
    try:
        wal = os.path.join(storage._adapter.data_dir, MAIN_FILE + '-wal')
        for _ in range(100):  # 100 commits of 200 KB: 20 MB
            _commit_states(storage, 50, 4000)
        session = storage._commit.session.session
        assert session.scalar('PRAGMA wal_autocheckpoint') == 0
        assert os.path.getsize(wal) < 8 * 1024 * 1024
        checkpointer = storage._adapter.checkpointer
        assert checkpointer.in_thread > 0
    finally:
        storage.close()
    assert not checkpointer._thread.is_alive()

    storage = RelStorage(SQLiteAdapter(
        str(tmp_path / 'own'), pragmas={'wal_autocheckpoint': '500'},
        options=Options(keep_history=False)))
    try:
        _commit_states(storage, 1, 10)
        assert storage._adapter.checkpointer is None
        assert storage._commit.session.session.scalar(
            'PRAGMA wal_autocheckpoint') == 500
    finally:
        storage.close()


@pytest.mark.parametrize('keep_history', [False, True])
def test_sqlite_wal_stays_bounded_with_writers_in_two_storages(
        tmp_path, monkeypatch, keep_history):
    """Two storages on one SQLite database (as two processes would be)
    commit without pause, each transaction reading at its snapshot first.
    Their passive checkpoints alone never let the WAL start again (one
    runs while the other storage writes, and some transaction always
    reads): the WAL held every commit, 56 MB here with history and 80
    without (and 250 MB for two processes committing 60 times 1.5 MB).
    The restarting checkpoint, which closes the gate that every writer
    passes, keeps it to a few thresholds."""
    import os
    import threading

    from relstorage.adapters.sqlite.files import MAIN_FILE
    from relstorage.adapters.sqlite.adapter import SQLiteAdapter
    from relstorage.adapters.sqlite.checkpoint import Checkpointer
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    monkeypatch.setattr(Checkpointer, 'threshold', 256 * 1024)
    path = str(tmp_path / 'db')
    dbs = [ZODB.DB(RelStorage(SQLiteAdapter(
        path, options=Options(keep_history=keep_history))))
        for _ in range(2)]
    wal = os.path.join(path, MAIN_FILE + '-wal')
    with dbs[0].transaction() as conn:
        for name in ('w0', 'w1'):
            conn.root()[name] = PersistentMapping(
                (i, PersistentMapping(v=b'')) for i in range(50))
    sizes = []
    errors = []
    go = threading.Barrier(2)

    def commit_often(db, name):
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        try:
            go.wait(30)
            for n in range(100):  # 100 commits of 200 KB each
                with tm:
                    objects = conn.root()[name]
                    for i in range(50):
                        objects[i]['v'] = b'%d' % n * 2000
                sizes.append(os.path.getsize(wal))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)
            go.abort()
        finally:
            conn.close()
    threads = [threading.Thread(target=commit_often, args=(db, 'w%d' % i))
               for i, db in enumerate(dbs)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        assert len(sizes) == 200
        # 40 MB of states in all (the WAL held 60 MB); restarted past 1
        # MB (4 thresholds).
        assert max(sizes) < 10 * 1024 * 1024
        assert sum(db.storage._adapter.checkpointer.restarts
                   for db in dbs) > 0
    finally:
        for db in dbs:
            db.close()


def test_sqlite_restart_gives_way_to_a_long_reader(tmp_path, monkeypatch):
    """A reader that keeps an old snapshot (a report, a pre-pack) keeps
    the WAL from starting again: the restarting checkpoint waits for it
    at most restart_wait, lets writers go on, and tries again only after
    a pause; once the reader has gone, the next try restarts the WAL."""
    import sqlite3
    import time

    from relstorage.adapters.sqlite.files import MAIN_FILE
    from relstorage.adapters.sqlite.adapter import SQLiteAdapter
    from relstorage.adapters.sqlite.checkpoint import Checkpointer
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    monkeypatch.setattr(Checkpointer, 'threshold', 64 * 1024)
    monkeypatch.setattr(Checkpointer, 'restart_wait', 0.05)
    monkeypatch.setattr(Checkpointer, 'max_backoff', 0.2)
    storage = RelStorage(SQLiteAdapter(str(tmp_path / 'db'),
                                       options=Options(keep_history=False)))
    reader = None
    try:
        checkpointer = storage._adapter.checkpointer
        _commit_states(storage, 10, 4000)
        reader = sqlite3.connect(os.path.join(storage._adapter.data_dir,
                                              MAIN_FILE),
                                 isolation_level=None)
        reader.execute('BEGIN')
        assert reader.execute(
            'SELECT COUNT(*) FROM object_state').fetchone()[0] == 10

        def commit_until(done):
            deadline = time.monotonic() + 30
            while not done() and time.monotonic() < deadline:
                _commit_states(storage, 10, 4000)  # 40 KB
            assert done()
        # Past restart_at (256 KB) the thread tries, and times out.
        commit_until(lambda: checkpointer.restarts_failed >= 2)
        assert checkpointer.restarts == 0
        reader.execute('COMMIT')
        commit_until(lambda: checkpointer.restarts >= 1)
    finally:
        if reader is not None:
            reader.close()
        storage.close()


def test_sqlite_writers_wait_at_the_gate_of_a_restarting_checkpoint(
        tmp_path, monkeypatch):
    """While a restarting checkpoint holds the gate file locked, a writer
    (of any process) does not try to become the writer; it goes on once
    the gate opens, or after three restart_waits if it never does."""
    import fcntl
    import os
    import threading

    from relstorage.adapters.sqlite.adapter import SQLiteAdapter
    from relstorage.adapters.sqlite.checkpoint import Checkpointer
    adapter = SQLiteAdapter(str(tmp_path / 'db'))
    session = adapter.connect(True)
    gate = os.open(adapter.checkpointer.gate_path, os.O_RDWR | os.O_CREAT)
    begun = threading.Event()

    def begin():
        session.begin('BEGIN IMMEDIATE')
        begun.set()
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        thread = threading.Thread(target=begin)
        thread.start()
        assert not begun.wait(0.2)  # it may wait 0.75 s
        assert not session.conn.in_transaction
        fcntl.flock(gate, fcntl.LOCK_UN)
        assert begun.wait(10)
        thread.join(10)
        session.rollback()

        monkeypatch.setattr(Checkpointer, 'restart_wait', 0.01)
        fcntl.flock(gate, fcntl.LOCK_EX)
        session.begin('BEGIN IMMEDIATE')
        assert session.conn.in_transaction
        session.rollback()
    finally:
        os.close(gate)
        session.close()
        adapter.close()


def test_sqlite_writer_waits_by_trying_again_not_in_the_busy_handler(
        tmp_path):
    """A store session's BEGIN IMMEDIATE behind another process's writer
    tries again itself, with short pauses (SQLite's busy handler sleeps up
    to 25 ms and more between tries): it begins once the other commits,
    sees that commit, and leaves the connection's busy timeout as it was.
    A session that must not wait (the pack's) fails at its first try,
    with no transaction begun. (A plain sqlite3 connection stands for
    the other process: within one, writers queue; see
    test_sqlite_writers.)"""
    import sqlite3
    import threading
    import time

    from relstorage.adapters.sqlite.files import MAIN_FILE
    from relstorage.adapters.sqlite.adapter import SQLiteAdapter
    from relstorage.exceptions import CommitLockTimeout
    from relstorage.options import Options
    adapter = SQLiteAdapter(str(tmp_path / 'db'),
                            options=Options(commit_lock_timeout=30))
    waiter = adapter.connect(True)
    holder = sqlite3.connect(str(tmp_path / 'db' / MAIN_FILE),
                             isolation_level=None)
    impatient = adapter.connect(True)
    adapter.prepare_pack_session(impatient)  # no wait at all
    try:
        holder.execute('CREATE TABLE t (x INTEGER)')
        holder.execute('BEGIN IMMEDIATE')
        holder.execute('INSERT INTO t VALUES (1)')

        tries = impatient.round_trips
        with pytest.raises(CommitLockTimeout):
            impatient.begin('BEGIN IMMEDIATE')
        assert impatient.round_trips == tries + 1
        assert not impatient.conn.in_transaction

        before = waiter.round_trips
        errors = []

        def wait_for_the_lock():
            try:
                waiter.begin('BEGIN IMMEDIATE')
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(e)
        thread = threading.Thread(target=wait_for_the_lock)
        thread.start()
        # The waiter's own tries show up as statements sent; SQLite's
        # busy handler would keep retrying inside the first one.
        deadline = time.monotonic() + 20
        while (waiter.round_trips < before + 3
               and time.monotonic() < deadline):
            time.sleep(0.01)
        assert waiter.round_trips >= before + 3
        assert thread.is_alive()
        holder.execute('COMMIT')
        thread.join(20)
        assert not thread.is_alive() and errors == []
        assert waiter.in_transaction and waiter.conn.in_transaction
        assert waiter.scalar('SELECT COUNT(*) FROM t') == 1
        assert waiter.scalar('PRAGMA busy_timeout') == 30000
        waiter.execute('INSERT INTO t VALUES (2)')
        waiter.commit()
        assert holder.execute('SELECT COUNT(*) FROM t').fetchone() == (2,)
    finally:
        for session in (holder, waiter, impatient):
            session.close()
        adapter.close()


def test_sqlite_rows_are_written_in_oid_order_so_pages_fill(tmp_path):
    """ZODB stores the new objects of a commit newest first (its writer
    takes them from a stack). Written in that order into the history-free
    table, keyed by oid, every 1.5 KB state took a 4 KB page of its own;
    the vote sorts the rows by oid, and two go to a page: half the file,
    and half the WAL each commit writes."""
    from ZODB.utils import z64

    from relstorage.adapters.sqlite.adapter import SQLiteAdapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    storage = RelStorage(SQLiteAdapter(str(tmp_path / 'db'),
                                       options=Options(keep_history=False)))
    try:
        meta = TransactionMetaData()
        storage.tpc_begin(meta)
        oids = [storage.new_oid() for _ in range(1000)]
        for oid in reversed(oids):
            storage.store(oid, z64, oid * 187, '', meta)  # 1,496 bytes
        storage.tpc_vote(meta)
        storage.tpc_finish(meta)
        session = storage._commit.session.session
        assert session.scalar('PRAGMA page_size') == 4096
        assert session.scalar('SELECT COUNT(*) FROM object_state') == 1000
        # About 500 pages of states, a few of indexes and schema.
        assert session.scalar('PRAGMA page_count') < 600
        assert all(storage.load(oid)[0] == oid * 187 for oid in oids)
    finally:
        storage.close()


@pytest.mark.parametrize('db', ['postgresql', 'mysql'])
def test_clients_creating_the_schema_at_once(db):
    """Instances that start together on an empty server database: one
    creates the schema, the others wait for it and use it; none fails
    on the tables the other is creating."""
    import threading
    from relstorage.testing.dbs import DatabaseFactory
    factory = DatabaseFactory(db, True)
    for round_ in range(5):
        factory.adapter().drop_all()
        adapters = [factory.adapter() for _ in range(4)]
        barrier = threading.Barrier(len(adapters))
        errors = []

        def prepare(adapter):
            barrier.wait()
            try:
                adapter.prepare()
            except Exception as e:  # reported below
                errors.append(e)
        threads = [threading.Thread(target=prepare, args=(adapter,))
                   for adapter in adapters]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == [], round_
        session = adapters[0].connect(for_store=False)
        try:
            assert dict(session.fetchall(
                'SELECT name, value FROM relstorage_meta'))[
                    'keep_history'] == 'true'
        finally:
            session.close()
        for adapter in adapters:
            adapter.close()


@pytest.mark.parametrize('db', ['postgresql', 'mysql'])
def test_waiting_for_another_schema_creator_is_bounded(db):
    """A process that finds another one creating the schema waits for it
    at most commit-lock-timeout, then says so; once the other is done,
    the schema is created."""
    import time
    from relstorage.exceptions import SchemaError
    from relstorage.testing.dbs import DatabaseFactory
    factory = DatabaseFactory(db, True)
    factory.adapter().drop_all()
    holder = factory.adapter()
    session = holder.connect(for_store=True)
    try:
        session.begin(holder.schema_begin_sql)
        holder.locker.hold_schema_lock(session)
        waiter = factory.adapter(commit_lock_timeout=1)
        started = time.monotonic()
        with pytest.raises(SchemaError,
                           match='another process has been creating the '
                                 'relstorage schema in .* for longer than '
                                 r'commit-lock-timeout \(1'):
            waiter.prepare()
        assert time.monotonic() - started < 30
        waiter.close()
    finally:
        session.rollback_quietly()
        holder.locker.release_schema_lock(session)
        session.close()
        holder.close()
    adapter = factory.adapter(commit_lock_timeout=1)
    try:
        adapter.prepare()
    finally:
        adapter.close()


@pytest.mark.parametrize('keep_history', [True, False])
def test_root_and_instances_verify_zodbs_interfaces(keep_history, tmp_path):
    """The parts' methods bound onto each storage (root, new_instance())
    make it verify as the interfaces it declares; the undo interface only
    with history; the hot methods are the parts' own, with no call in
    between."""
    import ZODB.interfaces
    from zope.interface import providedBy
    from zope.interface.verify import verifyObject

    from relstorage.testing.dbs import DatabaseFactory
    storage = DatabaseFactory('sqlite', keep_history).storage(
        zap=True, blob_dir=str(tmp_path / 'blobs'))
    instance = storage.new_instance()
    try:
        for obj in (storage, instance):
            # Every interface it declares, whether on the class or bound
            # onto the instance (blobs, undo), and every base of those.
            declared = list(providedBy(obj).flattened())
            for iface in declared:
                assert verifyObject(iface, obj), iface
            assert {ZODB.interfaces.IMVCCStorage,
                    ZODB.interfaces.IBlobStorageRestoreable,
                    ZODB.interfaces.IStorageCurrentRecordIteration,
                    ZODB.interfaces.IExternalGC} <= set(declared)
            undoable = ZODB.interfaces.IStorageUndoable
            assert (undoable in declared) == keep_history
            assert obj.load.__self__ is obj._loader
            assert obj.loadBefore.__self__ is obj._loader
            assert obj.store.__self__ is obj._commit
            assert obj.tpc_vote.__self__ is obj._commit
            assert obj.tpc_finish.__self__ is obj._commit
            assert obj.poll_invalidations.__self__ is obj._view
    finally:
        instance.release()
        storage.close()
