"""The metrics of storages opened with ``metrics true``.

Two kinds of values:

* Events (commits, conflicts, polls, packs) are recorded as they happen
  in prometheus_client's Counter and Histogram objects. They are rare next
  to loads (a commit or a poll costs a database round trip), so the
  microsecond these objects take is lost in the noise.
* Counts kept anyway in plain integers (the shared cache's hits, misses
  and evictions, the adapter's reconnects) and levels (cache bytes and
  entries, the blob cache's size) are read when they are wanted: by a
  collector in the default registry, at each scrape, so that a load
  served by the shared cache costs nothing more with metrics on.

prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set
before it is imported) cannot call collectors in the worker processes:
there the counts and levels are copied into Counter and Gauge objects of
the same names, whose values go to the shared directory, at most once a
second when an instance polls, and when a storage closes.

Storages of one process that share a name share their series: counts of
closed storages are kept, so that counters never go back.
"""
import glob
import logging
import os
import threading
import time
import weakref

from prometheus_client import REGISTRY
from prometheus_client import Counter
from prometheus_client import Gauge
from prometheus_client import Histogram
from prometheus_client import values
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector as _Files
from ZODB.POSException import ReadConflictError
from ZODB.utils import u64

from ..blobs.cached import DatabaseBlobs
from ..blobs.cachesize import cache_files
from ..pickledclasses import class_name

log = logging.getLogger(__name__)

#: Whether prometheus_client writes to a multiprocess directory (it
#: decides when it is imported, from PROMETHEUS_MULTIPROC_DIR). That
#: variable stays: it is prometheus_client's own convention, which every
#: process sharing the directory must follow; relstorage reads it nowhere.
MULTIPROCESS = values.ValueClass is not values.MutexValue

LABEL = 'storage'
PHASES = ('lock_wait', 'vote', 'finish')
SOURCES = ('instance', 'shared_cache', 'database')
#: Distinct classes a process names in the conflicts' ``class`` label;
#: later ones are counted as OTHER (and named in the debug log).
MAX_CLASSES = 20
OTHER = 'other'
UNKNOWN = 'unknown'
#: Seconds between two walks of a blob cache directory for its size.
BLOB_SCAN_SECONDS = 60.0
#: Multiprocess mode: seconds between two copies of the counts and
#: levels into the directory.
FLUSH_SECONDS = 1.0

SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
OBJECTS_BUCKETS = (0, 1, 10, 100, 1000, 10000, 100000)
PACK_BUCKETS = (1, 10, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600)

# -- events: recorded as they happen ------------------------------------

COMMITS = Counter(
    'relstorage_commits_total', 'Transactions committed.', [LABEL])
COMMIT_SECONDS = Histogram(
    'relstorage_commit_seconds',
    'Seconds each commit spent per phase: lock_wait (the rows locked at '
    'vote, on SQLite the single writer\'s turn, and the commit lock), '
    'vote (the rest of tpc_vote: conflicts, upload) and finish (the rest '
    'of tpc_finish: the tid, the rows made current, COMMIT).',
    [LABEL, 'phase'], buckets=SECONDS_BUCKETS)
COMMIT_LOCK_SECONDS = Histogram(
    'relstorage_commit_lock_wait_seconds',
    'Seconds a commit waited for the global commit lock (SQLite: see '
    'the lock_wait phase).', [LABEL], buckets=SECONDS_BUCKETS)
CONFLICTS = Counter(
    'relstorage_conflicts_total',
    'Conflicts by kind (write, read), outcome (resolved, raised) and the '
    'class of the object (the first %d classes of a process; then %s).'
    % (MAX_CLASSES, OTHER), [LABEL, 'kind', 'outcome', 'class'])
POLL_SECONDS = Histogram(
    'relstorage_poll_seconds',
    'Seconds a poll for other processes\' commits took.', [LABEL],
    buckets=SECONDS_BUCKETS)
POLL_INVALIDATIONS = Histogram(
    'relstorage_poll_invalidations',
    'Objects a poll invalidated (changed by others since the last poll).',
    [LABEL], buckets=OBJECTS_BUCKETS)
FULL_INVALIDATIONS = Counter(
    'relstorage_poll_full_invalidations_total',
    'Polls that could not tell what changed (after a lost connection): '
    'ZODB invalidated every object.', [LABEL])
PACK_EXAMINED = Counter(
    'relstorage_pack_examined_objects_total',
    'Objects whose references a pre-pack read.', [LABEL])
PACK_REMOVED = Counter(
    'relstorage_pack_removed_objects_total',
    'Unreachable (or deleted) objects a pack removed.', [LABEL])
PACK_REVISIONS = Counter(
    'relstorage_pack_removed_revisions_total',
    'Revisions a pack removed (old ones and those of removed objects).',
    [LABEL])
PACK_REMAINING = Gauge(
    'relstorage_pack_remaining_objects',
    'Objects the running pack has still to handle (0 when none runs).',
    [LABEL], multiprocess_mode='livesum')
PACK_SECONDS = Histogram(
    'relstorage_pack_seconds', 'Seconds each pack took.', [LABEL],
    buckets=PACK_BUCKETS)

# -- counts and levels: read when wanted --------------------------------

#: Counters read from plain integers: name -> (help, label or None).
COUNTED = {
    'relstorage_loads': (
        'Object states read (load, loadSerial, loadBefore) by where they '
        'came from: instance (the states a history-free instance keeps for '
        'conflict resolution), shared_cache (the process-wide cache) or '
        'database.', 'source'),
    'relstorage_cache_evictions': (
        'Entries the shared cache dropped to stay under cache-local-mb.',
        None),
    'relstorage_reconnects': (
        'Database connections reopened after one was lost.', None),
    'relstorage_round_trips': (
        'Messages sent to the database and answered, by the kind of work '
        'they were sent for: load (states, history, iteration), poll, '
        'store (the vote: row locks, conflicts, the upload), commit (the '
        'tid, the rows made current, COMMIT), pack, other (the schema, '
        'oids, tools).', 'kind'),
    'relstorage_statements': (
        'SQL statements sent to the database (a round trip may carry '
        'several), by kind of work as relstorage_round_trips.', 'kind'),
}
#: Gauges: name -> (help, how processes add up in multiprocess mode).
LEVELS = {
    'relstorage_cache_bytes': (
        'Bytes the shared cache holds (states and their overhead).',
        'livesum'),
    'relstorage_cache_entries': ('Objects the shared cache holds.',
                                 'livesum'),
    'relstorage_cache_limit_bytes': ('cache-local-mb, in bytes.',
                                     'livesum'),
    'relstorage_blob_cache_bytes': (
        'Bytes of blob files in the blob cache directory (read at most '
        'once a minute).', 'livemax'),
}

_local = threading.local()
_lock = threading.Lock()
#: name -> _Named
_names = {}
#: Class names given their own conflict label in this process.
_classes = set()


class _Named:
    """What one storage name counts in this process: its open storages'
    recorders and the counts of those closed."""

    def __init__(self):
        self.live = weakref.WeakSet()
        self.retired = {}


def _add(into, counts):
    for key, value in counts.items():
        into[key] = into.get(key, 0) + value


def totals():
    """``{name: (counts, levels)}`` of this process's storages, counts
    keyed ``(metric, label value or None)``, levels by metric (levels
    only for names with an open storage)."""
    with _lock:
        named = [(name, n, dict(n.retired), list(n.live))
                 for name, n in _names.items()]
    result = {}
    for name, _, counts, live in named:
        levels = {}
        for recorder in live:
            _add(counts, recorder.counts())
            for key, value in recorder.levels().items():
                if key == 'relstorage_blob_cache_bytes':
                    # Storages of one name share one directory.
                    levels[key] = max(levels.get(key, 0), value)
                else:
                    levels[key] = levels.get(key, 0) + value
        result[name] = (counts, levels)
    return result


class _Collector:
    """The counts and levels of every storage, read at each scrape."""

    def describe(self):
        return list(self._families().values())

    def collect(self):
        families = self._families()
        for name, (counts, levels) in sorted(totals().items()):
            for (metric, label), value in counts.items():
                families[metric].add_metric(
                    [name] if label is None else [name, label], value)
            for metric, value in levels.items():
                families[metric].add_metric([name], value)
        return list(families.values())

    @staticmethod
    def _families():
        families = {}
        for metric, (doc, label) in COUNTED.items():
            families[metric] = CounterMetricFamily(
                metric, doc, labels=[LABEL] + ([label] if label else []))
        for metric, (doc, _) in LEVELS.items():
            families[metric] = GaugeMetricFamily(metric, doc,
                                                 labels=[LABEL])
        return families


class _Flusher:
    """Multiprocess mode: copies the counts and levels into Counter and
    Gauge objects, whose values prometheus_client keeps in the directory
    (counters by the increase since the last copy)."""

    def __init__(self):
        self.counters = {
            metric: Counter(metric + '_total', doc,
                            [LABEL] + ([label] if label else []))
            for metric, (doc, label) in COUNTED.items()}
        self.gauges = {
            metric: Gauge(metric, doc, [LABEL], multiprocess_mode=mode)
            for metric, (doc, mode) in LEVELS.items()}
        self.copied = {}
        self.last = 0.0
        self.lock = threading.Lock()

    def maybe(self):
        if time.monotonic() - self.last >= FLUSH_SECONDS:
            self.flush(wait=False)

    def flush(self, wait=True):
        if not self.lock.acquire(blocking=wait):
            return  # another thread is copying right now
        try:
            self.last = time.monotonic()
            for name, (counts, levels) in totals().items():
                for (metric, label), value in counts.items():
                    key = (name, metric, label)
                    increase = value - self.copied.get(key, 0)
                    labels = (name,) if label is None else (name, label)
                    # The series exists from the start, at 0.
                    child = self.counters[metric].labels(*labels)
                    if increase > 0:
                        child.inc(increase)
                        self.copied[key] = value
                for metric in LEVELS:
                    self.gauges[metric].labels(name).set(
                        levels.get(metric, 0))
        finally:
            self.lock.release()


if MULTIPROCESS:
    _flusher = _Flusher()
else:
    _flusher = None
    REGISTRY.register(_Collector())


def flush():
    """Multiprocess mode: copy the counts and levels into the directory
    now (a no-op otherwise)."""
    if _flusher is not None:
        _flusher.flush()


class MultiProcessCollector(_Files):
    """prometheus_client's MultiProcessCollector (what a multiprocess
    directory holds, added up), but for the files of no bytes: one being
    created at that moment (prometheus_client makes it before it sizes
    it) or left so by a worker killed at that moment. As read they
    would fail the whole scrape, every later one too for a file left;
    they hold nothing yet, so they are passed over."""

    def collect(self):
        files = []
        for path in glob.glob(os.path.join(self._path, '*.db')):
            try:
                if os.path.getsize(path) >= _HEADER_BYTES:
                    files.append(path)
            except OSError:
                pass  # (removed meanwhile: nothing of it to add)
        return self.merge(files, accumulate=True)


#: The bytes at the head of a multiprocess file (how much of it is used,
#: and padding) that it has once prometheus_client sized it.
_HEADER_BYTES = 8


def _class_label(name):
    if not name:
        return UNKNOWN
    with _lock:
        if name in _classes:
            return name
        if len(_classes) < MAX_CLASSES:
            _classes.add(name)
            return name
    return OTHER


def _class_of(state):
    """The class a stored state names, or None."""
    if not state:
        return None
    try:
        return class_name(state)
    except ValueError:
        return None


class CommitTiming:
    """The phases of one commit. Lock waits are taken out of the phase
    they happened in: the row locks at vote (timed by the vote) and the
    commit lock (timed by the observer Recorder registers with the locker,
    which finds the timing of its thread's phase)."""

    __slots__ = ('recorder', 'lock', 'vote', 'started', 'lock_before',
                 'lock_started')

    def __init__(self, recorder):
        self.recorder = recorder
        self.lock = self.vote = 0.0

    def _begin(self):
        _local.timing = self
        self.lock_before = self.lock
        self.started = time.perf_counter()

    def _end(self):
        _local.timing = None
        return (time.perf_counter() - self.started
                - (self.lock - self.lock_before))

    vote_begins = finish_begins = _begin

    def vote_ends(self):
        self.vote = self._end()

    def finish_ends(self):
        self.recorder.committed(self.lock, self.vote, self._end())

    def lock_begins(self):
        self.lock_started = time.perf_counter()

    def lock_ends(self):
        self.lock += time.perf_counter() - self.lock_started


class Recorder:
    """The metrics of one root storage and its instances."""

    enabled = True
    clock = staticmethod(time.perf_counter)

    def __init__(self, name, cache, adapter, blobs):
        self.name = name
        self._cache = cache
        self.adapter = adapter
        self._blob_dir = (blobs.blob_dir if isinstance(blobs, DatabaseBlobs)
                          else None)
        self._blob_bytes = 0
        self._blob_read = None
        self._loads = dict.fromkeys(SOURCES, 0)
        self._loads_lock = threading.Lock()
        self._commits = COMMITS.labels(name)
        self._phases = [COMMIT_SECONDS.labels(name, phase)
                        for phase in PHASES]
        self._commit_lock = COMMIT_LOCK_SECONDS.labels(name)
        self._poll_seconds = POLL_SECONDS.labels(name)
        self._poll_invalidations = POLL_INVALIDATIONS.labels(name)
        self._full_invalidations = FULL_INVALIDATIONS.labels(name)
        self._pack_examined = PACK_EXAMINED.labels(name)
        self._pack_removed = PACK_REMOVED.labels(name)
        self._pack_revisions = PACK_REVISIONS.labels(name)
        self._pack_remaining = PACK_REMAINING.labels(name)
        self._pack_seconds = PACK_SECONDS.labels(name)
        self._time_commit_lock(adapter.locker)
        with _lock:
            _names.setdefault(name, _Named()).live.add(self)
        self._closed = False

    def _time_commit_lock(self, locker):
        """Time the locker's waits for the commit lock (this storage's
        adapter has a locker of its own)."""
        observe = self._commit_lock.observe

        def waited_for_commit_lock(waited):
            observe(waited)
            timing = getattr(_local, 'timing', None)
            if timing is not None:
                timing.lock += waited
        locker.watch_commit_lock(waited_for_commit_lock)

    # Values read when wanted

    def counts(self):
        stats = self._cache.stats()
        with self._loads_lock:
            loads = dict(self._loads)
        found = {
            ('relstorage_loads', 'instance'): loads['instance'],
            ('relstorage_loads', 'shared_cache'):
                stats['hits'] + loads['shared_cache'],
            ('relstorage_loads', 'database'):
                stats['misses'] + loads['database'],
            ('relstorage_cache_evictions', None): stats['evictions'],
            ('relstorage_reconnects', None): self.adapter.reconnects,
        }
        for kind, (trips, statements) in self.adapter.traffic.totals().items():
            found[('relstorage_round_trips', kind)] = trips
            found[('relstorage_statements', kind)] = statements
        return found

    def levels(self):
        stats = self._cache.stats()
        found = {'relstorage_cache_bytes': stats['bytes'],
                 'relstorage_cache_entries': stats['entries'],
                 'relstorage_cache_limit_bytes': stats['limit_bytes']}
        if self._blob_dir is not None:
            found['relstorage_blob_cache_bytes'] = self._blob_cache_bytes()
        return found

    def _blob_cache_bytes(self):
        now = time.monotonic()
        if self._blob_read is None or now - self._blob_read >= \
                BLOB_SCAN_SECONDS:
            self._blob_bytes = sum(size for _, size, _ in
                                   cache_files(self._blob_dir))
            self._blob_read = now
        return self._blob_bytes

    # Events

    def commit_timing(self):
        return CommitTiming(self)

    def committed(self, lock, vote, finish):
        self._commits.inc()
        for histogram, seconds in zip(self._phases, (lock, vote, finish)):
            histogram.observe(max(seconds, 0.0))

    def _conflict(self, kind, outcome, oid, cls):
        CONFLICTS.labels(self.name, kind, outcome, _class_label(cls)).inc()
        log.debug('%s: %s conflict %s on object 0x%x (%s)', self.name, kind,
                  outcome, u64(oid) if oid else 0, cls or UNKNOWN)

    def conflict_resolved(self, oid, state):
        self._conflict('write', 'resolved', oid, _class_of(state))

    def conflict_raised(self, error, tpc):
        """*error* raised at the vote of *tpc* (whose stored state names
        the class when the error does not)."""
        kind = 'read' if isinstance(error, ReadConflictError) else 'write'
        cls = error.class_name
        if not cls and error.oid:
            cls = _class_of(tpc.stores.get(u64(error.oid), (0, None))[1])
        self._conflict(kind, 'raised', error.oid, cls)

    def read_conflict(self, error):
        self._conflict('read', 'raised', error.oid, error.class_name)

    def polled(self, started, oids):
        self._poll_seconds.observe(time.perf_counter() - started)
        if oids is None:
            self._full_invalidations.inc()
        else:
            self._poll_invalidations.observe(len(oids))
        if _flusher is not None:
            _flusher.maybe()

    def loaded(self, source):
        with self._loads_lock:
            self._loads[source] += 1

    def pack_examined(self, count):
        self._pack_examined.inc(count)

    def pack_progress(self, objects, revisions, remaining):
        self._pack_removed.inc(objects)
        self._pack_revisions.inc(revisions)
        self._pack_remaining.set(remaining)

    def pack_ended(self, seconds):
        self._pack_remaining.set(0)
        if seconds is not None:
            self._pack_seconds.observe(seconds)

    def close(self):
        """The storage closed: keep its counts under its name."""
        if self._closed:
            return
        self._closed = True
        counts = self.counts()
        with _lock:
            named = _names[self.name]
            named.live.discard(self)
            _add(named.retired, counts)
        flush()
