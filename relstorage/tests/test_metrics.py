"""``metrics true``: a known workload on each database and history mode,
the metrics scraped over HTTP (prometheus_client's own server on the
default registry, as an application serves them, and relstorage-metrics)
and the counts checked exactly."""
import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
import transaction
import ZODB
from BTrees.Length import Length
from persistent.mapping import PersistentMapping
from prometheus_client import start_http_server
from prometheus_client.multiprocess import mark_process_dead
from prometheus_client.parser import text_string_to_metric_families
from ZODB.blob import Blob
from ZODB.POSException import ConflictError
from ZODB.POSException import ReadConflictError
from ZODB.serialize import referencesf

from relstorage.cache.lru import ENTRY_OVERHEAD
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env

from .test_reconnect import _backend_id
from .test_reconnect import _kill


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='module')
def endpoint():
    """The default registry served over HTTP, as an application would."""
    port = free_port()
    served = start_http_server(port, addr='127.0.0.1')
    yield 'http://127.0.0.1:%d/metrics' % port
    if served:  # prometheus_client 0.20 and later return the server
        served[0].shutdown()


class Scrape:
    """The samples of one scrape of *url*."""

    def __init__(self, url):
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode('utf-8')
        self.samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[sample.name, frozenset(
                    sample.labels.items())] = sample.value

    def get(self, name, **labels):
        """The value of one sample, None when there is none."""
        return self.samples.get((name, frozenset(labels.items())))

    def total(self, name, **labels):
        """The sum of the samples of *name* having *labels*."""
        wanted = set(labels.items())
        return sum(value for (sample, got), value in self.samples.items()
                   if sample == name and wanted <= got)

    def names(self, storage):
        return {sample for (sample, got), _ in self.samples.items()
                if ('storage', storage) in got}


def unique(what):
    return '%s-%s' % (what, uuid.uuid4().hex[:8])


def test_commits_phases_and_conflicts(factory, endpoint):
    name = unique('conflicts')
    db = ZODB.DB(factory.storage(metrics=True, name=name))
    try:
        with db.transaction() as conn:  # commit 2 (1: the root)
            root = conn.root()
            root['length'] = Length()
            root['plain'] = PersistentMapping()
            root['watched'] = PersistentMapping()
        tm1, tm2 = transaction.TransactionManager(), \
            transaction.TransactionManager()
        c1, c2 = db.open(tm1), db.open(tm2)

        # Both change a Length: the second commit resolves the conflict.
        c1.root()['length'].change(1)
        c2.root()['length'].change(1)
        tm1.commit()  # 3
        tm2.commit()  # 4
        tm1.begin()
        assert c1.root()['length']() == 2

        # Both change a PersistentMapping: the second one fails.
        c1.root()['plain']['k'] = 1
        c2.root()['plain']['k'] = 2
        tm1.commit()  # 5
        with pytest.raises(ConflictError) as raised:
            tm2.commit()
        assert not isinstance(raised.value, ReadConflictError)
        tm2.abort()

        # c1 read 'watched' as current (readCurrent); c2 changes it first.
        tm1.begin()
        tm2.begin()
        c1.readCurrent(c1.root()['watched'])
        c1.root()['plain']['k'] = 3
        c2.root()['watched']['v'] = 1
        tm2.commit()  # 6
        with pytest.raises(ReadConflictError):
            tm1.commit()
        tm1.abort()
        c1.close()
        c2.close()

        scrape = Scrape(endpoint)
    finally:
        db.close()
    assert scrape.get('relstorage_commits_total', storage=name) == 6
    for phase in ('lock_wait', 'vote', 'finish'):
        assert scrape.get('relstorage_commit_seconds_count', storage=name,
                          phase=phase) == 6
        assert scrape.get('relstorage_commit_seconds_sum', storage=name,
                          phase=phase) > 0
    assert scrape.get('relstorage_commit_lock_wait_seconds_count',
                      storage=name) == 6
    conflicts = 'relstorage_conflicts_total'
    assert scrape.get(conflicts, storage=name, kind='write',
                      outcome='resolved', **{'class': 'BTrees.Length.Length'}
                      ) == 1
    assert scrape.get(conflicts, storage=name, kind='write',
                      outcome='raised', **{
                          'class': 'persistent.mapping.PersistentMapping'}
                      ) == 1
    assert scrape.total(conflicts, storage=name, kind='write') == 2
    # The object read as current is not among those stored: its class is
    # named only when the shared cache still holds the revision read.
    assert scrape.total(conflicts, storage=name, kind='read',
                        outcome='raised') == 1
    assert scrape.total(conflicts, storage=name) == 3
    # Resolving the Length read the revision c2 started from: without
    # history, from the states the instance keeps (with history it is
    # gone from the shared cache, which holds c1's newer one).
    assert scrape.get('relstorage_loads_total', storage=name,
                      source='instance') == (
        0 if factory.keep_history else 1)


def test_loads_polls_reconnects_and_pack(factory, endpoint):
    writer_name, reader_name = unique('writer'), unique('reader')
    writer = ZODB.DB(factory.storage(metrics=True, name=writer_name))
    reader = ZODB.DB(factory.storage(metrics=True, name=reader_name))
    try:
        with writer.transaction() as conn:
            root = conn.root()
            root['a'] = PersistentMapping(b=PersistentMapping(
                c=PersistentMapping(n=0)))
            root['g'] = PersistentMapping()
        tm = transaction.TransactionManager()
        conn = reader.open(tm)

        def loads(scrape, source):
            return scrape.get('relstorage_loads_total', storage=reader_name,
                              source=source)

        tm.begin()
        # The root is loaded first (ZODB may load it more than once); then
        # a, b and c, each the only child of the one before, so that
        # nothing is read ahead.
        a = conn.root()['a']
        first = Scrape(endpoint)
        assert a['b']['c']['n'] == 0  # cold: each from the database
        cold = Scrape(endpoint)
        assert loads(cold, 'database') - loads(first, 'database') == 3
        assert loads(cold, 'shared_cache') == loads(first, 'shared_cache')

        def trips(scrape, kind):
            return scrape.get('relstorage_round_trips_total',
                              storage=reader_name, kind=kind)

        # Each load from the database is a round trip of its kind, which
        # the storage tells as the scrape does.
        assert trips(cold, 'load') - trips(first, 'load') >= 3
        assert trips(cold, 'load') == \
            reader.storage.traffic()['load']['round_trips']
        assert trips(cold, 'store') == trips(cold, 'commit') == 0
        assert cold.get('relstorage_cache_entries', storage=reader_name) == 4
        assert cold.get('relstorage_cache_bytes', storage=reader_name) > \
            4 * ENTRY_OVERHEAD
        b = a['b']
        c = b['c']
        for obj in (a, b, c):
            obj._p_deactivate()
        assert a['b']['c']['n'] == 0  # warm: each from the shared cache
        warm = Scrape(endpoint)
        assert loads(warm, 'shared_cache') - loads(cold, 'shared_cache') == 3
        assert loads(warm, 'database') == loads(cold, 'database')
        assert trips(warm, 'load') == trips(cold, 'load')
        tm.abort()

        # Another storage commits a change of c: the reader's next poll
        # invalidates that one object, which is then read again.
        with writer.transaction() as w:
            w.root()['a']['b']['c']['n'] = 1
        tm.begin()
        polled = Scrape(endpoint)
        assert polled.get('relstorage_poll_invalidations_sum',
                          storage=reader_name) - warm.get(
            'relstorage_poll_invalidations_sum', storage=reader_name) == 1
        assert polled.get('relstorage_poll_seconds_count',
                          storage=reader_name) > warm.get(
            'relstorage_poll_seconds_count', storage=reader_name)
        assert c['n'] == 1
        again = Scrape(endpoint)
        assert loads(again, 'database') - loads(polled, 'database') == 1
        assert loads(again, 'shared_cache') == loads(polled, 'shared_cache')
        tm.abort()

        if factory.db != 'sqlite':
            # The reader's connection is killed between transactions: the
            # next poll reopens it.
            _kill(factory.db, _backend_id(conn._storage._view.load.session))
            tm.begin()
            assert c['n'] == 1
            tm.abort()
            assert Scrape(endpoint).get('relstorage_reconnects_total',
                                        storage=reader_name) == 1
        conn.close()

        # g becomes garbage; a pack removes it (and, with history, the
        # old revisions of root and c).
        with writer.transaction() as w:
            del w.root()['g']
        time.sleep(0.05)
        result = writer.storage.pack_with_result(time.time(), referencesf)
        packed = Scrape(endpoint)
    finally:
        reader.close()
        writer.close()
    assert result['objects_removed'] == 1
    assert packed.get('relstorage_pack_examined_objects_total',
                      storage=writer_name) == 5  # root, a, b, c, g
    assert packed.get('relstorage_pack_removed_objects_total',
                      storage=writer_name) == 1
    assert packed.get('relstorage_pack_removed_revisions_total',
                      storage=writer_name) == result['revisions_removed']
    if factory.keep_history:
        # g, and the earlier revisions of root (2) and c (1).
        assert result['revisions_removed'] == 4
    assert packed.get('relstorage_pack_seconds_count',
                      storage=writer_name) == 1
    assert packed.get('relstorage_pack_remaining_objects',
                      storage=writer_name) == 0
    assert packed.get('relstorage_commits_total', storage=writer_name) == 4
    # The pack's work, and the writer's commits, each of its kind.
    for kind in ('pack', 'store', 'commit'):
        trips = packed.get('relstorage_round_trips_total',
                           storage=writer_name, kind=kind)
        assert trips >= 1, kind
        assert packed.get('relstorage_statements_total',
                          storage=writer_name, kind=kind) >= trips
    assert packed.get('relstorage_commits_total', storage=reader_name) == 0


def sqlite_db(**options):
    factory = DatabaseFactory('sqlite', True)
    return factory, ZODB.DB(factory.storage(**options))


def test_shared_cache_evictions_and_blob_cache_bytes(endpoint, tmp_path):
    name = unique('caches')
    factory, db = sqlite_db(metrics=True, name=name, cache_local_mb=0.005,
                            blob_dir=str(tmp_path / 'blobs'))
    try:
        with db.transaction() as conn:
            root = conn.root()
            for i in range(20):
                root['o%d' % i] = PersistentMapping(data='x' * 400)
            root['blob'] = Blob(b'b' * 1000)
        scrape = Scrape(endpoint)
    finally:
        db.close()
        factory.cleanup()
    entries = scrape.get('relstorage_cache_entries', storage=name)
    # The commit offered the cache the root, 20 mappings and the blob's
    # object: 22 distinct objects, of which it keeps what fits in 5000
    # bytes and evicts the rest.
    assert 0 < entries < 22
    assert scrape.get('relstorage_cache_evictions_total', storage=name) \
        == 22 - entries
    assert scrape.get('relstorage_cache_bytes', storage=name) <= 5000
    assert scrape.get('relstorage_cache_limit_bytes', storage=name) == 5000
    # The committed blob's file is in the blob cache.
    assert scrape.get('relstorage_blob_cache_bytes', storage=name) == 1000


OFF = """
import sys, tempfile, transaction, ZODB
from relstorage.adapters.sqlite import SQLiteAdapter
from relstorage.options import Options
from relstorage.storage import RelStorage
db = ZODB.DB(RelStorage(SQLiteAdapter(tempfile.mkdtemp(),
                                      options=Options(name='off'))))
with db.transaction() as conn:
    conn.root()['x'] = 1
with db.transaction() as conn:
    assert conn.root()['x'] == 1
db.close()
print(sorted(m for m in sys.modules
             if m.startswith(('prometheus_client', 'relstorage.metrics.'))))
"""


def test_metrics_false_imports_and_registers_nothing(endpoint):
    # A fresh process: prometheus_client is not even imported.
    done = subprocess.run([sys.executable, '-c', OFF], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[]'
    # Here, where other storages record: none of this one's series.
    name = unique('off')
    factory, db = sqlite_db(name=name)
    try:
        with db.transaction() as conn:
            conn.root()['x'] = 1
        assert db.storage._metrics.enabled is False
        assert Scrape(endpoint).names(name) == set()
    finally:
        db.close()
        factory.cleanup()


def test_multiprocess_workers_add_up_in_relstorage_metrics(tmp_path):
    """Two worker processes write to one PROMETHEUS_MULTIPROC_DIR; one
    scrape of relstorage-metrics, run with the same directory, serves
    their sum (and the database's own figures)."""
    name = unique('workers')
    data = tmp_path / 'data'
    data.mkdir()
    factory = DatabaseFactory.in_child('sqlite', True, str(data))
    db = ZODB.DB(factory.storage())
    with db.transaction() as conn:
        conn.root()['w0'] = PersistentMapping()
        conn.root()['w1'] = PersistentMapping()
    db.close()
    multiproc = tmp_path / 'multiproc'
    multiproc.mkdir()
    env = child_env()
    env['PROMETHEUS_MULTIPROC_DIR'] = str(multiproc)
    workers = [subprocess.Popen(
        [sys.executable, '-m', 'relstorage.tests.metrics_worker', str(data),
         name, 'w%d' % i, str(3 + i)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    loads = {}
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        for source, count in json.loads(out).items():
            loads[source] = loads.get(source, 0) + count
        # What a server's child-exit hook does (gunicorn's child_exit).
        mark_process_dead(worker.pid, str(multiproc))
    # What a worker killed while prometheus_client made its first file
    # leaves: the file, of no bytes (it would fail every scrape).
    (multiproc / 'counter_999999999.db').touch()
    config = tmp_path / 'site.conf'
    config.write_text('%%import relstorage\n<relstorage %s>\n  <sqlite3>\n'
                      '    data-dir %s\n  </sqlite3>\n</relstorage>\n'
                      % (name, data))
    server = subprocess.Popen(
        [sys.executable, '-m', 'relstorage.metricsserver', '--port', '0',
         '--interval', '0.2', str(config)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in server.stdout:
            if line.startswith('serving '):
                url = line.split()[1]
                break
        assert url, server.stderr.read()
        scrape = Scrape(url)
    finally:
        server.terminate()
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, err
    assert scrape.get('relstorage_commits_total', storage=name) == 3 + 4
    assert scrape.get('relstorage_commit_seconds_count', storage=name,
                      phase='vote') == 7
    for source, count in loads.items():
        assert scrape.get('relstorage_loads_total', storage=name,
                          source=source) == count
    assert loads['database'] > 0
    assert scrape.get('relstorage_database_objects', storage=name) == 3
    # Root, its two children, then the workers' 7 commits.
    assert scrape.get('relstorage_database_transactions', storage=name) == 9


def test_relstorage_metrics_polls_and_sees_other_commits(tmp_path):
    """relstorage-metrics alone (no multiprocess directory): its instance
    polls every --interval seconds and counts the objects another
    process's commit changed."""
    name = unique('watched')
    data = tmp_path / 'data'
    data.mkdir()
    factory = DatabaseFactory.in_child('sqlite', True, str(data))
    db = ZODB.DB(factory.storage())
    with db.transaction() as conn:
        conn.root()['x'] = PersistentMapping()
        conn.root()['y'] = PersistentMapping()
    config = tmp_path / 'site.conf'
    config.write_text('%%import relstorage\n<relstorage %s>\n  <sqlite3>\n'
                      '    data-dir %s\n  </sqlite3>\n</relstorage>\n'
                      % (name, data))
    env = child_env()
    env.pop('PROMETHEUS_MULTIPROC_DIR', None)
    server = subprocess.Popen(
        [sys.executable, '-m', 'relstorage.metricsserver', '--port', '0',
         '--interval', '0.1', str(config)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    invalidations = 'relstorage_poll_invalidations_sum'
    try:
        line = server.stdout.readline()
        while line and not line.startswith('serving '):
            line = server.stdout.readline()
        assert line, server.stderr.read()
        url = line.split()[1]
        before = Scrape(url)
        assert before.get(invalidations, storage=name) == 0
        assert before.get('relstorage_database_objects', storage=name) == 3
        with db.transaction() as conn:
            conn.root()['x']['v'] = 1
            conn.root()['y']['v'] = 1
        deadline = time.monotonic() + 30
        while Scrape(url).get(invalidations, storage=name) < 2:
            assert time.monotonic() < deadline, 'no poll saw the commit'
            time.sleep(0.1)
        assert Scrape(url).get(invalidations, storage=name) == 2
    finally:
        db.close()
        server.terminate()
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, err


def test_the_commit_lock_wait_is_observed_not_patched(endpoint):
    """The recorder registers an observer with the adapter's locker; the
    locker's methods stay its own."""
    name = unique('observer')
    factory, db = sqlite_db(metrics=True, name=name)
    try:
        locker = db.storage.adapter.locker
        assert 'hold_commit_lock' not in vars(locker)
        assert len(locker.commit_lock_observers) == 1
        counted = 'relstorage_commit_lock_wait_seconds_count'
        before = Scrape(endpoint).get(counted, storage=name)
        with db.transaction() as conn:
            conn.root()['a'] = 1
        assert Scrape(endpoint).get(counted, storage=name) == before + 1
    finally:
        db.close()
