"""The storage under gevent (see relstorage.adapters.cooperative), each
case in a child process that gevent patches before anything is imported.
"""
import json
import os
import subprocess
import sys
import unittest

import pytest
import ZODB

from relstorage.testing import greenlets
from relstorage.testing import slow_proxy
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import MYSQL_HOST
from relstorage.testing.dbs import MYSQL_PORT
from relstorage.testing.dbs import PG_HOST
from relstorage.testing.dbs import PG_PORT
from relstorage.testing.dbs import empty_database
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require
from relstorage.testing.private_servers import private_server

from .chaos import ACCOUNTS
from .chaos import START
from .chaos import open_bank
from .chaos import read_bank
from .chaos import replay

pytest.importorskip('gevent')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PATCH = 'from gevent import monkey; monkey.patch_all(); '
#: The history modes the storage suites run in under gevent.
MODES = ('HP', 'HF')
#: Seconds the proxy delays each message to the server.
DELAY = 0.03


def expected_counts(database, driver, modes):
    """``(tests, skipped)``: how many tests the suites of *database*
    through *driver* have in the history *modes* (but those
    gevent_conformance.NOT_RUN leaves out), and how many of them are
    skips by design (a test that cannot apply), as test_conformance_guard
    counts them."""
    from .conformance import count_tests
    from .gevent_conformance import NOT_RUN
    from .gevent_conformance import classes
    chosen = classes(database, driver, modes)
    left_out = NOT_RUN.get(driver, ((), ''))[0]
    names = [(cls, name) for cls in chosen
             for name in unittest.TestLoader().getTestCaseNames(cls)]
    skips = sum(1 for cls, name in names
                if getattr(getattr(cls, name), '__unittest_skip__', False))
    missing = sum(1 for _, name in names if name in left_out)
    return sum(count_tests(cls) for cls in chosen) - missing, skips


#: database -> its drivers under gevent, each with the history modes its
#: suites run in: every driver and every mode of each database, each
#: driver in one mode (both with RELSTORAGE_TEST_GEVENT_FULL=1), to keep
#: the time this adds to a run small; the suites without gevent run in
#: both modes in test_conformance_*.
SUITES = {
    'sqlite': [('sqlite3', ('HP', 'HF'))],
    'postgresql': [('psycopg2', ('HP',)), ('psycopg', ('HF',))],
    'mysql': [('MySQLdb', ('HF',)), ('PyMySQL', ('HP',))],
}


def suites(database):
    full = os.environ.get('RELSTORAGE_TEST_GEVENT_FULL') == '1'
    return [(driver, MODES if full else modes)
            for driver, modes in SUITES[database]]


def _conformance(database, driver, modes):
    """``(database, driver, modes, (ran, skipped, failed), slowest)`` of
    the suites under gevent in a child."""
    done = subprocess.run(
        [sys.executable, '-c', PATCH + 'from relstorage.tests.'
         'gevent_conformance import main; main()', database,
         '' if driver == 'sqlite3' else driver, ','.join(modes)],
        cwd=ROOT, capture_output=True, text=True, timeout=1500)
    lines = done.stdout.splitlines()
    counts = (json.loads(lines[-1]) if lines
              else (0, 0, ['no result: ' + done.stderr[-3000:]]))
    return database, driver, modes, counts, done.stderr


@pytest.mark.timeout(1500)
@pytest.mark.parametrize('database', sorted(SUITES))
def test_conformance_under_monkey_patching(database):
    """ZODB's suites under gevent's monkey-patching through each driver
    of *database*: every test runs and passes but the skips by design
    (the counts are the ones test_conformance_guard keeps from
    shrinking). One child at a time: the race tests' 64 clients are
    bound by the processor, and beside other children ran past their
    120 s."""
    if database != 'sqlite':
        require(database)
    results = [_conformance(database, driver, modes)
               for driver, modes in suites(database)]
    for database, driver, modes, (ran, skipped, failed), slowest in results:
        print('%s %s %s under gevent: %d passed, %d skipped, %d failed; '
              'slowest:\n%s' % (database, driver, '+'.join(modes),
                                 ran - skipped - len(failed), skipped,
                                 len(failed), slowest))
    for database, driver, modes, (ran, skipped, failed), _ in results:
        assert not failed, '\n'.join(failed)[-6000:]
        assert (ran, skipped) == expected_counts(
            database, None if driver == 'sqlite3' else driver, modes)


#: A long SQLite statement beside a greenlet counting the times it runs.
SQLITE_STATEMENT = """
import sys, tempfile, gevent
from relstorage.adapters.sqlite import SQLiteAdapter
adapter = SQLiteAdapter(tempfile.mkdtemp(), driver=sys.argv[1],
                        gevent_yield_interval=int(sys.argv[2]) or None)
session = adapter.open_connection(False)
runs = []
def counter():
    while True:
        runs.append(1)
        gevent.sleep(0)
gevent.spawn(counter)
gevent.sleep(0)
session.scalar('WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 '
               'FROM c WHERE n < 200000) SELECT count(*) FROM c')
print(len(runs))
"""


@pytest.mark.parametrize('patched, driver, interval, yields', [
    (True, 'auto', 1000, True),
    (False, 'gevent sqlite3', 1000, True),
    (True, 'auto', 0, False),
    (False, 'sqlite3', 1000, False),
])
def test_sqlite_yields_every_interval_under_gevent(patched, driver,
                                                   interval, yields):
    """gevent_yield_interval: a long statement lets other greenlets run,
    with gevent in use (patched, or the driver gevent sqlite3) only."""
    done = subprocess.run(
        [sys.executable, '-c', (PATCH if patched else '') + SQLITE_STATEMENT,
         driver, str(interval)], cwd=ROOT, capture_output=True, text=True,
        timeout=120)
    runs = int(done.stdout.strip() or -1)
    assert runs >= 0, done.stderr[-3000:]
    # Once as the statement starts (the counter was started before it)
    # when nothing yields; hundreds of times when it does.
    assert (runs > 50) == yields, runs


def _slow_address(database, port):
    """The address (greenlets' ``(database, address)``) of the
    history-free test database through a proxy on *port* (None: the
    server itself)."""
    if database == 'mysql':
        params = mysql_params(False)
        if port is not None:
            params.update(host='127.0.0.1', port=port)
        return database, json.dumps(params)
    dsn = pg_dsn(False)
    if port is not None:
        dsn = dsn.replace('port=%s' % PG_PORT, 'port=%s' % port)
    return database, dsn


#: The server each database's proxy forwards to.
SERVERS = {'postgresql': (PG_HOST, PG_PORT),
           'mysql': (MYSQL_HOST, MYSQL_PORT)}


#: A greenlet killed in the middle of a long SQLite statement.
SQLITE_KILLED = """
import tempfile, gevent
from relstorage.adapters.sqlite import SQLiteAdapter
adapter = SQLiteAdapter(tempfile.mkdtemp(), gevent_yield_interval=1000)
session = adapter.open_connection(False)
ended = []
def long():
    try:
        session.scalar('WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT '
                       'n + 1 FROM c WHERE n < 5000000) SELECT count(*) '
                       'FROM c')
    except BaseException as e:
        ended.append(type(e).__name__)
        raise
victim = gevent.spawn(long)
gevent.sleep(0.05)
victim.kill()
print(ended, session.scalar('SELECT 42'))
"""


def test_a_greenlet_killed_in_a_long_sqlite_statement_ends_killed():
    """Killed while the statement lets others run, the greenlet ends by
    its GreenletExit (not sqlite3's "interrupted" error, which the
    progress handler's exception becomes), and the session goes on."""
    done = subprocess.run(
        [sys.executable, '-c', PATCH + SQLITE_KILLED], cwd=ROOT,
        capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "['GreenletExit'] 42", done.stderr[-3000:]


@pytest.fixture(scope='module', params=['postgresql', 'mysql'])
def slow_server(request):
    """The history-free test database of a server (``(database,
    address)``) through a proxy that delays each message DELAY seconds,
    the database holding the objects greenlets.batch loads."""
    database = request.param
    require(database)
    empty_database(database, False, 'main')
    db = greenlets._open_db(_slow_address(database, None), False, 'auto',
                            create_schema=True)
    try:
        greenlets.populate(db, 50)
    finally:
        db.close()
    process, port = slow_proxy.start(*SERVERS[database], DELAY)
    try:
        yield _slow_address(database, port)
    finally:
        process.terminate()
        process.wait()


def run_child(mode, task, where, count=50, driver='psycopg2'):
    done = subprocess.run(
        greenlets.command(mode, task, where, False, count, driver),
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    assert lines, done.stderr[-3000:]
    return json.loads(lines[0])


#: The drivers of each database.
DRIVERS = {'postgresql': ('psycopg2', 'psycopg'),
           'mysql': ('MySQLdb', 'PyMySQL')}


def test_greenlets_wait_for_the_database_together(slow_server):
    """50 greenlets, each a transaction of slow loads: cooperative, all
    50 transactions are open at once (each greenlet waits for the server
    while the others run) through each driver, and the batch takes a
    small multiple of one transaction's time; blocking (the first driver,
    unpatched), one transaction ends before the next begins."""
    database = slow_server[0]
    first = DRIVERS[database][0]
    blocking = run_child('blocking', 'batch', slow_server, driver=first)
    results = {'blocking': blocking}
    for driver in DRIVERS[database]:
        results[driver] = run_child('cooperative', 'batch', slow_server,
                                    driver=driver)
    ratios = {name: result['batch'] / result['one']
              for name, result in results.items()}
    print('%s: batch of 50 / one transaction: %s' % (database, ', '.join(
        '%s %.1f' % item for item in sorted(ratios.items()))))
    assert blocking['together'] == 1, results
    assert all(results[driver]['together'] == 50
               for driver in DRIVERS[database]), results
    # The greenlets' CPU time does not overlap (a busy machine's two
    # cores, shared, make it a few transactions' time): a small multiple,
    # where one at a time would be tens of times one transaction (reading
    # ahead into the shared cache spares the later ones some loads).
    assert all(ratios[driver] < 10 for driver in DRIVERS[database]), results


def test_a_greenlet_killed_mid_commit_holds_no_lock(slow_server):
    """Greenlets killed at moments spread over their commit (the vote,
    with the commit lock taken, and the finish), through each driver:
    another greenlet commits right after each, within
    commit-lock-timeout."""
    for driver in DRIVERS[slow_server[0]]:
        result = run_child('cooperative', 'kill', slow_server, 16, driver)
        assert result['committed'] == 16, driver
        assert result['killed'] >= 5, (driver, result)


def _private_address(database, server):
    """A private server's history-free test database, as greenlets'
    ``(database, address)``."""
    if database == 'mysql':
        return database, json.dumps(mysql_params(False, server=server))
    return database, pg_dsn(False, server=server)


@pytest.mark.parametrize('database', ['postgresql', 'mysql'])
def test_bank_of_greenlets_in_processes_conserves_the_total(database):
    """4 processes of 20 greenlets each, every greenlet committing
    transfers between the bank workload's accounts (on a private server:
    160 connections): the total is conserved, every transfer a greenlet
    committed is there once, and the balances are their replay."""
    require(database)
    server = private_server(database)
    factory = DatabaseFactory(database, False, server=server)
    open_bank(factory.storage(zap=True), ACCOUNTS, START)
    where = _private_address(database, server)
    children = [subprocess.Popen(
        greenlets.command('cooperative', 'bank', where, False, 20,
                          DRIVERS[database][index % 2]),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for index in range(4)]
    committed = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert out, err[-3000:]
        committed += json.loads(out.splitlines()[0])['committed']
    assert len(committed) == 4 * 20 * greenlets.TRANSFERS
    db = ZODB.DB(factory.storage())
    try:
        accounts, transfers = read_bank(db)
    finally:
        db.close()
        factory.cleanup()
    assert sorted(transfers) == sorted(committed)
    assert sum(accounts.values()) == ACCOUNTS * START
    assert accounts == replay(transfers, ACCOUNTS, START)


#: test_reconnect's tests of killed server connections: idle ones
#: reopened, one killed during a commit retryable, and at each phase of a
#: commit nothing left behind.
RECONNECT = ('idle_connections_killed or killed_during_commit '
             'or killed_at_each_commit_phase')


@pytest.mark.parametrize('database', ['postgresql', 'mysql'])
def test_killed_server_connections_are_reopened_under_gevent(database):
    """test_reconnect's killed connections, under gevent's
    monkey-patching (the default drivers, psycopg2 and mysqlclient, made
    cooperative here), in a child: every one passes."""
    require(database)
    code = ('import sys, pytest; sys.exit(pytest.main(["-q", "-rs", "-p", '
            '"no:cacheprovider", "relstorage/tests/test_reconnect.py", '
            '"-k", "%s and (%s)"]))' % (database, RECONNECT))
    done = subprocess.run([sys.executable, '-c', PATCH + code], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    summary = done.stdout.strip().splitlines()[-1:]
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert 'skipped' not in summary[0] and ' passed' in summary[0], summary
    print(database, summary[0])
