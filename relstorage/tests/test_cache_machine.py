"""The shared cache and its change index against a reference model, as a
Hypothesis state machine: random sequences of commits (by this process or
another), polls (newest-only or complete reports, with or without a way
to fill gaps), loads, late stores, invalidations and clears, with the
cache's promises checked after every step. Hypothesis shrinks a failure
to the shortest sequence that breaks one.

Promises checked: a hit is the state current at the asking view;
``changes_between`` never misses a change; the change index's answers
(``between``, ``is_current``) agree with the true history wherever it
claims to cover a view; the byte accounting adds up and stays within the
limit.
"""
import pytest
from hypothesis import HealthCheck
from hypothesis import Phase
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule
from hypothesis.stateful import run_state_machine_as_test

from relstorage.cache import StorageCache
from relstorage.cache import storage_cache as storage_cache_module
from relstorage.cache.index import is_current

from .test_cache import History
from .test_cache import check_accounting

NOIDS = 6
INSTANCES = 3

oids = st.integers(0, NOIDS - 1)
instances = st.integers(0, INSTANCES - 1)
#: None deletes the object; the numbers pad its state to various sizes
#: (300 is over the cache's per-object limit below).
pads = st.one_of(st.none(), st.sampled_from([0, 10, 60, 300]))


class CacheMachine(RuleBasedStateMachine):

    @initialize(limit=st.sampled_from([400, 1500, 100000]),
                delta_limit=st.sampled_from([0, 3, 8, 1000]),
                use_fetch=st.booleans(), every_revision=st.booleans())
    def open(self, limit, delta_limit, use_fetch, every_revision):
        self.db = History(NOIDS)
        self.db.commit({oid: 0 for oid in range(NOIDS)})
        self.every_revision = every_revision
        fetch = (lambda lo, hi: self.db.changes(lo, hi)) if use_fetch \
            else None
        self.cache = StorageCache(limit, object_max_bytes=200,
                                  delta_limit=delta_limit,
                                  fetch_changes=fetch)
        self.views = [None] * INSTANCES
        self.pending_loads = []     # (oid, tid, state, view), stored late
        self.pending_commits = []   # (tid, writes), reported late

    # -- what the database does ----------------------------------------

    @rule(writes=st.dictionaries(oids, pads, min_size=1, max_size=4),
          step=st.integers(1, 3),
          reported=st.sampled_from(['now', 'later', 'never']))
    def commit(self, writes, step, reported):
        """A commit by an instance of this process (reported to the cache
        with store_committed, now or later) or by another process."""
        tid, states = self.db.commit(writes, step=step)
        if reported == 'now':
            for oid, state in states.items():
                self.cache.store_committed(oid, tid, state)
        elif reported == 'later':
            self.pending_commits.append((tid, states))

    @precondition(lambda self: self.pending_commits)
    @rule(data=st.data())
    def report_commit(self, data):
        tid, states = self.pending_commits.pop(data.draw(
            st.integers(0, len(self.pending_commits) - 1)))
        for oid, state in states.items():
            self.cache.store_committed(oid, tid, state)

    # -- what instances do ---------------------------------------------

    @rule(i=instances, data=st.data(), forget=st.booleans())
    def poll(self, i, data, forget):
        """Instance *i* polls to the newest tid or to one in between (a
        view chosen by a concurrent commit); *forget* polls as a new
        instance, or one whose previous poll failed, would."""
        view = self.views[i]
        low = 0 if view is None else view
        target = data.draw(st.integers(low, self.db.last))
        if view is None or forget:
            self.cache.after_poll(None, target)
        else:
            self.cache.after_poll(
                view, target, self.db.changes(view, target,
                                              self.every_revision),
                complete=self.every_revision)
        self.views[i] = target

    @precondition(lambda self: any(v is not None for v in self.views))
    @rule(i=instances, ahead=st.integers(0, 40))
    def ask_changes(self, i, ahead):
        """What an instance polling through the cache is told changed."""
        view = self.views[i]
        if view is None:
            return
        target = min(view + ahead, self.db.last)
        answer = self.cache.changes_between(view, target)
        if answer is not None:
            missed = self.db.changed_oids(view, target) - answer
            assert not missed, ('changes_between missed', view, target,
                                missed)
            self.views[i] = target

    @rule(i=instances, oid=oids, late=st.booleans())
    def load(self, i, oid, late):
        """A load: a hit must be the true state; a miss reads the database
        and stores what it read, at once or (a slow reader) later."""
        view = self.views[i]
        if view is None:
            return
        got = self.cache.get(oid, view)
        want = self.db.load(oid, view)
        if got is not None:
            assert got == want, ('stale hit', oid, view, got, want)
        elif want is not None:
            state, tid = want
            if late:
                self.pending_loads.append((oid, tid, state, view))
            else:
                self.cache.store(oid, tid, state, view)

    @precondition(lambda self: self.pending_loads)
    @rule(data=st.data())
    def late_store(self, data):
        self.cache.store(*self.pending_loads.pop(data.draw(
            st.integers(0, len(self.pending_loads) - 1))))

    @rule(which=st.lists(oids, max_size=3))
    def invalidate(self, which):
        self.cache.invalidate(which)

    @rule()
    def clear(self):
        self.cache.clear()

    # -- the promises ---------------------------------------------------

    @invariant()
    def hits_are_true_at_every_covered_view(self):
        cache, db = self.cache, self.db
        p0, cmax = cache.p0, cache.cmax
        if p0 is None:
            return
        for view in range(p0, cmax + 1):
            for oid in range(NOIDS):
                got = cache.get(oid, view)
                if got is not None:
                    assert got == db.load(oid, view), (
                        'stale at', oid, view, got, db.load(oid, view))

    @invariant()
    def index_agrees_with_history(self):
        """``between`` never misses a change, and ``is_current`` never
        calls a revision current at a view where a newer one exists (for
        a revision that was current at some covered view, which is what
        the cache asks about)."""
        index = self.cache._index
        p0, cmax = index.p0, index.cmax
        if p0 is None:
            return
        views = sorted({p0, p0 + 1, (p0 + cmax) // 2, cmax - 1, cmax}
                       & set(range(p0, cmax + 1)))
        for old in views:
            for new in views:
                said = index.between(old, new)
                assert said is not None
                missed = self.db.changed_oids(old, new) - said
                assert not missed, ('between', old, new, missed)
        for oid in range(NOIDS):
            rec = index.by_oid.get(oid)
            for seen_at in views:
                tid = self._newest_at(oid, seen_at)
                for view in views:
                    if tid is not None and is_current(rec, tid, view, p0):
                        assert self._newest_at(oid, view) == tid, (
                            'is_current', oid, tid, view, rec, p0)

    def _newest_at(self, oid, view):
        """The tid of *oid*'s newest revision at *view*, or None."""
        tids = [t for t, _ in self.db.revs[oid] if t <= view]
        return tids[-1] if tids else None

    @invariant()
    def accounting_adds_up(self):
        check_accounting(self.cache)


SETTINGS = settings(max_examples=300, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_cache_follows_the_reference_model():
    run_state_machine_as_test(CacheMachine, settings=SETTINGS)


def _ignore_windows(monkeypatch):
    """Read newest-only poll reports as if they listed every revision."""
    def naive(rec, tid, view, p0):
        if rec is None:
            return tid <= p0
        recorded = [rec[i] for i in range(0, len(rec), 2) if rec[i] <= view]
        return tid == recorded[-1] if recorded else tid <= p0
    monkeypatch.setattr(storage_cache_module, 'is_current', naive)


def _rebase_keeping_everything(monkeypatch):
    """Restart the index without dropping replaced entries."""
    def careless(self):
        self._index.start(self._index.cmax)
        self.rebases += 1
    monkeypatch.setattr(StorageCache, '_rebase', careless)


def _jump_gaps(monkeypatch):
    """Move over a hole in the index without learning its changes."""
    def ignore_hole(self, tid):
        self._index.cmax = tid
    monkeypatch.setattr(StorageCache, '_reset', ignore_hole)


@pytest.mark.parametrize('breakage', [
    _ignore_windows, _rebase_keeping_everything, _jump_gaps])
def test_machine_catches_a_broken_cache(monkeypatch, breakage):
    """The machine is a real check: each of these mistakes is found."""
    breakage(monkeypatch)
    # Deterministic, and stopping at the first failure (no shrinking).
    with pytest.raises(AssertionError):
        run_state_machine_as_test(CacheMachine, settings=settings(
            SETTINGS, max_examples=3000, database=None, derandomize=True,
            phases=[Phase.generate]))
