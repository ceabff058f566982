"""PostgreSQL under a real failover manager: a private pg_auto_failover
formation (a monitor and two data nodes, testing.autofailover), reached
through every node's host and port with target_session_attrs=read-write,
as ``pg_autoctl show uri`` prints it. A commit loop goes on across
``pg_autoctl perform failover``: every acknowledged commit is there, and
the time without a commit is bounded (printed)."""
import threading
import time
import unittest

import pytest
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.exceptions import CommitOutcomeUnknown
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.dbs import in_ci

#: Seconds writers may go without a commit across a failover.
RESUME_WITHIN = 60


@pytest.fixture(scope='module')
def formation():
    from relstorage.testing.autofailover import Formation
    from relstorage.testing.servers import NotInstalled
    formation = Formation()
    try:
        formation.start()
    except NotInstalled as e:
        if in_ci():
            raise AssertionError('CI=true and no pg_auto_failover: %s' % e)
        raise unittest.SkipTest('no pg_auto_failover: %s' % e)
    yield formation
    formation.remove()


def test_the_uri_the_manager_prints_names_every_node(formation):
    uri = formation.uri()
    for name, port in formation.ports.items():
        if name != 'monitor':
            assert '%s:%d' % (formation.host, port) in uri
    assert 'target_session_attrs=read-write' in uri


class Writer(threading.Thread):
    """Commits counter increments until stopped; notes what it was told."""

    def __init__(self, db):
        super().__init__(daemon=True)
        self.db = db
        self.acknowledged = 0
        self.unknown = 0
        self.errors = {}
        self.commit_times = []
        self.stopping = threading.Event()

    def run(self):
        import transaction
        tm = transaction.TransactionManager()
        conn = self.db.open(transaction_manager=tm)
        try:
            while not self.stopping.is_set():
                self.commit_one(tm, conn)
        finally:
            tm.abort()
            conn.close()

    def commit_one(self, tm, conn):
        try:
            tm.begin()
            conn.root()['counter']['n'] += 1
            tm.commit()
        except CommitOutcomeUnknown:
            tm.abort()
            self.unknown += 1
        except Exception as e:  # noqa: BLE001 -- counted, retried
            tm.abort()
            name = type(e).__name__
            self.errors[name] = self.errors.get(name, 0) + 1
            time.sleep(0.1)
        else:
            self.acknowledged += 1
            self.commit_times.append(time.monotonic())


@pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])
def test_commits_go_on_across_a_failover(formation, driver):
    storage = RelStorage(PostgreSQLAdapter(
        formation.dsn(), driver=driver,
        options=Options(commit_lock_timeout=10)))
    storage.zap_all()
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()['counter'] = PersistentMapping(n=0)
        before = formation.primary()
        writer = Writer(db)
        writer.start()
        time.sleep(1)
        started = time.monotonic()
        formation.failover()
        formation.wait_for(lambda: formation.primary() not in (None, before)
                           and len(formation.settled()) == 2)
        # Commits on the new primary.
        deadline = time.monotonic() + RESUME_WITHIN
        while not [t for t in writer.commit_times if t > started + 1] \
                or formation.primary() == before:
            assert time.monotonic() < deadline, writer.errors
            time.sleep(0.2)
        time.sleep(1)
        writer.stopping.set()
        writer.join(30)
        with db.transaction() as conn:
            n = conn.root()['counter']['n']
        assert writer.acknowledged <= n <= writer.acknowledged + writer.unknown
        gaps = [b - a for a, b in zip(writer.commit_times,
                                      writer.commit_times[1:])]
        print('\n%s: failover %s -> %s; %d commits, longest time without '
              'one %.2fs; errors seen %s' % (
                  driver, before, formation.primary(), writer.acknowledged,
                  max(gaps), writer.errors))
        assert max(gaps) < RESUME_WITHIN
    finally:
        db.close()
