"""PostgreSQL with synchronous replication whose standby has stopped
answering (a failover under way, a standby lost): a commit still waits
for the standby, and yet a fast shutdown of the server ends.

A backend drops its session's temporary tables (our temp_store) as it
exits, in a transaction of its own; committed with the session's
synchronous_commit, that drop waited for the silent standby for good, and
the server never stopped (pg_auto_failover's demotion of the old primary
hung so). Runs on a private server: the test reconfigures it and stops
it."""
import threading
import time

import pytest
import ZODB

from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.servers import ServerError

from .test_server_full_disk import _server

DATABASE = 'relstorage_sync_standby'
#: What pg_ctl may take to stop the server (it takes well under a second
#: when nothing holds it up).
STOP_SECONDS = 20


def _admin(server):
    conn = server._admin_connect()
    return conn, conn.cursor()


def _adapter(server, keep_history):
    return PostgreSQLAdapter(
        dsn='dbname=%s host=%s port=%d user=%s password=%s' % (
            DATABASE, server.host, server.port, server.user,
            server.password),
        options=Options(keep_history=keep_history))


def _waiting_for_standby(server, seconds=30):
    """The pids of our database's backends waiting for a standby, once
    there is one (or [] after *seconds*)."""
    deadline = time.monotonic() + seconds
    conn, cursor = _admin(server)
    try:
        while True:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname "
                           "= %s AND wait_event = 'SyncRep'", (DATABASE,))
            pids = [row[0] for row in cursor.fetchall()]
            if pids or time.monotonic() > deadline:
                return pids
            time.sleep(0.1)
    finally:
        conn.close()


def _require_a_standby(server, seconds=30):
    """Make every commit wait for a standby named 'nobody', and return
    once the server does so (its checkpointer takes the setting up in its
    own time): a probe commit is seen waiting for replication, and is
    cancelled."""
    probe, cursor = _admin(server)
    # (Not a temporary table: its rows would not be replicated.)
    cursor.execute('CREATE TABLE IF NOT EXISTS probe (x int)')
    # (The private servers leave it off, for speed.)
    server.set('synchronous_commit', 'on')
    server.set('synchronous_standby_names', 'nobody')
    deadline = time.monotonic() + seconds
    pid = probe.get_backend_pid()
    watcher, watch = _admin(server)
    try:
        while time.monotonic() < deadline:
            insert = threading.Thread(
                target=cursor.execute, args=('INSERT INTO probe VALUES (1)',))
            insert.start()
            insert.join(0.5)
            watch.execute('SELECT wait_event FROM pg_stat_activity '
                          'WHERE pid = %s', (pid,))
            if watch.fetchone()[0] == 'SyncRep':
                watch.execute('SELECT pg_cancel_backend(%s)', (pid,))
                insert.join(10)
                return
            insert.join(10)
        raise AssertionError('commits do not wait for the standby:\n%s'
                             % server.logtail())
    finally:
        probe.close()
        watcher.close()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_fast_shutdown_ends_while_a_commit_waits_for_a_silent_standby(
        keep_history):
    server = _server('postgresql')
    conn, cursor = _admin(server)
    cursor.execute('DROP DATABASE IF EXISTS %s' % DATABASE)
    cursor.execute('CREATE DATABASE %s OWNER %s' % (DATABASE, server.user))
    conn.close()
    dbs = []
    try:
        # Two instances: one commits into the wait, the other's store
        # session sits idle with its temp_store.
        for _ in range(2):
            dbs.append(ZODB.DB(RelStorage(_adapter(server, keep_history))))
        for n, db in enumerate(dbs):
            with db.transaction() as c:
                c.root()['n%d' % n] = 1
        _require_a_standby(server)
        ended = []

        def commit():
            try:
                with dbs[0].transaction() as c:
                    c.root()['n0'] = 2
            except Exception as e:  # noqa: BLE001 -- recorded, asserted
                ended.append(e)
            else:
                ended.append(None)

        committer = threading.Thread(target=commit, daemon=True)
        committer.start()
        # The commit waits for the standby: synchronous_commit is still
        # the server's for our transactions.
        assert _waiting_for_standby(server), server.logtail()
        assert not ended
        started = time.monotonic()
        try:
            server._run([server._program('pg_ctl'), '-D', server.data_dir,
                         '-m', 'fast', '-w', '-t', str(STOP_SECONDS),
                         'stop'], 'pg_ctl stop -m fast',
                        timeout=STOP_SECONDS + 10, as_server_user=True)
        except ServerError as e:
            pytest.fail('a fast shutdown did not end: %s' % e)
        assert time.monotonic() - started < STOP_SECONDS
        committer.join(30)
        assert ended and ended[0] is not None
    finally:
        # (An immediate shutdown when the fast one failed: the commit
        # holds its connection until then.)
        server.stop()
        for db in dbs:
            db.close()
        server.start()
        server.set('synchronous_standby_names', '')
        server.set('synchronous_commit', 'off')
    try:
        # The commit had reached the primary's own disk before the
        # shutdown; once the server is back, it reads as either state
        # and the next commit goes through.
        db = ZODB.DB(RelStorage(_adapter(server, keep_history)))
        try:
            with db.transaction() as c:
                assert c.root()['n0'] in (1, 2)
                assert c.root()['n1'] == 1
                c.root()['n0'] = 3
            with db.transaction() as c:
                assert c.root()['n0'] == 3
        finally:
            db.close()
    finally:
        conn, cursor = _admin(server)
        cursor.execute('DROP DATABASE IF EXISTS %s' % DATABASE)
        conn.close()
