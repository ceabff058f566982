"""The process-wide pickle cache shared by all instances of one storage.

Every ZODB connection has its own storage instance, and each instance sees
the database as of its *view*, the tid of its last poll.  Instances of one
storage in one process share one :class:`StorageCache`.  It holds at most
one revision per object, and serves that revision to an instance only when
it can prove the revision is the newest one at the instance's view; proof
comes from the change index (see :mod:`relstorage.cache.index`), which the
instances keep up to date by reporting what their polls found.

Invariants the code below keeps (``p0`` and ``cmax`` bound the index):

* an entry whose tid is ``<= p0`` is the newest revision of its object as
  of ``p0``;
* an entry whose tid is above ``p0`` is a committed revision of its
  object; it is served only while the index records that very tid (so an
  entry above ``cmax``, just committed by an instance of this process, is
  served by no one until a poll brings the index past it).

A hit is then: the view lies in ``[p0, cmax]``, no uncertainty window of
the object reaches the view, and the entry's tid is the object's newest
recorded change not after the view or, if it has none, is ``<= p0``.
"""
import threading
from collections.abc import Mapping

from .index import ChangeIndex
from .index import is_current
from .lru import ENTRY_OVERHEAD
from .lru import ByteLRU

__all__ = ['StorageCache']

#: Index size (in objects) that triggers a rebase, unless configured.
DEFAULT_DELTA_LIMIT = 100_000

#: A rebase also happens when the index holds this many times
#: ``delta_limit`` (oid, tid) records, which bounds the memory that a few
#: very often changed objects can take.
RECORDS_PER_OID_LIMIT = 4


def _pairs(changes):
    if isinstance(changes, Mapping):
        return changes.items()
    return changes


class StorageCache:
    """A thread-safe cache of ``oid -> (state, tid)``, bounded in bytes.

    ``limit_bytes``
        the total the entries may take (state lengths plus a fixed
        overhead each); 0 disables caching of states but keeps the change
        index, so :meth:`changes_between` still answers polls.
    ``object_max_bytes``
        states longer than this are never cached.
    ``delta_limit``
        the number of objects the change index may track before it is
        rebased (see :meth:`after_poll`).
    ``fetch_changes``
        optional callable ``fetch_changes(after_tid, upto_tid)`` returning
        ``(oid, tid)`` pairs (or a mapping) naming, for each object changed
        in ``(after_tid, upto_tid]``, at least its newest tid there.  The
        cache calls it, without holding its lock, when a poll leaves a
        hole between what it knows and the polling instance's new view.
        Without it such a hole empties the cache.

    tids and oids are ints.  All methods may be called from any thread.
    """

    def __init__(self, limit_bytes, object_max_bytes=16384,
                 delta_limit=DEFAULT_DELTA_LIMIT, fetch_changes=None):
        limit_bytes = int(limit_bytes)
        if limit_bytes < 0:
            raise ValueError('limit_bytes must not be negative: %r'
                             % (limit_bytes,))
        if object_max_bytes < 0:
            raise ValueError('object_max_bytes must not be negative: %r'
                             % (object_max_bytes,))
        if delta_limit is None:
            delta_limit = DEFAULT_DELTA_LIMIT
        if delta_limit < 0:
            raise ValueError('delta_limit must not be negative: %r'
                             % (delta_limit,))
        self.limit_bytes = limit_bytes
        # A state is cached only if it fits both limits.
        self._max_state = min(int(object_max_bytes),
                              limit_bytes - ENTRY_OVERHEAD)
        self.object_max_bytes = object_max_bytes
        self.delta_limit = delta_limit
        self._fetch_changes = fetch_changes
        self._lock = threading.Lock()
        self._acquire = self._lock.acquire
        self._release = self._lock.release
        self._lru = ByteLRU(limit_bytes)
        self._entries = self._lru.data
        self._move_to_end = self._entries.move_to_end
        self._index = ChangeIndex()
        self._by_oid = self._index.by_oid
        self.hits = 0
        self.misses = 0
        self.stores = 0
        self.rejected_stores = 0
        self.rebases = 0
        self.resets = 0
        self.gap_fills = 0

    @classmethod
    def from_options(cls, options, fetch_changes=None):
        """A cache sized by ``cache-local-mb``, ``cache-local-object-max``
        and ``cache-delta-size-limit``."""
        return cls(
            int(options.cache_local_mb * 1_000_000),
            object_max_bytes=options.cache_local_object_max,
            delta_limit=options.cache_delta_size_limit,
            fetch_changes=fetch_changes,
        )

    # -- the hot path ------------------------------------------------------

    def get(self, oid, view_tid):
        """The ``(state, tid)`` of ``oid`` current at ``view_tid``, or None.

        None means "not known here", never "does not exist": the caller
        then loads from the database and offers the result to
        :meth:`store`.
        """
        # Explicit acquire/release: measurably cheaper than ``with``.
        self._acquire()
        try:
            entry = self._entries.get(oid)
            if entry is not None and view_tid is not None:
                index = self._index
                p0 = index.p0
                if p0 is not None and p0 <= view_tid <= index.cmax:
                    rec = self._by_oid.get(oid)
                    if (entry[1] <= p0 if rec is None
                            else is_current(rec, entry[1], view_tid, p0)):
                        self._move_to_end(oid)
                        self.hits += 1
                        return entry
            self.misses += 1
            return None
        finally:
            self._release()

    def serves(self, oid, view_tid):
        """Whether :meth:`get` would return an entry, without counting a
        hit or a miss (``hits`` and ``misses`` count loads: the metrics
        report them as such) and without touching the LRU order."""
        with self._lock:
            entry = self._entries.get(oid)
            index = self._index
            p0 = index.p0
            if (entry is None or view_tid is None or p0 is None
                    or not p0 <= view_tid <= index.cmax):
                return False
            rec = self._by_oid.get(oid)
            return (entry[1] <= p0 if rec is None
                    else is_current(rec, entry[1], view_tid, p0))

    def store(self, oid, tid, state, view_tid):
        """Offer ``(state, tid)``, loaded from the database at ``view_tid``.

        ``tid`` must be the revision the database returned as current at
        ``view_tid``.  The state is kept only if the change index proves
        that, so a load made before a concurrent poll or rebase can never
        plant a stale entry; it never replaces an entry with a newer tid.
        Returns whether it was kept.
        """
        return self.store_many(((oid, (state, tid)),), view_tid) == 1

    def store_many(self, found, view_tid):
        """:meth:`store` each ``(oid, (state, tid))`` of *found* (pairs,
        or a mapping of them; one per oid), all loaded at ``view_tid``,
        under one hold of the lock and with one eviction at the end.
        Returns how many were kept."""
        if isinstance(found, Mapping):
            found = found.items()
        max_state = self._max_state
        kept = []
        with self._lock:
            index = self._index
            p0 = index.p0
            usable = (p0 is not None and view_tid is not None
                      and p0 <= view_tid <= index.cmax)
            by_oid = self._by_oid
            entries = self._entries
            rejected = 0
            for oid, value in found:
                state, tid = value
                if state is None or len(state) > max_state:
                    continue
                if (not usable or tid > view_tid
                        or not is_current(by_oid.get(oid), tid, view_tid,
                                          p0)):
                    rejected += 1
                    continue
                old = entries.get(oid)
                if old is not None and old[1] >= tid:
                    if old[1] == tid:
                        entries.move_to_end(oid)
                    continue
                kept.append((oid, value))
            self.rejected_stores += rejected
            if kept:
                self._lru.put_many(kept)
                self.stores += len(kept)
        return len(kept)

    def store_committed(self, oid, tid, state):
        """Record that this process just committed ``state`` as ``tid``.

        Call only once the commit is durable.  An entry whose tid is above
        what any poll reported is served to no one until a poll covers it,
        so storing it early is safe.  ``state`` None means the object was
        deleted: the entry is dropped.  Returns whether it was kept.
        """
        return self.store_committed_many(((oid, (state, tid)),)) == 1

    def store_committed_many(self, items):
        """:meth:`store_committed` for each ``(oid, (state, tid))`` of one
        commit, under one acquisition of the lock; returns how many were
        kept. The ``(state, tid)`` tuples are kept as they are, so that
        the committing instance may hold the same ones (each tuple is an
        object Python's garbage collector counts until it has looked at
        it once: a commit of many objects triggers fewer collections
        when there are fewer of them)."""
        kept = 0
        with self._lock:
            index = self._index
            p0 = index.p0
            if p0 is None:
                return 0
            cmax = index.cmax
            entries = self._entries
            get = entries.get
            lru = self._lru
            max_state = self._max_state
            by_oid = self._by_oid
            fresh = []
            for item in items:
                oid, (state, tid) = item
                old = get(oid)
                if old is not None and old[1] > tid:
                    continue
                if state is None or len(state) > max_state:
                    if old is not None:
                        lru.pop(oid)
                    continue
                if old is not None and old[1] == tid:
                    entries.move_to_end(oid)
                    kept += 1
                    continue
                if tid <= cmax and not (
                        p0 <= tid and is_current(by_oid.get(oid), tid,
                                                 tid, p0)):
                    # A poll already went past tid; keep the revision only
                    # if the index agrees it is that change.
                    self.rejected_stores += 1
                    continue
                fresh.append(item)
            lru.put_many(fresh)
            self.stores += kept + len(fresh)
        return kept + len(fresh)

    # -- keeping coherent --------------------------------------------------

    def after_poll(self, old_view, new_view, changes=(), *, complete=False,
                   fetch_changes=None):
        """Learn what an instance's poll from ``old_view`` to ``new_view``
        found.

        ``changes`` holds ``(oid, tid)`` pairs (or is a mapping oid -> tid)
        naming, for each object changed in ``(old_view, new_view]``, its
        newest tid there; pass ``complete=True`` if it lists every revision
        instead, which lets the cache serve more.  ``old_view`` is None for
        an instance's first poll, whose changes are unknown.

        A new (or cleared) cache starts covering ``(old_view, new_view]``,
        or just ``new_view`` if ``old_view`` is None.  When the poll reaches
        past what the index covers and does not start within it, the hole
        is filled with ``fetch_changes`` (this call's, else the
        constructor's); without one, the cache restarts empty at
        ``new_view``.  Exceptions from ``fetch_changes`` propagate; the
        cache is then unchanged.

        When the index tracks more than ``delta_limit`` objects it is
        rebased: entries that are no longer current are dropped, and the
        index starts again, empty, at its end.  Instances whose view is
        older then miss until their next poll.

        Returns whether the cache can serve ``new_view`` afterwards.
        """
        if new_view is None:
            return False
        known = old_view is not None and old_view <= new_view
        # Changes the index already covers are dropped before taking the
        # lock; ``floor`` is how far that went (see ChangeIndex.extend).
        floor = self._index.cmax
        if not known:
            changes = ()
            floor = None
        elif floor is None:
            changes = list(_pairs(changes))
        else:
            changes = [c for c in _pairs(changes) if c[1] > floor]

        with self._lock:
            index = self._index
            if index.p0 is None:
                self._lru.clear()
                if not (known and index.extend(old_view, new_view, changes,
                                               complete, floor)):
                    index.start(new_view)
                self._maybe_rebase()
                return index.covers(new_view)
            cmax = index.cmax
            if new_view <= cmax:
                return index.p0 <= new_view
            if known and old_view <= cmax:
                if index.extend(old_view, new_view, changes, complete, floor):
                    self._maybe_rebase()
                    return index.covers(new_view)
                known = False
            gap_lo = cmax
            gap_hi = old_view if known else new_view
            fetch = fetch_changes or self._fetch_changes
            if fetch is None:
                self._reset(new_view)
                return True

        fetched = [c for c in _pairs(fetch(gap_lo, gap_hi)) if c[1] > gap_lo]

        with self._lock:
            index = self._index
            ok = index.extend(gap_lo, gap_hi, fetched, False, gap_lo)
            if ok and known:
                ok = index.extend(old_view, new_view, changes, complete,
                                  floor)
            if ok:
                self.gap_fills += 1
                self._maybe_rebase()
            elif not index.covers(new_view):
                self._reset(new_view)
            return index.covers(new_view)

    def holds(self, oid):
        """Whether there is an entry for ``oid``, of any revision (a hint,
        read without the lock)."""
        return oid in self._entries

    def peek(self, oid, tid):
        """The state of revision ``tid`` of ``oid`` if the cache holds
        exactly that revision, else None. Revisions never change, so no
        view is needed; conflict resolution and loadSerial use this."""
        entry = self._entries.get(oid)
        if entry is not None and entry[1] == tid:
            return entry[0]
        return None

    def changes_between(self, old_view, new_view, skip_tids=()):
        """The set of oids that may have changed in ``(old_view,
        new_view]``, from the index alone, or None if the index does not
        cover that interval (the caller then asks the database).

        Every changed object is named, except those changed only by the
        transactions *skip_tids*; an object whose change cannot be placed
        exactly may be named too.
        """
        with self._lock:
            return self._index.between(old_view, new_view, skip_tids)

    def invalidate(self, oids):
        """Drop the entries of ``oids`` (after undo, or a corrupt row)."""
        with self._lock:
            pop = self._lru.pop
            for oid in oids:
                pop(oid)

    def clear(self):
        """Drop every entry and the change index; counters are kept."""
        with self._lock:
            self._lru.clear()
            self._index.clear()

    def _reset(self, tid):
        self._lru.clear()
        self._index.start(tid)
        self.resets += 1

    def _maybe_rebase(self):
        index = self._index
        limit = self.delta_limit
        if (len(index.by_oid) > limit
                or index.nrecords > RECORDS_PER_OID_LIMIT * limit):
            self._rebase()

    def _rebase(self):
        """Move ``p0`` up to ``cmax`` and empty the index.

        The first invariant must hold for the new ``p0``, so an entry at or
        below ``cmax`` survives only if it is its object's newest change:
        the newest recorded one (nothing newer can hide in a window, as
        windows lie below their change), or, for an object with no record,
        a tid at or below the old ``p0``.  Entries above ``cmax`` stay.  An
        unrecorded object with an entry in ``(p0, cmax]`` can only come
        from a commit reported by :meth:`store_committed` that no poll
        ever showed; it is dropped too.
        """
        index = self._index
        p0 = index.p0
        cmax = index.cmax
        by_oid = index.by_oid
        stale = []
        for oid, (_, tid) in self._entries.items():
            if tid <= cmax:
                rec = by_oid.get(oid)
                if tid != rec[-2] if rec is not None else tid > p0:
                    stale.append(oid)
        pop = self._lru.pop
        for oid in stale:
            pop(oid)
        index.start(cmax)
        self.rebases += 1

    # -- between runs (see persist) -----------------------------------------

    def current_entries(self):
        """``(tid, [(oid, tid, state)])``: the newest tid the index covers
        and the entries it proves current there, least recently used
        first; ``(None, [])`` for a cache that knows no tid."""
        with self._lock:
            index = self._index
            p0, cmax = index.p0, index.cmax
            if cmax is None:
                return None, []
            by_oid = self._by_oid
            result = []
            for oid, (state, tid) in self._entries.items():
                rec = by_oid.get(oid)
                if tid <= cmax and (tid <= p0 if rec is None
                                    else is_current(rec, tid, cmax, p0)):
                    result.append((oid, tid, state))
            return cmax, result

    def restore(self, view_tid, entries):
        """Start an unused cache at ``view_tid`` with ``(oid, tid, state)``
        entries current there (checked by the caller); returns how many
        were kept (the last ones, when they do not all fit)."""
        with self._lock:
            if self._index.p0 is not None or self._entries:
                return 0
            self._index.start(view_tid)
            max_state = self._max_state
            self._lru.put_many([(oid, (state, tid))
                                for oid, tid, state in entries
                                if tid <= view_tid and len(state) <= max_state])
            return len(self._entries)

    # -- introspection -----------------------------------------------------

    @property
    def p0(self):
        return self._index.p0

    @property
    def cmax(self):
        return self._index.cmax

    def __len__(self):
        return len(self._entries)

    def stats(self):
        with self._lock:
            index = self._index
            return {
                'hits': self.hits,
                'misses': self.misses,
                'stores': self.stores,
                'rejected_stores': self.rejected_stores,
                'evictions': self._lru.evictions,
                'bytes': self._lru.nbytes,
                'limit_bytes': self.limit_bytes,
                'entries': len(self._entries),
                'index_oids': len(index.by_oid),
                'index_records': index.nrecords,
                'p0': index.p0,
                'cmax': index.cmax,
                'rebases': self.rebases,
                'resets': self.resets,
                'gap_fills': self.gap_fills,
            }

    def __repr__(self):
        return '<%s %d entries, %d bytes, index (%s, %s]>' % (
            type(self).__name__, len(self._entries), self._lru.nbytes,
            self._index.p0, self._index.cmax)
