"""Idle connections hold no snapshot: once a transaction has ended, no
database connection of the storage stays in a transaction, so PostgreSQL's
VACUUM, InnoDB's purge and SQLite's WAL checkpoints are never held back by
an application that is merely idle."""
import os
import sqlite3
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.POSException import ReadConflictError
from ZODB.utils import u64
from ZODB.utils import z64

from relstorage.testing.dbs import admin_query


def _open_transactions(factory):
    """Connections of this test database now inside a transaction (other
    than the one asking)."""
    if factory.db == 'postgresql':
        return admin_query(
            factory.db, factory.keep_history,
            "SELECT pid, state, backend_xmin FROM pg_stat_activity "
            "WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() "
            "AND (state LIKE 'idle in transaction%%' "
            "     OR backend_xmin IS NOT NULL)")
    if factory.db == 'mysql':
        # InnoDB refreshes what information_schema.innodb_trx shows at most
        # every 0.1 s: give it time to show the present.
        time.sleep(0.25)
        return admin_query(
            factory.db, factory.keep_history,
            "SELECT trx_mysql_thread_id, trx_state "
            "FROM information_schema.innodb_trx "
            "WHERE trx_mysql_thread_id <> CONNECTION_ID() "
            # (innodb_trx is the server's: other databases' connections,
            # another run's, are not this test's.)
            "AND trx_mysql_thread_id IN (SELECT id FROM "
            "information_schema.processlist WHERE db = DATABASE())")
    # SQLite: a reader inside a transaction keeps the WAL from being
    # copied back in full; a complete passive checkpoint proves none.
    from relstorage.adapters.sqlite.files import MAIN_FILE
    path = os.path.join(factory.adapter().data_dir, MAIN_FILE)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        busy, frames, copied = conn.execute(
            'PRAGMA wal_checkpoint(PASSIVE)').fetchone()
        return [] if frames == copied else [('wal', frames, copied)]
    finally:
        conn.close()


def _write(db, key, value):
    with db.transaction() as conn:
        root = conn.root()
        if key in root:
            root[key]['v'] = value
        else:
            root[key] = PersistentMapping(v=value)


def test_idle_connections_hold_no_snapshot(factory):
    db = ZODB.DB(factory.storage())
    try:
        _write(db, 'a', 1)
        # A connection that read, one that wrote, one that aborted, one
        # with an explicit transaction manager; all left open, idle.
        idle = []
        for how in ('read', 'write', 'abort', 'explicit'):
            tm = transaction.TransactionManager(explicit=how == 'explicit')
            conn = db.open(transaction_manager=tm)
            tm.begin()
            conn.root()['a']._p_activate()
            assert conn.root()['a']['v'] >= 1
            if how == 'write':
                conn.root()['a']['v'] += 1
                tm.commit()
            elif how == 'abort':
                conn.root()['a']['v'] = -1
                tm.abort()
            else:
                tm.commit()
            idle.append((tm, conn))
        # Another process's commit makes the snapshots, had they stayed,
        # hold something back.
        other = ZODB.DB(factory.storage())
        _write(other, 'b', 2)
        other.close()

        # The check itself sees a connection that is in a transaction
        # (with a commit after its snapshot began, for SQLite's sake).
        tm, conn = idle[0]
        tm.begin()
        conn.cacheMinimize()
        assert conn.root()['b']['v'] == 2
        _write(db, 'c', 3)
        assert _open_transactions(factory), 'the check cannot see snapshots'
        tm.commit()
        _write(db, 'c', 4)

        assert _open_transactions(factory) == []
        # Closed connections (back in ZODB's pool) hold none either.
        for tm, conn in idle:
            conn.close()
        assert _open_transactions(factory) == []
        # And the idle connections still see every commit when used again.
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        tm.begin()
        assert conn.root()['b']['v'] == 2
        assert conn.root()['a']['v'] == 2
        tm.abort()
        conn.close()
    finally:
        db.close()


def test_storage_used_directly_holds_no_snapshot(factory):
    """Without ZODB's transaction boundaries, each read ends its own."""
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        _write(db, 'a', 1)
        other = ZODB.DB(factory.storage())
        _write(other, 'b', 2)
        other.close()
        storage.load(z64)
        assert storage.lastTransaction() > z64
        assert len(storage) >= 3
        assert storage.getSize() > 0
        assert _open_transactions(factory) == []
    finally:
        db.close()


@pytest.mark.parametrize('explicit', [False, True])
def test_snapshot_after_idle_sees_only_the_view(factory, explicit):
    """A read after the poll begins the snapshot, which may be newer than
    the view: it must still return the state as of the view (history) or
    refuse with a retryable conflict (history-free), never a newer one."""
    db = ZODB.DB(factory.storage())
    try:
        _write(db, 'a', 1)
        tm = transaction.TransactionManager(explicit=explicit)
        conn = db.open(transaction_manager=tm)
        tm.begin()
        oid = conn.root()['a']._p_oid
        tm.abort()
        inst = conn._storage
        view = inst._view.tid
        # Another process commits after this connection's view, before it
        # reads (so it begins a snapshot newer than its view).
        other = ZODB.DB(factory.storage())
        _write(other, 'a', 5)
        other.close()
        inst._cache.clear()
        assert inst._view.tid == view
        assert not inst._view.load.session.in_transaction
        try:
            state, serial = inst.load(oid)
        except ReadConflictError as e:
            assert not factory.keep_history
            assert 'after this connection' in str(e)
        else:
            assert factory.keep_history
            assert u64(serial) <= view
            assert conn._reader.getState(state)['data']['v'] == 1
        # The next transaction sees the new state.
        tm.begin()
        assert conn.root()['a']['v'] == 5
        tm.abort()
        conn.close()
    finally:
        db.close()


def test_a_copy_that_fails_half_way_holds_no_snapshot(factory, tmp_path):
    """A copy out of the storage (zodbconvert's, copyTransactionsFrom's)
    stopped by an error, the error kept (as a traceback shown or logged
    keeps it): the source's iterator holds no connection in a
    transaction meanwhile."""
    from ZODB.FileStorage import FileStorage
    from ZODB.POSException import ReadOnlyError

    from relstorage.storage.copy import copy_transactions
    path = str(tmp_path / 'Data.fs')
    FileStorage(path).close()
    db = ZODB.DB(factory.storage())
    destination = FileStorage(path, read_only=True)
    try:
        _write(db, 'a', 1)
        with pytest.raises(ReadOnlyError) as caught:
            copy_transactions(db.storage, destination)
        _write(db, 'a', 2)  # (for SQLite: a commit after the snapshot)
        assert caught.traceback
        assert _open_transactions(factory) == []
    finally:
        destination.close()
        db.close()


@pytest.mark.parametrize('end', ['commit', 'rollback'])
@pytest.mark.parametrize('name', ['postgresql', 'mysql'])
def test_a_transaction_of_verbs_alone_ends_the_one_before(name, end):
    """A session restarted (the ROLLBACK of its transaction deferred to go
    with the next BEGIN), then committed or rolled back with nothing run
    since, ends the earlier transaction on the server at once: it does
    not stay open, holding its snapshot, until the session's next
    statement."""
    from relstorage.testing.dbs import DatabaseFactory
    from relstorage.testing.dbs import require
    require(name)
    factory = DatabaseFactory(name, True)
    adapter = factory.adapter()
    adapter.prepare()
    session = adapter.open_connection(True)
    try:
        session.begin(adapter.store_begin_sql)
        session.scalar(adapter.mover.last_tid_sql)
        assert _open_transactions(factory), 'the check cannot see it'
        session.restart(adapter.store_begin_sql)
        getattr(session, end)()
        assert _open_transactions(factory) == []
    finally:
        session.close()
        adapter.close()
        factory.cleanup()


def test_idle_within_the_poll_interval_holds_no_snapshot(factory):
    """With a poll-interval, the poll ZODB makes as a transaction ends is
    skipped; the end of the snapshot, which was to go with it, is sent
    all the same."""
    db = ZODB.DB(factory.storage(poll_interval=60))
    try:
        _write(db, 'a', 1)
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        for _ in range(2):  # (the first poll of a connection is real)
            tm.begin()
            assert conn.root()['a']['v'] == 1
            tm.commit()
        other = ZODB.DB(factory.storage())
        _write(other, 'b', 2)  # (for SQLite: a commit after the snapshot)
        other.close()
        assert _open_transactions(factory) == []
        conn.close()
    finally:
        db.close()
