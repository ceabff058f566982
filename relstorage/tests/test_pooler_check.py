"""The check an open makes when told of no pooler, against a private
pgbouncer in transaction mode (see testing.pgbouncer_server): a refused
open changes no server session of the pool, and other clients' traffic
through the pool does not let an open through."""
import threading

import pytest

from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.exceptions import ConfigurationError
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.dbs import require_pooler

DATABASE = 'relstoragetest_hp'
#: What a server session keeps: the settings a SET changed in it (but
#: those pgbouncer itself sets for each client it lends the session to),
#: its LISTENs and its prepared statements.
SESSION_STATE = (
    "SELECT pg_backend_pid(), ARRAY(SELECT name || '=' || setting FROM "
    "pg_settings WHERE source = 'session' AND name <> ALL(%s) ORDER BY "
    "name), (SELECT count(*) FROM pg_listening_channels()), "
    "(SELECT count(*) FROM pg_prepared_statements)")
POOLER_SETS = ['application_name', 'client_encoding', 'DateStyle',
               'IntervalStyle', 'standard_conforming_strings', 'TimeZone']
UNTOUCHED = ([], 0, 0)


def _open_unannounced(pooler, driver='auto'):
    """Open a storage through *pooler*, told of none."""
    return RelStorage(PostgreSQLAdapter(
        pooler.dsn(DATABASE), pooler='none', driver=driver,
        options=Options(keep_history=True, poll_interval=5)))


def _server_sessions(pooler):
    """SESSION_STATE of every server session of the pool, each held by
    a transaction of its own (so that none is lent twice)."""
    held = [pooler.connect(DATABASE) for _ in range(pooler.pool_size)]
    try:
        states = []
        for conn in held:
            cur = conn.cursor()     # (psycopg2 begins a transaction)
            cur.execute(SESSION_STATE, (POOLER_SETS,))
            states.append(cur.fetchone())
        return states
    finally:
        for conn in held:
            # (Ended first: pgbouncer drops a server session whose client
            # left in a transaction.)
            conn.rollback()
            conn.close()


def _refused(pooler, driver='auto'):
    with pytest.raises(ConfigurationError) as raised:
        _open_unannounced(pooler, driver).close()
    assert 'transaction mode' in str(raised.value)


@pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])
def test_a_refused_open_sets_nothing_in_the_pooled_session(driver):
    # One server session, lent to every client in turn: the open's
    # connections all run on it, and so does the next client's.
    pooler = require_pooler('transaction', pool_size=1)
    RelStorage(PostgreSQLAdapter(pooler.dsn(DATABASE), pooler='transaction',
                                 options=Options())).close()  # the schema
    (before,) = _server_sessions(pooler)
    assert before[1:] == UNTOUCHED
    _refused(pooler, driver)
    (after,) = _server_sessions(pooler)
    assert after[0] == before[0]    # that same server session
    # No SET (synchronous_commit, for one, would stop another client's
    # commit from waiting for a synchronous standby), no LISTEN and no
    # prepared statement.
    assert after[1:] == UNTOUCHED


def test_opens_among_other_clients_traffic_are_all_refused():
    # Other clients' short transactions keep taking the server session
    # an open's probe just gave back: none of the opens gets through,
    # and none leaves anything in a server session.
    pooler = require_pooler('transaction', pool_size=4)
    RelStorage(PostgreSQLAdapter(pooler.dsn(DATABASE), pooler='transaction',
                                 options=Options())).close()  # the schema
    stop = threading.Event()
    started = threading.Barrier(5)
    errors = []

    def traffic():
        conn = pooler.connect(DATABASE)
        try:
            conn.autocommit = True
            cur = conn.cursor()
            cur.execute('SELECT 1')
            started.wait()
            while not stop.is_set():
                cur.execute('SELECT pg_sleep(0.001)')
        except Exception as e:  # noqa: BLE001 -- reported by the test
            errors.append(e)
            started.abort()
        finally:
            conn.close()

    threads = [threading.Thread(target=traffic) for _ in range(4)]
    for thread in threads:
        thread.start()
    got_through = 0
    try:
        started.wait()
        for _ in range(25):
            try:
                _open_unannounced(pooler).close()
            except ConfigurationError as e:
                assert 'transaction mode' in str(e)
            else:
                got_through += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert got_through == 0
    for state in _server_sessions(pooler):
        assert state[1:] == UNTOUCHED
