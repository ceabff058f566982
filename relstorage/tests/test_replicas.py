"""replica-conf and ro-replica-conf on real replicated pairs.

Every pair is private to the test run (replica_pairs): a PostgreSQL
primary with a streaming hot standby, a MariaDB primary with a GTID
replica. Replay on the replica is held back on purpose where a test needs
a replica that lags.
"""
import json
import logging
import os
import time

import pytest
import transaction
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB.POSException import ReadConflictError

from relstorage.exceptions import ConfigurationError
from relstorage.options import Options
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import require_pair
from relstorage.testing.replica_pairs import Pair

from .chaos import Chaos

KINDS = ['postgresql', 'mysql']

#: Replay on the replica is held back this long in the lagging tests.
DELAY = 1.0


@pytest.fixture(params=KINDS)
def pair(request):
    pair = require_pair(request.param)
    yield pair
    pair.delay(0)
    pair.caught_up()


def _factory(pair, keep_history=True, **options):
    return DatabaseFactory(pair.kind, keep_history, server=pair.primary,
                           options=options)


def _served_by(storage):
    """The server file line of the session the (root) storage's loads use
    after a poll."""
    storage.lastTransaction()
    server = storage._view.session().session.server
    return server.line if server is not None else None


# Configuration


def _pg_section(pair):
    return ('<postgresql>\n dsn host=%s port=%d dbname=relstoragetest_misc '
            'user=relstoragetest\n</postgresql>'
            % (pair.primary.host, pair.primary.port))


def _open_config(text):
    return ZODB.config.storageFromString(
        '%import relstorage\n<relstorage>\n' + text + '\n</relstorage>')


@pytest.mark.parametrize('option', ['replica-conf', 'ro-replica-conf'])
def test_a_missing_server_file_is_named(tmp_path, option):
    missing = tmp_path / 'nowhere.conf'
    with pytest.raises(ConfigurationError) as exc:
        _open_config(' %s %s\n <postgresql>\n dsn host=127.0.0.1\n'
                     ' </postgresql>' % (option, missing))
    assert option in str(exc.value)
    assert str(missing) in str(exc.value)


def test_an_empty_server_file_is_named(tmp_path):
    empty = tmp_path / 'empty.conf'
    empty.write_text('# nothing yet\n\n   \n')
    with pytest.raises(ConfigurationError) as exc:
        _open_config(' replica-conf %s\n <mysql>\n host 127.0.0.1\n'
                     ' </mysql>' % empty)
    assert 'replica-conf' in str(exc.value)
    assert str(empty) in str(exc.value)
    assert 'lists no server' in str(exc.value)


def test_a_bad_port_is_named(tmp_path):
    bad = tmp_path / 'bad.conf'
    bad.write_text('db1:fivefourthreetwo\n')
    with pytest.raises(ConfigurationError) as exc:
        _open_config(' replica-conf %s\n <postgresql>\n dsn host=x\n'
                     ' </postgresql>' % bad)
    # Named by its line (a line may hold a password: it is not quoted).
    assert '%s line 1' % bad in str(exc.value)
    assert 'not a port number' in str(exc.value)


def test_every_option_from_zope_conf(tmp_path):
    pair = require_pair('postgresql')
    rw = pair.server_file(pair.primary, pair.replica)
    ro = pair.server_file(pair.replica)
    storage = _open_config(
        ' replica-conf %s\n ro-replica-conf %s\n replica-timeout 30\n'
        ' replica-max-lag 0.5\n revert-when-stale true\n%s'
        % (rw, ro, _pg_section(pair)))
    try:
        options = storage._options
        assert (options.replica_conf, options.ro_replica_conf) == (rw, ro)
        assert options.replica_timeout == 30.0
        assert options.replica_max_lag == 0.5
        assert options.revert_when_stale is True
        storage.lastTransaction()
        assert _served_by(storage) == pair.line(pair.replica)
        assert storage._adapter.current_server().line \
            == pair.line(pair.primary)
    finally:
        storage.close()


# Loads from a replica, writes to the primary


def _commit_value(db, key, value):
    conn = db.open()
    try:
        conn.root()[key] = PersistentMapping(value=value)
        transaction.commit()
    finally:
        conn.close()


def _read_value(db, key):
    conn = db.open()
    try:
        transaction.begin()
        return conn.root()[key]['value']
    finally:
        transaction.abort()
        conn.close()


def _fail_over(pair, db, key, value):
    """Stop the primary, promote the replica, and commit *key* = *value*:
    the first attempts may meet the lost connection (a retryable error);
    one of three must commit."""
    pair.primary.stop()
    pair.promote()
    for attempt in range(3):
        try:
            _commit_value(db, key, value)
            return
        except Exception:  # noqa: BLE001 -- the first may see the loss
            transaction.abort()
    _commit_value(db, key, value)


@pytest.mark.parametrize('max_lag', [0.3, 4 * DELAY])
def test_read_your_writes_from_a_lagging_replica(pair, max_lag, caplog):
    """Replay on the replica is DELAY s behind. Each value written is
    read back at once through a new connection: the newest value, never
    the old one, never a POSKeyError. With a max lag shorter than the
    delay the read-write server answers (one warning per episode); with
    a longer one the replica is waited for."""
    factory = _factory(pair, replica_max_lag=max_lag)
    factory.storage(zap=True).close()
    pair.caught_up()
    pair.delay(DELAY)
    storage = factory.storage(ro_replica_conf=pair.server_file(pair.replica))
    db = ZODB.DB(storage)
    try:
        with caplog.at_level(logging.WARNING,
                             logger='relstorage.adapters.replicas'):
            for i in range(2):
                _commit_value(db, 'new%d' % i, i)
                assert _read_value(db, 'new%d' % i) == i
                _commit_value(db, 'new%d' % i, i + 100)
                assert _read_value(db, 'new%d' % i) == i + 100
        behind = [r for r in caplog.records if 'is behind' in r.getMessage()]
        if max_lag < DELAY:
            assert len(behind) == 1, [r.getMessage() for r in caplog.records]
            assert pair.line(pair.replica).split(':')[1] \
                in behind[0].getMessage()
        else:
            assert behind == []
            assert _served_by(storage) == pair.line(pair.replica)
    finally:
        db.close()
        factory.cleanup()


def test_a_storage_opened_later_reads_what_an_earlier_one_committed(pair):
    """Replay on the replica is DELAY s behind. A storage of this process
    commits and is closed; a read-only one opened after it (a script, or
    ZODB's ReadOnlyStorage tests reopening the database) reads that
    commit, never the replica's older view: what this process has seen of
    a database is shared by its storages."""
    factory = _factory(pair, ro_replica_conf=pair.server_file(pair.replica),
                       replica_max_lag=0.5)
    factory.storage(zap=True).close()
    pair.caught_up()
    pair.delay(DELAY)
    try:
        for i in range(2):
            db = ZODB.DB(factory.storage())
            try:
                _commit_value(db, 'key%d' % i, i)
            finally:
                db.close()
            db = ZODB.DB(factory.storage(read_only=True))
            try:
                assert _read_value(db, 'key%d' % i) == i
            finally:
                db.close()
    finally:
        factory.cleanup()


def _set(db, key, value):
    conn = db.open()
    try:
        conn.root()[key]['value'] = value
        transaction.commit()
    finally:
        conn.close()


def test_polls_of_another_process_never_go_back(pair):
    """A second storage (as another process would have) whose loads come
    from the lagging replica: its view never moves backwards, though it
    commits itself (its view then needs the primary) and polls at once."""
    factory = _factory(pair, replica_max_lag=0)
    setup = ZODB.DB(factory.storage(zap=True))
    _commit_value(setup, 'w', 0)
    _commit_value(setup, 'r', 0)
    setup.close()
    pair.caught_up()
    pair.delay(DELAY)
    ro = pair.server_file(pair.replica)
    writer = ZODB.DB(factory.storage())
    reader_storage = factory.storage(ro_replica_conf=ro)
    reader = ZODB.DB(reader_storage)
    views = []
    try:
        for i in range(1, 5):
            _set(writer, 'w', i)
            _set(reader, 'r', i)
            for _ in range(3):
                conn = reader.open()
                transaction.begin()
                assert conn.root()['r']['value'] == i
                views.append(conn._storage._view.tid)
                transaction.abort()
                conn.close()
        assert views == sorted(views)
        assert len(set(views)) > 1
    finally:
        writer.close()
        reader.close()
        factory.cleanup()


def test_an_unreachable_replica_sends_loads_to_the_primary(pair, caplog):
    factory = _factory(pair)
    nowhere = pair.server_file(pair.replica)
    with open(nowhere, 'w') as f:
        f.write('127.0.0.1:1\n')
    with caplog.at_level(logging.WARNING,
                         logger='relstorage.adapters.replicas'):
        storage = factory.storage(zap=True, ro_replica_conf=nowhere)
    db = ZODB.DB(storage)
    try:
        _commit_value(db, 'x', 1)
        assert _read_value(db, 'x') == 1
        assert _served_by(storage) == pair.line(pair.primary) or \
            _served_by(storage) is None
        # The server is named by its line and its description.
        assert any('line 1: ' in r.getMessage() and 'port=1 ' in r.getMessage()
                   for r in caplog.records)
    finally:
        db.close()
        factory.cleanup()


def test_a_changed_server_file_is_used_at_the_next_transaction(pair):
    factory = _factory(pair)
    ro = pair.server_file(pair.replica, name='changing')
    storage = factory.storage(zap=True, ro_replica_conf=ro)
    db = ZODB.DB(storage)
    try:
        _commit_value(db, 'x', 1)
        assert _read_value(db, 'x') == 1
        assert _served_by(storage) == pair.line(pair.replica)
        time.sleep(1.1)  # a new mtime, and past the once-a-second look
        pair.server_file(pair.primary, name='changing')
        _commit_value(db, 'x', 2)
        assert _read_value(db, 'x') == 2
        assert _read_value(db, 'x') == 2
        assert _served_by(storage) == pair.line(pair.primary)
    finally:
        db.close()
        factory.cleanup()


# Failover between read-write servers


@pytest.fixture(params=KINDS)
def own_pair(request):
    """A synchronous pair of the test's own, to promote and stop."""
    require_pair(request.param)
    pair = Pair(request.param, synchronous=True).start()
    yield pair
    pair.remove()


def test_failover_and_return_after_replica_timeout(own_pair, caplog):
    pair = own_pair
    rw = pair.server_file(pair.primary, pair.replica)
    factory = _factory(pair, replica_conf=rw, replica_timeout=1.0)
    storage = factory.storage(zap=True)
    db = ZODB.DB(storage)
    try:
        _commit_value(db, 'a', 1)
        assert storage._adapter.current_server().line \
            == pair.line(pair.primary)
        # The next transaction fails over; nothing committed is lost.
        _fail_over(pair, db, 'b', 2)
        assert storage._adapter.current_server().line \
            == pair.line(pair.replica)
        assert _read_value(db, 'a') == 1
        assert _read_value(db, 'b') == 2
        # The first server comes back (as it was, without 'b'): after the
        # timeout the storage tries it again, finds it stale, and says so.
        pair.primary.start()
        time.sleep(1.2)
        instance = storage.new_instance()
        try:
            with pytest.raises(ReadConflictError) as exc:
                instance.poll_invalidations()
            # Until it catches up.
            with pytest.raises(ReadConflictError):
                instance.poll_invalidations()
        finally:
            instance.release()
        assert 'stale' in str(exc.value)
        assert pair.line(pair.primary).split(':')[1] in str(exc.value)
        assert storage._adapter.current_server().line \
            == pair.line(pair.primary)
    finally:
        db.close()
        factory.cleanup()


def test_revert_when_stale_goes_back_and_drops_the_cache(own_pair):
    pair = own_pair
    rw = pair.server_file(pair.primary, pair.replica)
    factory = _factory(pair, replica_conf=rw, replica_timeout=1.0,
                       revert_when_stale=True)
    storage = factory.storage(zap=True)
    db = ZODB.DB(storage)
    try:
        _commit_value(db, 'a', 1)
        _fail_over(pair, db, 'a', 2)
        assert _read_value(db, 'a') == 2
        pair.primary.start()
        time.sleep(1.2)
        # Back on the first server, which never had the second value.
        assert _read_value(db, 'a') == 1
        assert storage._adapter.current_server().line \
            == pair.line(pair.primary)
    finally:
        db.close()
        factory.cleanup()


def test_options_object_accepts_the_names():
    options = Options(replica_conf='/a', ro_replica_conf='/b',
                      replica_timeout=0, replica_max_lag=0,
                      revert_when_stale=True)
    options.check_supported()


# Failover under load


class Failover(Chaos):
    """The chaos run's bank transfers (three writers, a reader) through
    replica-conf listing the primary, then its standby; a third of the way
    in the primary is stopped and the standby promoted."""

    def __init__(self, pair, keep_history, seconds):
        self.pair = pair
        self.options = {'replica_conf': pair.server_file(pair.primary,
                                                         pair.replica)}
        super().__init__(pair.kind, keep_history, seconds, writers=3,
                         readers=1, seed=None, server=pair.primary)
        self.faults = {'failover': 0}
        self.committed_before = None

    def committed_so_far(self):
        count = 0
        for name in self.procs:
            path = os.path.join(self.dir, name + '.log')
            if os.path.exists(path):
                with open(path) as f:
                    count += sum(1 for line in f if line.startswith('C '))
        return count

    def inject_faults(self):
        # A third of the way in, once the writers have committed a few.
        time.sleep(self.seconds / 3)
        while (self.committed_so_far() <= 5
               and time.time() < self.deadline - self.seconds / 2):
            time.sleep(0.1)
        self.committed_before = self.committed_so_far()
        self.pair.primary.stop()
        self.pair.promote()
        self.faults['failover'] += 1
        while time.time() < self.deadline:
            time.sleep(0.2)


def test_failover_under_load(own_pair):
    # One history mode each (the workload runs in both in test_chaos).
    keep_history = own_pair.kind == 'postgresql'
    run = Failover(own_pair, keep_history, seconds=12)
    try:
        summary = run.run()
    finally:
        run.remove()
    summary['committed before the failover'] = run.committed_before
    print(json.dumps(summary))
    assert summary['problems'] == []
    assert run.committed_before > 5, summary
    # The writers went on, on the new primary, within a bounded time.
    assert summary['transfers committed'] > run.committed_before + 10, \
        summary
    assert summary['longest stall s'] < 8, summary


def test_a_libpq_multi_host_dsn_fails_over_as_a_lost_connection():
    """No server files: libpq's own host list with target_session_attrs
    picks the read-write server, and after a failover the next
    transaction reconnects to the new one."""
    require_pair('postgresql')
    pair = Pair('postgresql', synchronous=True).start()
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.storage import RelStorage
    dsn = ('host=%s,%s port=%d,%d dbname=relstoragetest_hp '
           'user=relstoragetest password=relstoragetest '
           'target_session_attrs=read-write'
           % (pair.replica.host, pair.primary.host, pair.replica.port,
              pair.primary.port))
    storage = RelStorage(PostgreSQLAdapter(dsn, options=Options()))
    storage.zap_all()
    db = ZODB.DB(storage)
    try:
        _commit_value(db, 'a', 1)
        _fail_over(pair, db, 'b', 2)
        assert (_read_value(db, 'a'), _read_value(db, 'b')) == (1, 2)
    finally:
        db.close()
        pair.remove()
