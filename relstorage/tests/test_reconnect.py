"""Lost connections: killed while idle, the next transaction reconnects
without an error; killed in the middle of a commit, the commit fails with a
retryable error, nothing of it is visible, and the next one succeeds."""
import logging

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from transaction.interfaces import TransientError

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import admin_query
from relstorage.testing.dbs import require
from relstorage.testing.private_servers import private_server


@pytest.fixture(params=['postgresql', 'mysql'])
def factory(request):
    require(request.param)
    f = DatabaseFactory(request.param, True)
    f.storage(zap=True).close()
    yield f
    f.cleanup()


def _backend_id(session):
    if session.adapter.describe().startswith('PostgreSQL'):
        return session.scalar('SELECT pg_backend_pid()')
    return session.scalar('SELECT CONNECTION_ID()')


def _kill(db_name, backend_id):
    """Kill one server connection, as an administrator or a crash would."""
    if db_name == 'postgresql':
        admin_query(db_name, True, 'SELECT pg_terminate_backend(%s)',
                    (backend_id,))
    else:
        admin_query(db_name, True, 'KILL %s', (backend_id,))


def _db_with_a(factory):
    """A DB on *factory*'s database whose root holds ``a`` with n=1."""
    db = ZODB.DB(factory.storage())
    with db.transaction() as conn:
        conn.root()['a'] = PersistentMapping(n=1)
    return db


@pytest.fixture
def db(factory):
    db = _db_with_a(factory)
    yield db
    db.close()


def _connection_changing_a(db):
    """A connection in a transaction that sets a.n to 2."""
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    tm.begin()
    conn.root()['a']['n'] = 2
    return tm, conn


def test_idle_connections_killed_are_reopened(factory, db):
    tm, conn = _connection_changing_a(db)
    tm.commit()
    inst = conn._storage
    for session in (inst._view.load.session, inst._commit.session.session):
        _kill(factory.db, _backend_id(session))
    # Another client commits meanwhile.
    other = ZODB.DB(factory.storage())
    with other.transaction() as c:
        c.root()['a']['n'] = 3
    other.close()
    # No error reaches the application; it sees current data and
    # commits again.
    tm.begin()
    assert conn.root()['a']['n'] == 3
    conn.root()['a']['n'] = 4
    tm.commit()
    conn.close()
    with db.transaction() as c:
        assert c.root()['a']['n'] == 4


def test_a_recovered_connection_is_logged_once(factory, db, caplog):
    """An admin sees one warning per lost connection the storage got
    back: which server (no password), what happened, that it
    reconnected."""
    tm, conn = _connection_changing_a(db)
    tm.commit()
    inst = conn._storage
    _kill(factory.db, _backend_id(inst._view.load.session))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger='relstorage'):
        tm.begin()
        assert conn.root()['a']['n'] == 2
        tm.abort()
    said = [r for r in caplog.records if r.name.startswith('relstorage')]
    assert len(said) == 1, [r.getMessage() for r in said]
    [record] = said
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert text.startswith('lost the connection to the %s database (' % (
        'PostgreSQL' if factory.db == 'postgresql' else 'MariaDB'))
    assert 'host=' in text and text.endswith('; reconnected'), text
    assert 'password' not in text and 'passwd' not in text
    assert inst._adapter.reconnects == 1
    conn.close()


def test_read_past_the_view_reopens_a_lost_store_connection(factory, db):
    """After its own commit an instance reads past its snapshot through
    its store connection; killed since, that connection is reopened for
    the read, which sees the commit."""
    from ZODB.Connection import TransactionMetaData
    from ZODB.utils import load_current
    tm, conn = _connection_changing_a(db)
    tm.commit()
    inst = conn._storage
    oid = conn.root()['a']._p_oid
    data, serial = load_current(inst, oid)
    t = TransactionMetaData()
    inst.tpc_begin(t)
    inst.store(oid, serial, data, '', t)
    inst.tpc_vote(t)
    mine = inst.tpc_finish(t)
    _kill(factory.db, _backend_id(inst._commit.session.session))
    assert load_current(inst, oid)[1] == mine
    conn.close()


def test_connection_killed_during_commit_is_retryable(factory, db):
    tm, conn = _connection_changing_a(db)
    inst = conn._storage
    victim = _backend_id(inst._commit.store_session().session)
    original_vote = inst.tpc_vote

    def vote_then_die(txn):
        result = original_vote(txn)
        _kill(factory.db, victim)  # rows are locked, nothing committed
        return result
    inst.tpc_vote = vote_then_die
    with pytest.raises(TransientError):
        tm.commit()
    tm.abort()
    inst.tpc_vote = original_vote
    # Nothing of it is visible, nothing stays locked: another client
    # with a 1 s lock timeout commits at once, and so does this one.
    other = ZODB.DB(factory.storage(commit_lock_timeout=1))
    with other.transaction() as c:
        assert c.root()['a']['n'] == 1
        c.root()['a']['n'] = 10
    other.close()
    tm.begin()
    conn.root()['a']['n'] += 1
    tm.commit()
    conn.close()
    with db.transaction() as c:
        assert c.root()['a']['n'] == 11


@pytest.fixture(params=[(db, kh) for db in ('postgresql', 'mysql')
                        for kh in (True, False)],
                ids=lambda p: '%s-%s' % (p[0], 'HP' if p[1] else 'HF'))
def both_modes(request):
    db_name, keep_history = request.param
    require(db_name)
    f = DatabaseFactory(db_name, keep_history)
    f.storage(zap=True).close()
    yield f
    f.cleanup()


def _locks_held(factory):
    """Commit (or pack) locks any connection holds on the database."""
    if factory.db == 'postgresql':
        return admin_query(
            factory.db, factory.keep_history,
            "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d "
            "ON d.oid = l.database WHERE d.datname = current_database() "
            "AND l.locktype = 'advisory'")[0][0]
    from relstorage.adapters.mysql.locker import COMMIT_LOCK
    held = admin_query(factory.db, factory.keep_history,
                       'SELECT IS_USED_LOCK(%s)' % COMMIT_LOCK)[0][0]
    return 0 if held is None else 1


def _value(factory):
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as c:
            return c.root()['a']['n']
    finally:
        db.close()


@pytest.mark.parametrize('phase', ['after begin', 'after vote',
                                   'holding the commit lock',
                                   'after the commit reached the server'])
def test_connection_killed_at_each_commit_phase(both_modes, phase):
    """Killed before the commit transaction began, the session reconnects
    and the commit succeeds; killed inside it, the commit fails with a
    TransientError and leaves nothing; killed after the COMMIT reached the
    server (the reply lost), the storage finds the commit done and says
    so. Never a lock left behind, never a half commit."""
    from relstorage.exceptions import DatabaseDisconnected
    factory = both_modes
    db = _db_with_a(factory)
    try:
        tm, conn = _connection_changing_a(db)
        inst = conn._storage
        store = inst._commit.store_session()
        victim = _backend_id(store.session)
        if phase == 'after begin':
            original = inst.tpc_vote

            def inject(txn):
                _kill(factory.db, victim)
                return original(txn)
            inst.tpc_vote = inject
        elif phase == 'after vote':
            original = inst.tpc_vote

            def inject(txn):
                result = original(txn)
                _kill(factory.db, victim)
                return result
            inst.tpc_vote = inject
        elif phase == 'holding the commit lock':
            locker = store.locker
            original = locker.hold_commit_lock

            def inject(session, sql):
                result = original(session, sql)
                _kill(factory.db, victim)
                return result
            locker.hold_commit_lock = inject
        else:
            session = store.session
            original = session.execute_script

            def inject(script):
                original(script)
                _kill(factory.db, victim)
                raise DatabaseDisconnected('injected: the reply was lost')
            session.execute_script = inject

        if phase in ('after vote', 'holding the commit lock'):
            with pytest.raises(TransientError):
                tm.commit()
            tm.abort()
            expected = 1
        else:
            tm.commit()
            expected = 2
        inst.tpc_vote = inst._commit.tpc_vote
        for obj in (inst, getattr(store, 'locker', None)):
            obj.__dict__.pop('hold_commit_lock', None)
        assert _locks_held(factory) == 0
        assert _value(factory) == expected
        # The next commits work, on this connection and others.
        tm.begin()
        conn.root()['a']['n'] = 10
        tm.commit()
        conn.close()
        assert _value(factory) == 10
        assert _locks_held(factory) == 0
    finally:
        db.close()


@pytest.fixture(params=['postgresql', 'mysql'])
def private_factory(request):
    """A factory on a private server of the run, which a test may restart
    (never the configured server, which others may be using)."""
    f = DatabaseFactory(request.param, True,
                        server=private_server(request.param))
    f.storage(zap=True).close()
    yield f
    f.cleanup()


def test_server_restart_between_transactions(private_factory):
    factory = private_factory
    db = _db_with_a(factory)
    try:
        tm, conn = _connection_changing_a(db)
        tm.commit()
        factory.server.restart()
        # The connections died with the server; the next transaction opens
        # new ones without an error, sees the data and commits.
        tm.begin()
        assert conn.root()['a']['n'] == 2
        conn.root()['a']['n'] = 3
        tm.commit()
        conn.close()
    finally:
        db.close()
    other = ZODB.DB(factory.storage())
    with other.transaction() as c:
        assert c.root()['a']['n'] == 3
    other.close()


def test_commit_is_not_reported_failed_when_the_poll_after_it_fails(
        private_factory):
    """ZODB polls as a transaction ends, after the commit: the server
    going away just then must not turn a commit that happened into an
    error (an application retrying it would apply it twice). The next
    transaction polls again."""
    factory = private_factory
    db = _db_with_a(factory)
    try:
        tm, conn = _connection_changing_a(db)
        inst = conn._storage
        finish = inst.tpc_finish

        def finish_then_server_stops(txn, f=None):
            tid = finish(txn, f)
            factory.server.stop()
            return tid
        inst.tpc_finish = finish_then_server_stops
        tm.commit()
        inst.tpc_finish = finish
        factory.server.start()
        tm.begin()
        assert conn.root()['a']['n'] == 2
        tm.abort()
        conn.close()
    finally:
        db.close()


def test_sessions_left_closed_by_a_failed_reconnect_reopen(private_factory):
    """A reconnect that fails (server down) leaves the session closed: the
    next calls fail the same way, naming the database, and once the
    server is back the next one reopens it (not an AttributeError from a
    closed cursor)."""
    from relstorage.exceptions import DatabaseUnavailable
    factory = private_factory
    storage = factory.storage()
    try:
        inst = storage.new_instance()
        inst.new_oid()
        store = inst._commit.session
        factory.server.stop()
        try:
            for _ in range(2):
                with pytest.raises(DatabaseUnavailable) as exc:
                    store.new_oid_blocks(1)
                assert 'port=%s' % factory.server.port in str(exc.value)
        finally:
            factory.server.start()
        assert store.new_oid_blocks(1)
        inst.release()
    finally:
        storage.close()
