"""Tests of the process-wide pickle cache (relstorage.cache).

The cache must never hand an instance a state other than the one current
at that instance's view.  Besides hand-written scenarios, a reference
"database" (the true history of every object) drives randomized runs, with
fixed seeds, in which every hit is checked against that history, and a
threaded run does the same with real concurrency.  A few tests break the
cache on purpose to show that the randomized checker notices.
"""
import gc
import random
import sys
import threading

import pytest

from relstorage.cache import StorageCache
from relstorage.cache import index as index_module
from relstorage.cache import storage_cache as storage_cache_module
from relstorage.cache.index import ChangeIndex
from relstorage.cache.index import _insert_pair
from relstorage.cache.index import is_current
from relstorage.cache.lru import ENTRY_OVERHEAD
from relstorage.cache.lru import ByteLRU
from relstorage.cache.lru import entry_size


def state(oid, tid, pad=0):
    return b'oid %d at %d;' % (oid, tid) + b'.' * pad


# -- the reference database ------------------------------------------------

class History:
    """The true history of a database: {oid: [(tid, state or None)]}.

    ``state`` None is a deletion.  Thread-safe; ``last`` is published only
    after a commit's revisions are in place, so any view up to ``last`` is
    a stable snapshot.
    """

    def __init__(self, noids=0):
        self.revs = {oid: [] for oid in range(noids)}
        self.log = []        # [(tid, [oids])], tid ascending
        self.last = 0
        self.lock = threading.Lock()

    def commit(self, pads, step=1):
        """Commit {oid: padding, or None to delete}; return the tid and
        {oid: state}.  Every state names its object and tid."""
        with self.lock:
            tid = self.last + step
            writes = {oid: None if pad is None else state(oid, tid, pad)
                      for oid, pad in pads.items()}
            for oid, data in writes.items():
                self.revs.setdefault(oid, []).append((tid, data))
            self.log.append((tid, sorted(writes)))
            self.last = tid
            return tid, writes

    def load(self, oid, view):
        """(state, tid) current at view, or None if absent or deleted."""
        with self.lock:
            for tid, data in reversed(self.revs.get(oid, ())):
                if tid <= view:
                    return None if data is None else (data, tid)
            return None

    def changes(self, after, upto, every_revision=False):
        """(oid, tid) pairs for (after, upto]: the newest per object, as a
        poll reports them, or every revision."""
        with self.lock:
            pairs = [(oid, tid) for tid, oids in self.log
                     if after < tid <= upto for oid in oids]
        if every_revision:
            return pairs
        return list(dict(pairs).items())

    def changed_oids(self, after, upto):
        return {oid for oid, _ in self.changes(after, upto)}


def check_all_views(cache, db, oids, violations, views=None):
    """Ask the cache for every oid at many views it claims to cover;
    every hit must be the true state."""
    p0, cmax = cache.p0, cache.cmax
    if p0 is None:
        return
    if views is None:
        views = range(p0, cmax + 1)
    for view in views:
        if not p0 <= view <= cmax:
            continue
        for oid in oids:
            got = cache.get(oid, view)
            if got is not None:
                want = db.load(oid, view)
                if got != want:
                    violations.append(('sweep', oid, view, got, want))


def check_accounting(cache):
    lru = cache._lru
    assert lru.nbytes == sum(entry_size(v) for v in lru.data.values())
    assert lru.nbytes <= cache.limit_bytes
    for oid, (data, tid) in lru.data.items():
        assert len(data) <= cache.object_max_bytes


# -- the randomized model test ---------------------------------------------

def run_model(seed, steps=5000, ninstances=4, noids=40, limit_bytes=6000,
              delta_limit=12, use_fetch=True, every_revision=False,
              object_max=400, sweep_every=97):
    """Drive one cache with random operations of several instances against
    a History, checking every hit.  Returns (violations, stats)."""
    rng = random.Random(seed)
    db = History(noids)
    db.commit({oid: rng.randrange(50) for oid in range(noids)})
    fetch = (lambda lo, hi: db.changes(lo, hi)) if use_fetch else None
    cache = StorageCache(limit_bytes, object_max_bytes=object_max,
                         delta_limit=delta_limit, fetch_changes=fetch)
    views = [None] * ninstances
    delayed_loads = []        # loads made earlier, stored later
    delayed_commits = []      # commits reported to the cache later
    violations = []
    hot = list(range(noids // 4))

    def pick_oid():
        if rng.random() < 0.6:
            return rng.choice(hot)
        return rng.randrange(noids)

    for step in range(steps):
        r = rng.random()
        i = rng.randrange(ninstances)
        view = views[i]
        if r < 0.12:
            # Commit: by an instance of this process (reported with
            # store_committed, now or later) or by another process.
            pads = {pick_oid(): (None if rng.random() < 0.05 else
                                 rng.choice((0, 10, 100, 300, 500)))
                    for _ in range(rng.randint(1, 4))}
            tid, writes = db.commit(pads, step=rng.randint(1, 3))
            local = rng.random()
            if local < 0.5:
                for oid, data in writes.items():
                    cache.store_committed(oid, tid, data)
            elif local < 0.7:
                delayed_commits.append((tid, writes))
        elif r < 0.30:
            # Poll, to the newest tid or (a concurrent commit's view) to
            # something in between.
            last = db.last
            lo = 0 if view is None else view
            target = last if rng.random() < 0.6 else rng.randint(lo, last)
            if view is not None and rng.random() < 0.4:
                answer = cache.changes_between(view, target)
                if answer is not None:
                    truth = db.changed_oids(view, target)
                    if not truth <= answer:
                        violations.append(
                            ('changes_between', view, target,
                             truth - answer))
                    views[i] = target
                    continue
            if view is None or rng.random() < 0.1:
                cache.after_poll(None, target)
            else:
                cache.after_poll(view, target,
                                 db.changes(view, target, every_revision),
                                 complete=every_revision)
            views[i] = target
        elif r < 0.33:
            if delayed_commits:
                tid, writes = delayed_commits.pop(
                    rng.randrange(len(delayed_commits)))
                for oid, data in writes.items():
                    cache.store_committed(oid, tid, data)
        elif r < 0.36:
            if delayed_loads:
                args = delayed_loads.pop(rng.randrange(len(delayed_loads)))
                if rng.random() < 0.5:
                    cache.store(*args)
                else:
                    # With every other load made at the same view (one
                    # per oid), in one call, as read-ahead offers them.
                    at = args[3]
                    batch = {args[0]: (args[2], args[1])}
                    rest = []
                    for other in delayed_loads:
                        if other[3] == at and other[0] not in batch:
                            batch[other[0]] = (other[2], other[1])
                        else:
                            rest.append(other)
                    delayed_loads[:] = rest
                    cache.store_many(batch, at)
        elif r < 0.365:
            cache.clear()
        elif r < 0.375:
            cache.invalidate([pick_oid() for _ in range(3)])
        else:
            if view is None:
                continue
            oid = pick_oid()
            got = cache.get(oid, view)
            want = db.load(oid, view)
            if got is not None:
                if got != want:
                    violations.append(('get', oid, view, got, want))
            elif want is not None:
                data, tid = want
                if rng.random() < 0.15:
                    delayed_loads.append((oid, tid, data, view))
                else:
                    cache.store(oid, tid, data, view)
        if step % sweep_every == 0:
            check_all_views(cache, db, range(noids), violations)
            check_accounting(cache)
    check_all_views(cache, db, range(noids), violations)
    check_accounting(cache)
    return violations, cache.stats()


MODEL_CASES = [
    # (use_fetch, every_revision, limit_bytes, delta_limit)
    (True, False, 6000, 12),
    (False, False, 6000, 12),
    (True, True, 6000, 12),
    (True, False, 100000, 1000),
    (False, True, 2500, 5),
    (True, False, 6000, 0),
]


def _counting_merges(monkeypatch, merge=None):
    """Records of at most two pairs (so that the models merge often),
    merged by *merge* (the real one by default); the list of records
    merged."""
    merged = []
    real = merge or index_module._merged

    def counting(rec):
        merged.append(rec)
        return real(rec)
    monkeypatch.setattr(index_module, 'MAX_PAIRS', 2)
    monkeypatch.setattr(index_module, '_merged', counting)
    return merged


@pytest.mark.parametrize('merging', [False, True],
                         ids=['records-whole', 'records-merged'])
@pytest.mark.parametrize('seed', range(8))
@pytest.mark.parametrize('use_fetch,every_revision,limit_bytes,delta_limit',
                         MODEL_CASES)
def test_model_never_serves_stale(monkeypatch, merging, seed, use_fetch,
                                  every_revision, limit_bytes, delta_limit):
    merged = _counting_merges(monkeypatch) if merging else None
    violations, stats = run_model(seed, use_fetch=use_fetch,
                                  every_revision=every_revision,
                                  limit_bytes=limit_bytes,
                                  delta_limit=delta_limit)
    assert violations == []
    # The run must exercise the cache, not pass by always missing.
    assert stats['hits'] > (100 if merging else 200), stats
    assert stats['stores'] > 50, stats
    if merging and delta_limit > 5:
        assert len(merged) > 20


def test_checker_catches_a_merge_that_keeps_a_narrow_window(monkeypatch):
    """Merging the oldest pairs into the newest of them without widening
    its window would tell a view among them "no change"."""
    def narrow(rec):
        cut = len(rec) - 2 * (index_module.MAX_PAIRS - 1)
        return rec[cut - 2:]
    merged = _counting_merges(monkeypatch, narrow)
    assert _model_finds_violations(every_revision=True) > 0
    assert merged


def test_model_exercises_every_mechanism():
    totals = {}
    for seed in range(4):
        for use_fetch in (True, False):
            _, stats = run_model(seed, use_fetch=use_fetch)
            for key, value in stats.items():
                if isinstance(value, int):
                    totals[key] = totals.get(key, 0) + value
    for key in ('hits', 'misses', 'stores', 'rejected_stores', 'evictions',
                'rebases', 'resets', 'gap_fills'):
        assert totals[key] > 0, (key, totals)


# -- the checker catches broken caches ---------------------------------------

def _model_finds_violations(**kw):
    found = 0
    for seed in range(6):
        violations, _ = run_model(seed, steps=2000, **kw)
        found += len(violations)
    return found


def test_checker_catches_ignoring_windows(monkeypatch):
    """A cache that trusts newest-only poll reports as if they listed every
    revision serves states replaced inside a poll's interval."""
    def naive(rec, tid, view, p0):
        if rec is None:
            return tid <= p0
        expected = None
        for i in range(0, len(rec), 2):
            if rec[i] <= view:
                expected = rec[i]
        return tid == expected if expected is not None else tid <= p0
    monkeypatch.setattr(storage_cache_module, 'is_current', naive)
    assert _model_finds_violations(every_revision=False) > 0


def test_checker_catches_rebase_keeping_everything(monkeypatch):
    def careless_rebase(self):
        self._index.start(self._index.cmax)
        self.rebases += 1
    monkeypatch.setattr(StorageCache, '_rebase', careless_rebase)
    assert _model_finds_violations(every_revision=True) > 0


def test_checker_catches_unverified_store(monkeypatch):
    # store() is store_many() of one.
    def trusting_store_many(self, found, view_tid):
        kept = 0
        for oid, (data, tid) in dict(found).items():
            if self._index.p0 is None or len(data) > self._max_state:
                continue
            with self._lock:
                old = self._entries.get(oid)
                if old is None or old[1] < tid:
                    self._lru.put(oid, (data, tid))
                    self.stores += 1
                    kept += 1
        return kept
    monkeypatch.setattr(StorageCache, 'store_many', trusting_store_many)
    assert _model_finds_violations(every_revision=True) > 0


def test_checker_catches_gap_ignored(monkeypatch):
    """Moving cmax over a hole without learning its changes is caught."""
    def ignore_hole(self, tid):
        self._index.cmax = tid
    monkeypatch.setattr(StorageCache, '_reset', ignore_hole)
    assert _model_finds_violations(use_fetch=False) > 0


# -- threads ------------------------------------------------------------------

def run_threads(ninstances=6, iterations=6000, noids=60):
    """Several instances (threads) share one cache, committing, polling
    and loading against one History; returns (violations, hits, cache,
    db).  A short switch interval makes the threads interleave finely."""
    db = History(noids)
    db.commit({oid: 0 for oid in range(noids)})
    cache = StorageCache(8000, object_max_bytes=600, delta_limit=15,
                         fetch_changes=lambda lo, hi: db.changes(lo, hi))
    violations = []
    errors = []
    counts = {'hits': 0}
    start = threading.Barrier(ninstances + 1)

    def instance(seed):
        rng = random.Random(seed)
        view = None
        hits = 0
        try:
            start.wait()
            for _ in range(iterations):
                r = rng.random()
                if r < 0.08:
                    pads = {rng.randrange(noids): rng.choice((0, 50, 400))
                            for _ in range(rng.randint(1, 3))}
                    tid, writes = db.commit(pads)
                    for oid, data in writes.items():
                        cache.store_committed(oid, tid, data)
                elif r < 0.25 or view is None:
                    new = db.last
                    if view is not None and rng.random() < 0.5:
                        answer = cache.changes_between(view, new)
                        if answer is not None:
                            truth = db.changed_oids(view, new)
                            if not truth <= answer:
                                violations.append(('changes_between', view,
                                                   new, truth - answer))
                            view = new
                            continue
                    if view is None:
                        cache.after_poll(None, new)
                    else:
                        cache.after_poll(view, new, db.changes(view, new))
                    view = new
                elif r < 0.253:
                    cache.invalidate([rng.randrange(noids)])
                else:
                    oid = rng.randrange(noids)
                    got = cache.get(oid, view)
                    want = db.load(oid, view)
                    if got is not None:
                        hits += 1
                        if got != want:
                            violations.append(('get', oid, view, got, want))
                    elif want is not None:
                        cache.store(oid, want[1], want[0], view)
        except Exception as e:  # pragma: no cover - reported by the caller
            errors.append(e)
        finally:
            with db.lock:
                counts['hits'] += hits

    def clearer():
        rng = random.Random(99)
        start.wait()
        for _ in range(20):
            threading.Event().wait(0.002)
            if rng.random() < 0.3:
                cache.clear()

    threads = [threading.Thread(target=instance, args=(seed,))
               for seed in range(ninstances)]
    threads.append(threading.Thread(target=clearer))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    return violations, counts['hits'], cache, db


def test_threads_never_see_stale_states():
    violations, hits, cache, db = run_threads()
    assert violations == []
    assert hits > 100
    check_accounting(cache)
    sweep = []
    check_all_views(cache, db, range(60), sweep)
    assert sweep == []


# -- scenarios ------------------------------------------------------------------

@pytest.fixture
def cache():
    return StorageCache(100_000)


def test_uninitialised_cache_misses_and_refuses(cache):
    assert cache.get(1, 10) is None
    assert not cache.store(1, 5, b'x', 10)
    assert not cache.store_committed(1, 5, b'x')
    assert len(cache) == 0
    assert cache.changes_between(1, 2) is None


def test_first_poll_then_load_hits(cache):
    assert cache.after_poll(None, 10)
    assert (cache.p0, cache.cmax) == (10, 10)
    assert cache.get(1, 10) is None
    assert cache.store(1, 7, b'seven', 10)
    assert cache.get(1, 10) == (b'seven', 7)
    # Views outside (p0, cmax] cannot be verified.
    assert cache.get(1, 9) is None
    assert cache.get(1, 11) is None
    assert cache.get(1, None) is None
    stats = cache.stats()
    assert stats['hits'] == 1 and stats['misses'] == 4


def test_two_instances_at_different_views(cache):
    # History of oid 1: tid 5 -> a, tid 15 -> b.
    cache.after_poll(None, 10)                     # A at 10
    assert cache.store(1, 5, b'a', 10)
    assert cache.get(1, 10) == (b'a', 5)
    cache.after_poll(10, 20, [(1, 15)])            # B moves to 20
    # A still at 10: the entry at 5 is still right for it.
    assert cache.get(1, 10) == (b'a', 5)
    # B must not get it.
    assert cache.get(1, 20) is None
    assert cache.store(1, 15, b'b', 20)
    assert cache.get(1, 20) == (b'b', 15)
    # Only one revision is kept: A now misses, and its reload at 10
    # cannot push the newer entry out.
    assert cache.get(1, 10) is None
    assert not cache.store(1, 5, b'a', 10)
    assert cache.get(1, 20) == (b'b', 15)
    # A view between the changes.
    assert cache.get(1, 14) is None
    assert cache.get(1, 15) == (b'b', 15)


def test_store_refuses_what_the_index_contradicts(cache):
    cache.after_poll(None, 10)
    cache.after_poll(10, 20, [(1, 15)])
    # A load claiming tid 5 is current at 20 contradicts the index.
    assert not cache.store(1, 5, b'old', 20)
    # tid above the view is impossible.
    assert not cache.store(1, 25, b'x', 20)
    # Views outside the index.
    assert not cache.store(2, 3, b'x', 9)
    assert not cache.store(2, 3, b'x', 21)
    # A tid in (p0, view] that the index does not know as a change.
    assert not cache.store(2, 12, b'x', 20)
    assert cache.store(2, 3, b'x', 20)
    assert cache.stats()['rejected_stores'] == 5


def test_store_never_replaces_newer(cache):
    cache.after_poll(None, 10)
    cache.after_poll(10, 20, [(1, 15)])
    assert cache.store(1, 15, b'b', 20)
    assert not cache.store(1, 5, b'a', 12)   # valid for 12, but older
    assert cache.get(1, 20) == (b'b', 15)


def test_store_many_keeps_what_store_would_keep(cache):
    cache.after_poll(None, 10)
    cache.after_poll(10, 20, [(1, 15)])
    assert cache.store(3, 4, b'held', 20)
    too_big = bytes(cache._max_state + 1)
    found = {
        1: (b'old', 5),        # contradicted by the index: rejected
        2: (b'two', 7),        # kept
        3: (b'held', 4),       # already there: not counted again
        4: (None, 6),          # deleted: nothing to keep
        5: (too_big, 8),       # over the size limit
        6: (b'six', 12),       # a change the index does not know
        7: (b'seven', 9),      # kept
    }
    assert cache.store_many(found, 20) == 2
    assert cache.get(2, 20) == (b'two', 7)
    assert cache.get(7, 20) == (b'seven', 9)
    for oid in (1, 4, 5, 6):
        assert cache.get(oid, 20) is None
    stats = cache.stats()
    assert stats['rejected_stores'] == 2 and stats['stores'] == 3
    # A view the index cannot vouch for keeps nothing; pairs work too.
    assert cache.store_many([(8, (b'x', 3))], 21) == 0
    assert cache.stats()['rejected_stores'] == 3
    check_accounting(cache)


def test_store_many_evicts_once_keeping_the_newest_that_fit():
    size = 100 + ENTRY_OVERHEAD
    cache = StorageCache(3 * size)
    cache.after_poll(None, 10)
    assert cache.store(1, 5, bytes(100), 10)
    assert cache.store_many([(oid, (bytes(100), 5)) for oid in (2, 3, 4, 5)],
                            10) == 4
    assert sorted(cache._entries) == [3, 4, 5]
    assert cache.stats()['evictions'] == 2
    check_accounting(cache)


def test_committed_state_not_served_before_poll(cache):
    cache.after_poll(None, 10)
    assert cache.store(1, 5, b'a', 10)
    assert cache.store_committed(1, 12, b'mine')
    # Until a poll covers 12, no view may see it; the old one is gone.
    assert cache.get(1, 10) is None
    assert cache.after_poll(10, 12, [(1, 12)])
    assert cache.get(1, 12) == (b'mine', 12)
    assert cache.get(1, 11) is None


def test_committed_state_reported_late(cache):
    cache.after_poll(None, 10)
    cache.after_poll(10, 20, [(1, 12), (2, 18)])
    # The commit of 12 is reported after a poll went past it: kept only
    # when the index agrees that 12 is a change of that object.
    assert cache.store_committed(1, 12, b'one')
    assert cache.get(1, 20) == (b'one', 12)
    assert not cache.store_committed(3, 12, b'three')
    # Lower than what is cached: ignored.
    cache.after_poll(20, 30, [(1, 25)])
    assert cache.store_committed(1, 25, b'new')
    assert not cache.store_committed(1, 12, b'one')
    assert cache.get(1, 30) == (b'new', 25)


def test_committed_deletion_drops_entry(cache):
    cache.after_poll(None, 10)
    cache.store(1, 5, b'a', 10)
    assert not cache.store_committed(1, 11, None)
    assert len(cache) == 0
    assert cache.get(1, 10) is None


def test_committed_state_too_big_drops_superseded_entry():
    cache = StorageCache(100_000, object_max_bytes=10)
    cache.after_poll(None, 10)
    cache.store(1, 5, b'a', 10)
    assert not cache.store_committed(1, 11, b'x' * 11)
    assert len(cache) == 0


def test_gap_filled_by_fetch():
    calls = []
    history = {1: 25, 2: 15}

    def fetch(lo, hi):
        calls.append((lo, hi))
        return {oid: tid for oid, tid in history.items() if lo < tid <= hi}

    cache = StorageCache(100_000, fetch_changes=fetch)
    cache.after_poll(None, 10)
    cache.store(1, 5, b'a', 10)
    cache.store(2, 5, b'b', 10)
    cache.store(3, 5, b'c', 10)
    # A new instance's first poll lands at 30: changes unknown.
    assert cache.after_poll(None, 30)
    assert calls == [(10, 30)]
    assert (cache.p0, cache.cmax) == (10, 30)
    assert cache.get(1, 30) is None
    assert cache.get(2, 30) is None
    assert cache.get(3, 30) == (b'c', 5)
    assert cache.get(1, 10) == (b'a', 5)
    # An instance polling from a view past cmax: only the hole is fetched.
    assert cache.after_poll(35, 40, [(2, 38)])
    assert calls[-1] == (30, 35)
    assert cache.cmax == 40
    assert cache.get(2, 40) is None
    assert cache.get(3, 40) == (b'c', 5)
    assert cache.stats()['gap_fills'] == 2


def test_gap_fill_per_call_callable():
    cache = StorageCache(100_000)
    cache.after_poll(None, 10)
    cache.store(1, 5, b'a', 10)
    assert cache.after_poll(None, 20, fetch_changes=lambda lo, hi: [(1, 12)])
    assert cache.get(1, 20) is None
    assert cache.get(1, 10) == (b'a', 5)
    # Only the newest change in (10, 20] was reported: one at 11 is
    # possible, so 11 cannot be served either.
    assert cache.get(1, 11) is None


def test_gap_fill_error_leaves_cache_unchanged():
    def fetch(lo, hi):
        raise OSError('connection lost')
    cache = StorageCache(100_000, fetch_changes=fetch)
    cache.after_poll(None, 10)
    cache.store(1, 5, b'a', 10)
    with pytest.raises(OSError):
        cache.after_poll(None, 20)
    assert (cache.p0, cache.cmax) == (10, 10)
    assert cache.get(1, 10) == (b'a', 5)


def test_gap_without_fetch_resets(cache):
    cache.after_poll(None, 10)
    cache.store(1, 5, b'a', 10)
    assert cache.after_poll(None, 20)
    assert len(cache) == 0
    assert (cache.p0, cache.cmax) == (20, 20)
    assert cache.stats()['resets'] == 1
    # A poll ending inside what is known changes nothing.
    cache.store(1, 5, b'a', 20)
    assert cache.after_poll(None, 20)
    assert cache.after_poll(3, 15, [(1, 12)]) is False
    assert cache.get(1, 20) == (b'a', 5)


def test_poll_from_before_p0_extends(cache):
    cache.after_poll(None, 10)
    cache.store(1, 5, b'a', 10)
    assert cache.after_poll(4, 20, [(1, 5), (2, 8), (3, 14)])
    assert (cache.p0, cache.cmax) == (10, 20)
    assert cache.get(1, 20) == (b'a', 5)
    assert cache.changes_between(10, 20) == {3}


def test_first_poll_with_changes_starts_at_old_view(cache):
    assert cache.after_poll(10, 20, [(1, 15)])
    assert (cache.p0, cache.cmax) == (10, 20)
    assert not cache.store(1, 5, b'a', 20)
    # 15 is the newest change of (10, 20]; one at 11 is possible.
    assert not cache.store(1, 5, b'a', 12)
    assert cache.store(1, 5, b'a', 10)
    assert cache.get(1, 10) == (b'a', 5)
    assert cache.get(1, 14) is None
    exact = StorageCache(100_000)
    exact.after_poll(10, 20, [(1, 15)], complete=True)
    assert exact.store(1, 5, b'a', 12)
    assert exact.get(1, 14) == (b'a', 5)
    assert exact.get(1, 15) is None


def test_rebase_keeps_current_entries_only():
    cache = StorageCache(100_000, delta_limit=2)
    cache.after_poll(None, 10)
    for oid in range(1, 6):
        cache.store(oid, 5, b'v5', 10)
    cache.after_poll(10, 20, [(1, 12), (2, 14)])
    cache.store(2, 14, b'v14', 20)
    assert cache.store_committed(3, 35, b'v35')    # not yet polled
    assert cache.get(1, 10) == (b'v5', 5)
    # A third changed object crosses delta_limit: rebase to 30.
    cache.after_poll(20, 30, [(4, 22), (1, 21)])
    stats = cache.stats()
    assert stats['rebases'] == 1
    assert (cache.p0, cache.cmax) == (30, 30)
    assert stats['index_oids'] == 0
    assert cache.get(1, 30) is None          # entry at 5 was stale
    assert cache.get(4, 30) is None
    assert cache.get(2, 30) == (b'v14', 14)  # current: kept
    assert cache.get(5, 30) == (b'v5', 5)    # never changed: kept
    assert cache.get(3, 30) is None          # 35 not yet polled
    assert len(cache) == 3
    # Older views are no longer verifiable.
    assert cache.get(5, 20) is None
    cache.after_poll(30, 40, [(3, 35)])
    assert cache.get(3, 40) == (b'v35', 35)
    assert cache.get(5, 40) == (b'v5', 5)


def test_rebase_drops_commit_no_poll_reported():
    """A state reported as committed at a tid that polls then went past
    without naming it is never served, not even after a rebase."""
    cache = StorageCache(100_000, delta_limit=1)
    cache.after_poll(None, 10)
    assert cache.store_committed(3, 15, b'ghost')
    cache.after_poll(10, 20, [(1, 12)])
    assert cache.get(3, 20) is None
    cache.after_poll(20, 30, [(2, 25)])      # two oids: rebase to 30
    assert cache.stats()['rebases'] == 1
    assert cache.get(3, 30) is None
    assert len(cache) == 0


def test_rebase_keeps_committed_state_above_cmax():
    cache = StorageCache(100_000, delta_limit=1)
    cache.after_poll(None, 10)
    cache.store_committed(3, 25, b'v25')
    cache.after_poll(10, 20, [(1, 12), (2, 14)])
    assert cache.stats()['rebases'] == 1
    assert len(cache) == 1
    cache.after_poll(20, 30, [(3, 25)])
    assert cache.get(3, 30) == (b'v25', 25)
    assert cache.get(3, 24) is None


def test_newest_only_reports_leave_uncertainty():
    """A poll over (10, 20] reports object 1 only at 18, though it also
    changed at 12.  An instance whose view is 15 learned its view without
    a poll of its own (from changes_between) and must neither be served
    the pre-10 state nor told that nothing changed."""
    cache = StorageCache(100_000)
    cache.after_poll(None, 10)
    cache.store(1, 5, b'v5', 10)
    cache.store(2, 5, b'w5', 10)
    cache.after_poll(10, 20, [(1, 18)])
    assert cache.get(1, 10) == (b'v5', 5)
    assert cache.get(1, 15) is None
    assert cache.get(1, 18) is None
    assert cache.get(2, 15) == (b'w5', 5)
    assert cache.changes_between(10, 15) == {1}
    assert cache.changes_between(10, 20) == {1}
    assert cache.changes_between(17, 20) == {1}
    assert cache.changes_between(18, 20) == set()
    assert not cache.store(1, 12, b'v12', 15)
    assert cache.store(1, 18, b'v18', 20)
    assert cache.get(1, 19) == (b'v18', 18)


def test_complete_reports_are_exact():
    cache = StorageCache(100_000)
    cache.after_poll(None, 10)
    cache.store(1, 5, b'v5', 10)
    cache.after_poll(10, 20, [(1, 12), (1, 18)], complete=True)
    assert cache.get(1, 11) == (b'v5', 5)
    assert cache.get(1, 12) is None
    assert cache.changes_between(12, 17) == set()
    assert cache.changes_between(11, 12) == {1}
    assert cache.store(1, 12, b'v12', 15)
    assert cache.get(1, 17) == (b'v12', 12)
    assert cache.get(1, 18) is None


def test_changes_between(cache):
    assert cache.changes_between(0, 10) is None
    cache.after_poll(None, 10)
    cache.after_poll(10, 20, {1: 12, 2: 15})
    cache.after_poll(20, 30, {3: 25, 1: 30})
    assert cache.changes_between(10, 30) == {1, 2, 3}
    assert cache.changes_between(20, 30) == {1, 3}
    assert cache.changes_between(20, 29) == {1, 3}   # 1 may be in (20, 30)
    assert cache.changes_between(25, 25) == set()
    assert cache.changes_between(9, 20) is None
    assert cache.changes_between(10, 31) is None
    assert cache.changes_between(None, 20) is None


def test_lru_eviction_by_bytes():
    size = 100 + ENTRY_OVERHEAD
    cache = StorageCache(3 * size)
    cache.after_poll(None, 10)
    for oid in (1, 2, 3):
        assert cache.store(oid, 5, bytes(100), 10)
    assert cache.stats()['bytes'] == 3 * size
    assert cache.get(1, 10) is not None       # 1 is now most recent
    cache.store(4, 5, bytes(100), 10)
    assert cache.get(2, 10) is None           # least recently used
    assert cache.get(1, 10) is not None
    assert cache.get(3, 10) is not None
    assert cache.get(4, 10) is not None
    assert len(cache) == 3
    assert cache.stats()['evictions'] == 1
    # One larger state pushes out as many as needed.
    cache.store(5, 5, bytes(250), 10)
    assert len(cache) == 2
    assert cache.stats()['bytes'] <= 3 * size
    check_accounting(cache)


def test_objects_over_max_are_not_cached():
    cache = StorageCache(100_000, object_max_bytes=50)
    cache.after_poll(None, 10)
    assert not cache.store(1, 5, bytes(51), 10)
    assert cache.store(2, 5, bytes(50), 10)
    assert not cache.store_committed(3, 11, bytes(51))
    assert len(cache) == 1
    # A state bigger than the whole cache is refused, not allowed to
    # empty it.
    small = StorageCache(200, object_max_bytes=16384)
    small.after_poll(None, 10)
    assert small.store(1, 5, bytes(50), 10)
    assert not small.store(2, 5, bytes(150), 10)
    assert len(small) == 1


def test_zero_size_cache_keeps_index():
    cache = StorageCache(0)
    cache.after_poll(None, 10)
    cache.after_poll(10, 20, [(1, 15)])
    assert not cache.store(2, 5, b'x', 20)
    assert cache.changes_between(10, 20) == {1}


def test_invalidate_and_clear(cache):
    cache.after_poll(None, 10)
    for oid in (1, 2, 3):
        cache.store(oid, 5, b'x', 10)
    cache.invalidate([1, 3, 99])
    assert cache.get(1, 10) is None
    assert cache.get(2, 10) == (b'x', 5)
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0
    assert cache.p0 is None and cache.cmax is None
    assert cache.stats()['bytes'] == 0
    assert cache.get(2, 10) is None
    cache.after_poll(None, 12)
    assert cache.p0 == 12


def test_stats_keys(cache):
    stats = cache.stats()
    for key in ('hits', 'misses', 'stores', 'evictions', 'bytes', 'entries',
                'index_oids', 'p0', 'cmax'):
        assert key in stats


def test_from_options():
    class Opts:
        cache_local_mb = 2.5
        cache_local_object_max = 1000
        cache_delta_size_limit = 7
    cache = StorageCache.from_options(Opts())
    assert cache.limit_bytes == 2_500_000
    assert cache.object_max_bytes == 1000
    assert cache.delta_limit == 7


def test_rejects_bad_sizes():
    with pytest.raises(ValueError):
        StorageCache(-1)
    with pytest.raises(ValueError):
        StorageCache(10, object_max_bytes=-1)
    with pytest.raises(ValueError):
        StorageCache(10, delta_limit=-1)


# -- the building blocks ------------------------------------------------------

def test_is_current():
    assert is_current(None, 5, 20, 10)
    assert not is_current(None, 11, 20, 10)
    rec = [12, 10, 18, 12]          # 12 exactly; 18 with window (12, 18)
    assert is_current(rec, 12, 12, 10)
    assert not is_current(rec, 12, 15, 10)   # window reaches 15
    assert is_current(rec, 18, 18, 10)
    assert not is_current(rec, 5, 11, 10)
    rec = [12, 12, 18, 18]          # exact records
    assert is_current(rec, 12, 17, 10)
    assert is_current(rec, 5, 11, 10)


def test_change_index_out_of_order_records():
    index = ChangeIndex()
    index.start(0)
    # A complete list of revisions, newest first for oid 1.
    assert index.extend(0, 30, [(1, 30), (2, 20), (1, 10), (1, 20),
                                (1, 10)], complete=True)
    assert index.by_oid[1] == (10, 10, 20, 20, 30, 30)
    assert index.by_oid[2] == (20, 20)
    assert index.nrecords == 4
    assert index._tids == [10, 20, 30]
    assert index._oids_at == {10: [1], 20: [2, 1], 30: [1]}
    assert index.latest(1) == 30
    assert index.latest(3) is None
    assert index.extend(30, 40, [(1, 35), (3, 40)])
    assert index.by_oid[1][-2:] == (35, 30)   # window (30, 35]
    assert index.nrecords == 6 and index._tids == [10, 20, 30, 35, 40]
    rec = (10, 10, 20, 20)
    # The same change, a wider window; then a narrower one, ignored.
    assert _insert_pair(rec, 10, 2) == ((10, 2, 20, 20), False)
    assert _insert_pair((10, 2, 20, 20), 10, 5) == ((10, 2, 20, 20), False)
    assert _insert_pair((10, 2, 20, 20), 15, 12) == (
        (10, 2, 15, 12, 20, 20), True)


def test_change_index_merges_a_record_past_max_pairs():
    index = ChangeIndex()
    index.start(0)
    count = index_module.MAX_PAIRS + 3
    tids = [10 * (i + 1) for i in range(count)]
    for lo, tid in zip([0] + tids, tids):
        assert index.extend(lo, tid, [(1, tid), (2, tid)] if tid == 20
                            else [(1, tid)], complete=True)
    rec = index.by_oid[1]
    assert len(rec) == 2 * index_module.MAX_PAIRS
    # The four oldest changes (10..40) became one, at 40, whose window
    # reaches below 10; the newer ones are as they were.
    assert rec[:2] == (40, 9)
    assert rec[2:] == tuple(x for tid in tids[4:] for x in (tid, tid))
    assert index.nrecords == index_module.MAX_PAIRS + 1  # and oid 2's
    # A view among the merged changes cannot tell which one it sees; a
    # view after them still can; one before them sees the start.
    for view in (10, 25, 39):
        assert not any(is_current(rec, tid, view, 0) for tid in tids)
    assert is_current(rec, 40, 45, 0)
    assert is_current(rec, 50, 55, 0)
    assert is_current(rec, 0, 5, 0)
    # Polls over the merged changes still name the object.
    assert index.between(0, 15) == {1}
    assert index.between(15, 25) == {1, 2}
    assert index.between(21, 29) == {1}      # inside the merged window
    assert index.between(45, 49) == set()
    assert index.between(40, 50) == {1}


def test_change_index_records_are_left_alone_by_the_garbage_collector():
    # A record per changed object, up to cache-delta-size-limit of them:
    # containers the cyclic collector would walk at every full collection
    # if it tracked them (as it does every list).
    index = ChangeIndex()
    assert index.extend(0, 30, [(oid, 10 + oid % 20) for oid in range(500)])
    assert index.extend(30, 40, [(oid, 35) for oid in range(0, 500, 7)])
    gc.collect()
    assert len(index.by_oid) == 500
    assert not any(gc.is_tracked(rec) for rec in index.by_oid.values())


def test_change_index_refuses_holes():
    index = ChangeIndex()
    assert index.extend(10, 20, [(1, 15)])
    assert (index.p0, index.cmax) == (10, 20)
    assert not index.extend(21, 30, [(1, 25)])
    assert index.cmax == 20
    assert not index.extend(15, 30, [], min_floor=25)
    assert index.extend(15, 30, [(2, 25)], min_floor=20)
    assert index.by_oid[2] == (25, 20)
    fresh = ChangeIndex()
    assert not fresh.extend(10, 20, [], min_floor=15)


def test_byte_lru():
    lru = ByteLRU(3 * (10 + ENTRY_OVERHEAD))
    for key in range(4):
        lru.put(key, (bytes(10), key))
    assert list(lru.data) == [1, 2, 3]
    assert lru.evictions == 1
    lru.put(2, (bytes(20), 9))               # replace grows it
    assert list(lru.data) == [3, 2]
    assert lru.pop(3) == (bytes(10), 3)
    assert lru.pop(3) is None
    assert lru.nbytes == 20 + ENTRY_OVERHEAD
    lru.clear()
    assert lru.nbytes == 0 and len(lru) == 0


def test_byte_lru_put_many_keeps_the_newest_entries_that_fit():
    import random
    from collections import OrderedDict
    rng = random.Random(7)
    for _ in range(200):
        limit = rng.randrange(0, 8) * (10 + ENTRY_OVERHEAD) + rng.randrange(
            0, 40)
        many = ByteLRU(limit)
        for _ in range(rng.randrange(1, 5)):
            batch = [(rng.randrange(12), (bytes(rng.randrange(30)), n))
                     for n in range(rng.randrange(0, 10))]
            one = ByteLRU(limit)
            one.put_many(many.data.items())
            want = OrderedDict(many.data)
            for key, value in batch:
                one.put(key, value)
                want.pop(key, None)
                want[key] = value
            while sum(entry_size(v) for v in want.values()) > limit:
                want.popitem(last=False)
            many.put_many(batch)
            kept = list(many.data.items())
            assert kept == list(want.items())
            assert many.nbytes == sum(
                entry_size(v) for _, v in kept) <= limit
            # Single puts leave the same, or fewer of the oldest.
            assert kept[len(kept) - len(one.data):] == list(
                one.data.items())
