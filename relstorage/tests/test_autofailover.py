"""PostgreSQL under a real failover manager: a private pg_auto_failover
formation (a monitor and two data nodes, testing.autofailover), reached
through every node's host and port with target_session_attrs=read-write,
as ``pg_autoctl show uri`` prints it. A commit loop goes on across
``pg_autoctl perform failover``: every acknowledged commit is there, and
the time without a commit is bounded (printed). The bank workload (three
writer processes, a reader) goes on across a failover and across the
primary's postmaster and keeper SIGKILLed. Last, with the standby
asynchronous and behind, the primary is lost: the storage says that the
promoted standby lacks what it had seen, and serves none of it."""
import json
import logging
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

from .chaos import Chaos

#: Seconds writers may go without a commit across a failover.
RESUME_WITHIN = 120


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
    print('\n' + uri)
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
        formation.client_uri(), driver=driver,
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


# The bank workload


class FailoverBank(Chaos):
    """Chaos's bank transfers, three writer processes and a reader, on
    the formation's primary through every node's host and port; *fault*
    once the writers commit: ``failover`` (pg_autoctl perform failover)
    or ``kill`` (SIGKILL of the primary's postmaster and its keeper, see
    Formation.crash; the node rejoins afterwards). The run ends once every
    writer has committed again after it."""

    def __init__(self, formation, keep_history, fault):
        super().__init__('postgresql', keep_history, seconds=RESUME_WITHIN,
                         writers=3, readers=1, seed=None, server=formation)
        self.formation = formation
        self.fault = fault
        self.faults = {fault: 0}
        self.events = {}

    def writer_names(self):
        return [name for name, (role, _, _) in self.procs.items()
                if role == 'writer']

    def committed_since(self, when):
        """The writers that committed after *when* (time.time())."""
        return [name for name in self.writer_names()
                if self.commit_times([name])[-1:] > [when]]

    def wait(self, predicate, what):
        deadline = time.monotonic() + RESUME_WITHIN
        while not predicate():
            assert time.monotonic() < deadline, (
                'hung: %s not within %ss; the formation: %s; the writers\' '
                'last errors: %s; the keepers\' logs: %s' % (
                    what, RESUME_WITHIN, self.formation.state(),
                    [self._errors(name)[-600:]
                     for name in self.writer_names()],
                    self.formation.logs()))
            time.sleep(0.1)

    def inject_faults(self):
        started = time.time()
        self.wait(lambda: len(self.committed_since(started)) == 3,
                  'every writer committing')
        time.sleep(1)
        before = self.formation.primary()
        self.fault_at = time.time()
        if self.fault == 'failover':
            self.formation.failover()
        else:
            self.formation.crash(before)
        self.faults[self.fault] += 1
        self.wait(lambda: len(self.committed_since(self.fault_at)) == 3,
                  'every writer committing after the %s' % self.fault)
        self.events['primary'] = '%s -> %s' % (before,
                                               self.formation.primary())
        time.sleep(1)
        if self.fault == 'kill':
            self.formation.rejoin(before)

    def run(self):
        summary = super().run()
        times = self.commit_times()
        before = [t for t in times if t <= self.fault_at]
        after = [t for t in times if t > self.fault_at]
        gaps = [b - a for a, b in zip(times, times[1:])]
        self.events['longest time without a commit s'] = round(max(gaps), 2)
        self.events['first commit after the fault s'] = round(
            after[0] - self.fault_at, 2)
        self.events['gap over the fault s'] = round(after[0] - before[-1], 2)
        summary['events'] = self.events
        # Let the formation settle before the next test.
        self.formation.wait_for(lambda: len(self.formation.settled()) == 2)
        return summary


@pytest.mark.parametrize('fault, keep_history', [
    ('failover', True), ('kill', False)], ids=['failover-HP', 'kill-HF'])
def test_bank_across(formation, fault, keep_history):
    # A primary lost is failed over in seconds.
    formation.quicken_health_checks()
    bank = FailoverBank(formation, keep_history, fault)
    try:
        summary = bank.run()
    finally:
        bank.remove()
    print('\n%s: %s' % (fault, json.dumps(summary)))
    assert summary['problems'] == []
    assert summary['faults'][fault] == 1
    # "Bounded" means: not hung (the run ends only once every writer has
    # committed after the fault, within RESUME_WITHIN).
    assert summary['events']['gap over the fault s'] < RESUME_WITHIN


# A standby that was behind


def _storage(formation, **options):
    return RelStorage(PostgreSQLAdapter(
        formation.dsn(), options=Options(commit_lock_timeout=10,
                                         **options)))


def _value(db):
    with db.transaction() as conn:
        return conn.root()['x']['value'], conn.root()['x']._p_serial


def test_a_lost_future_is_said_and_never_served(formation, caplog):
    """Asynchronous standby, its WAL receiver stopped: the last commits
    reach the primary alone; the primary is lost and the standby
    promoted. A storage that saw those commits says so (StaleDatabase,
    once per connection that saw them, and an error in the log), drops
    what it cached, and reads what the new primary has; with
    revert_when_stale, only the log says so."""
    from relstorage.exceptions import StaleDatabase
    primary = formation.primary()
    standby = [name for name in formation.ports
               if name not in ('monitor', primary)][0]
    formation.asynchronous(standby)
    formation.quicken_health_checks()
    storage = _storage(formation)
    storage.zap_all()
    strict = ZODB.DB(storage)
    lenient = ZODB.DB(_storage(formation, revert_when_stale=True))
    try:
        with strict.transaction() as conn:
            conn.root()['x'] = PersistentMapping(value='kept')
        kept = _value(strict)
        formation.wait_for(lambda: formation.admin(
            standby, 'SELECT pg_last_wal_replay_lsn() >= %r::pg_lsn' %
            formation.admin(primary, 'SELECT pg_current_wal_lsn()::text')
            [0][0]) == [(True,)])
        receiver = formation.pause_replication(standby)
        with strict.transaction() as conn:
            conn.root()['x']['value'] = 'lost'
        lost = _value(strict)
        assert lost[0] == 'lost' and lost[1] > kept[1]
        # A connection that stays open through it, and the other storage:
        # both saw the lost state (the ZODB cache and the shared cache
        # hold it).
        import transaction
        reader_tm = transaction.TransactionManager()
        reader = strict.open(transaction_manager=reader_tm)
        assert reader.root()['x']['value'] == 'lost'
        reader_tm.abort()
        assert _value(lenient) == lost
        formation.crash_unreplicated(primary, receiver)
        formation.wait_for(lambda: formation.primary() == standby)
        with caplog.at_level(logging.ERROR, logger='relstorage.storage.view'):
            # Each connection that saw it is told, once; retried, it reads
            # what the new primary has.
            with pytest.raises(StaleDatabase) as told:
                reader_tm.begin()
            assert 'gone back in time' in str(told.value)
            assert '%016x' % int.from_bytes(lost[1], 'big') \
                in str(told.value)
            reader_tm.begin()
            assert reader.root()['x']['value'] == 'kept'
            assert reader.root()['x']._p_serial == kept[1]
            reader_tm.abort()
            reader.close()
            # A connection from the pool, and the shared cache: the lost
            # state is served to no one.
            try:
                assert _value(strict) == kept
            except StaleDatabase:
                pass    # the pool's connection, which saw it
            assert _value(strict) == kept
            # revert_when_stale: no error, the log alone.
            assert _value(lenient) == kept
        said = [r.getMessage() for r in caplog.records
                if 'gone back in time' in r.getMessage()]
        assert len(said) == 2, said
        # Commits go on on the new primary.
        with strict.transaction() as conn:
            conn.root()['x']['value'] = 'after'
        assert _value(lenient)[0] == 'after'
        print('\nlost future: %s had %016x, the promoted %s %016x' % (
            primary, int.from_bytes(lost[1], 'big'), standby,
            int.from_bytes(kept[1], 'big')))
    finally:
        strict.close()
        lenient.close()
