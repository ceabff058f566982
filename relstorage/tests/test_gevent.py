"""The storage under gevent (see relstorage.adapters.cooperative), each
case in a child process that gevent patches before anything is imported.
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

from relstorage.testing import greenlets
from relstorage.testing import slow_proxy
from relstorage.testing.dbs import PG_HOST
from relstorage.testing.dbs import PG_PORT
from relstorage.testing.dbs import empty_database
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require

pytest.importorskip('gevent')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PATCH = 'from gevent import monkey; monkey.patch_all(); '
#: Seconds the proxy delays each message to the server.
DELAY = 0.03


def conformance_counts(module, patched, tmp_path):
    """``(passed, skipped, failed)`` of the tests of *module* (a file
    under relstorage/tests) run by pytest in a child, under gevent's
    monkey-patching when *patched*."""
    report = tmp_path / ('%s-%s.xml' % (module, patched))
    code = ('import sys, pytest; sys.exit(pytest.main(['
            '"-q", "-p", "no:cacheprovider", "--junitxml=%s", '
            '"relstorage/tests/%s.py"]))' % (report, module))
    subprocess.run([sys.executable, '-c', (PATCH if patched else '') + code],
                   cwd=ROOT, stdout=subprocess.DEVNULL, timeout=900)
    suite = ElementTree.parse(report).getroot()
    if suite.tag == 'testsuites':
        suite = suite[0]
    total, skipped = int(suite.get('tests')), int(suite.get('skipped'))
    failed = int(suite.get('failures')) + int(suite.get('errors'))
    return total - skipped - failed, skipped, failed


@pytest.mark.parametrize('module', ['test_conformance_sqlite',
                                    'test_conformance_postgresql',
                                    'test_conformance_psycopg'])
def test_conformance_under_monkey_patching(module, tmp_path):
    """ZODB's suites (both history modes) pass under gevent as they do
    without it: the same passes, the same skips, no failure."""
    if 'sqlite' not in module:
        require('postgresql')
    plain = conformance_counts(module, False, tmp_path)
    patched = conformance_counts(module, True, tmp_path)
    assert patched[2] == 0 and plain[2] == 0, (plain, patched)
    assert patched == plain
    assert patched[0] > 100


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


@pytest.fixture(scope='module')
def slow_server():
    """A dsn of the history-free test database through a proxy that
    delays each message DELAY seconds, the database holding the objects
    greenlets.batch loads."""
    require('postgresql')
    empty_database('postgresql', False, 'main')
    db = greenlets._open_db(pg_dsn(False), False, 'psycopg2',
                            create_schema=True)
    try:
        greenlets.populate(db, 50)
    finally:
        db.close()
    process, port = slow_proxy.start(PG_HOST, PG_PORT, DELAY)
    try:
        yield pg_dsn(False).replace('port=%s' % PG_PORT, 'port=%s' % port)
    finally:
        process.terminate()
        process.wait()


def run_child(mode, task, dsn, count=50, driver='psycopg2'):
    done = subprocess.run(
        greenlets.command(mode, task, dsn, False, count, driver),
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    assert lines, done.stderr[-3000:]
    return json.loads(lines[0])


def test_greenlets_wait_for_the_database_together(slow_server):
    """50 greenlets, each a transaction of slow loads: cooperative, the
    batch takes a small multiple of one transaction's time; blocking,
    about 50 times it."""
    cooperative = run_child('cooperative', 'batch', slow_server)
    blocking = run_child('blocking', 'batch', slow_server)
    ratios = (cooperative['batch'] / cooperative['one'],
              blocking['batch'] / blocking['one'])
    print('batch of 50 / one transaction: cooperative %.1f, blocking %.1f'
          % ratios)
    assert ratios[0] < 5, ratios
    assert ratios[1] > 25, ratios


# (psycopg 3: not yet; a killed greenlet leaves its connection open, and
# its row locks held, until the connection is dropped.)
@pytest.mark.parametrize('driver', ['psycopg2'])
def test_a_greenlet_killed_mid_commit_holds_no_lock(slow_server, driver):
    """Greenlets killed at moments spread over their commit (the vote,
    with the commit lock taken, and the finish): another greenlet
    commits right after each, within commit-lock-timeout."""
    result = run_child('cooperative', 'kill', slow_server, 30, driver)
    assert result['committed'] == 30
    assert result['killed'] >= 10
