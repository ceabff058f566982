"""The change index: which objects changed, and when, in a tid interval.

The index covers the interval ``(p0, cmax]`` of transaction ids and is
*complete* for it, in this sense: every change of every object committed in
that interval is either recorded, or lies strictly inside the *uncertainty
window* of a recorded, later change of the same object.

Why windows: a poll (or a query filling a gap) over ``(lo, hi]`` reports, for
each changed object, only its newest tid ``t`` in that range; a
history-free database cannot report more.  Any earlier change of the object
in ``(lo, t)`` stays unknown.  Folding the report into an index that already
covers ``(p0, lo']`` with ``lo <= lo'`` only adds what lies beyond ``lo'``,
so each record gets the window ``(lo', t)``.  Without windows, a connection
whose view falls inside one would be told "no change since p0" and served a
state that was replaced in the meantime.  When the caller knows its report
lists every revision (history-preserving polls can), the window is empty.

A record for an object is a flat tuple ``(t1, a1, t2, a2, ...)`` sorted by
tid, where ``a`` is the exclusive lower edge of the window below ``t``
(``a == t`` for no window).  Most objects have one record.  Tuples, replaced
rather than changed, because a tuple of ints is soon untracked by Python's
cyclic garbage collector where a list never is: an index of up to
cache-delta-size-limit (100,000) lists made every full collection of the
whole process (the application's too) walk them, and come sooner, as a
commit of a thousand objects added a thousand long-lived containers.

A record keeps at most MAX_PAIRS pairs. An object changed more often
than that before the next rebase (a counter, a catalog's root bucket,
changed by every commit) has its oldest pairs merged into one: the newest
of them, with a window reaching below the oldest, so that every merged
change lies inside it. A view among the merged changes is then told that
the object may have changed (a miss, read from the database) instead of
which revision it sees; a view after them is answered as before. Without
the bound each commit copied the object's whole record, which grew until
the next rebase (up to 4 * cache-delta-size-limit pairs), and the new
copy was one more tuple for the garbage collector to walk.

The class does no locking; :class:`~.storage_cache.StorageCache` owns it
and calls it under its lock.
"""
from bisect import bisect_right
from bisect import insort

#: The most (tid, low) pairs a record keeps; see the module docstring.
MAX_PAIRS = 8

def is_current(rec, tid, view, p0):
    """Whether the revision ``tid`` is the newest one at ``view``.

    ``rec`` is the object's record (or None if it has none) in an index
    covering ``(p0, cmax]`` with ``p0 <= view <= cmax``.  The answer is
    True only when the index proves it: ``tid`` is the newest recorded
    change not after ``view`` (or, with none recorded, ``tid <= p0``), and no
    window of a later change reaches down to ``view``.
    """
    if rec is None:
        return tid <= p0
    i = len(rec) - 2
    while i >= 0:
        t = rec[i]
        if t <= view:
            return tid == t
        if rec[i + 1] < view:
            # An unrecorded change may lie in (rec[i+1], view].
            return False
        i -= 2
    return tid <= p0


def _insert_pair(rec, tid, low):
    """``(record, added)``: the flat, tid-ordered record *rec* with
    ``(tid, low)`` in its place (a tid already there only lowers its
    ``low``), and whether a pair was added."""
    for i in range(0, len(rec), 2):
        if rec[i] == tid:
            if low < rec[i + 1]:
                return rec[:i + 1] + (low,) + rec[i + 2:], False
            return rec, False
    pairs = sorted(list(zip(rec[::2], rec[1::2])) + [(tid, low)])
    return tuple(x for pair in pairs for x in pair), True


def _merged(rec):
    """*rec* (of more than MAX_PAIRS pairs) with its oldest pairs merged
    into one, so that MAX_PAIRS are left: the newest merged change, its
    window's lower edge below every merged change and every merged
    window."""
    cut = len(rec) - 2 * (MAX_PAIRS - 1)
    low = min(min(rec[1:cut:2]), rec[0] - 1)
    return (rec[cut - 2], low) + rec[cut:]


class ChangeIndex:
    """Changes of objects in ``(p0, cmax]``; see the module docstring.

    ``p0`` and ``cmax`` are None while the index is uninitialised.
    ``by_oid`` maps oid to record; it is cleared in place, never replaced,
    so a caller may keep a reference to it.
    """

    __slots__ = ('p0', 'cmax', 'by_oid', 'nrecords', '_tids', '_oids_at')

    def __init__(self):
        self.p0 = None
        self.cmax = None
        self.by_oid = {}
        self.nrecords = 0
        self._tids = []       # sorted, distinct tids that have records
        self._oids_at = {}    # tid -> list of oids changed at that tid

    def __len__(self):
        return len(self.by_oid)

    def clear(self):
        """Forget everything; the index becomes uninitialised."""
        self.start(None)

    def start(self, tid):
        """Drop all records and cover the empty interval ``(tid, tid]``."""
        self.p0 = self.cmax = tid
        self.by_oid.clear()
        self._tids.clear()
        self._oids_at.clear()
        self.nrecords = 0

    def covers(self, view):
        p0 = self.p0
        return p0 is not None and view is not None and p0 <= view <= self.cmax

    def extend(self, lo, hi, changes, complete=False, min_floor=None):
        """Fold in the changes of the interval ``(lo, hi]``.

        ``changes`` holds ``(oid, tid)`` pairs: for every object changed in
        ``(lo, hi]`` at least its newest tid there, or every tid when
        ``complete`` is true.  Pairs with a tid the index already covers are
        skipped, so a caller may drop them beforehand: ``min_floor`` says up
        to which tid it did so, and the fold is refused if the index now
        ends below that point (it was cleared meanwhile).

        Returns False, changing nothing, if the fold would leave a hole: the
        index ends before ``lo`` (or below ``min_floor``).  An uninitialised
        index starts at ``lo``.
        """
        if self.p0 is None:
            if min_floor is not None and min_floor > lo:
                return False
            self.p0 = self.cmax = lo
        floor = self.cmax
        if lo > floor or (min_floor is not None and floor < min_floor):
            return False
        if hi <= floor:
            return True
        # One pass with the common cases inline (a poll can bring
        # thousands of changes): a new oid, or a tid newer than the oid's
        # last record.
        by_oid = self.by_oid
        oids_at = self._oids_at
        tids = self._tids
        added = 0
        for oid, tid in changes:
            if tid <= floor:
                continue
            low = tid if complete else floor
            rec = by_oid.get(oid)
            if rec is None:
                by_oid[oid] = (tid, low)
            else:
                if rec[-2] < tid:
                    rec += (tid, low)
                else:
                    rec, added_pair = _insert_pair(rec, tid, low)
                    if not added_pair:
                        by_oid[oid] = rec
                        continue
                if len(rec) > 2 * MAX_PAIRS:
                    pairs = len(rec) // 2
                    rec = _merged(rec)
                    added -= pairs - MAX_PAIRS
                by_oid[oid] = rec
            added += 1
            at = oids_at.get(tid)
            if at is None:
                oids_at[tid] = [oid]
                if not tids or tids[-1] < tid:
                    tids.append(tid)
                else:
                    insort(tids, tid)
            else:
                at.append(oid)
        self.nrecords += added
        self.cmax = hi
        return True

    def latest(self, oid):
        """The newest recorded change of ``oid``, or None."""
        rec = self.by_oid.get(oid)
        return None if rec is None else rec[-2]

    def between(self, old, new, skip_tids=()):
        """The oids that may have changed in ``(old, new]``, leaving out
        the changes made by the transactions *skip_tids*.

        None when the index does not cover that interval.  The answer never
        misses another change; it may name an object whose only possible
        change there is an unrecorded one inside a window.
        """
        p0 = self.p0
        if p0 is None or old is None or new is None or old < p0 \
                or new > self.cmax:
            return None
        result = set()
        if new <= old:
            return result
        tids = self._tids
        oids_at = self._oids_at
        by_oid = self.by_oid
        for i in range(bisect_right(tids, old), len(tids)):
            t = tids[i]
            if t <= new:
                if t not in skip_tids:
                    result.update(oids_at[t])
                continue
            for oid in oids_at[t]:
                if oid in result:
                    continue
                rec = by_oid[oid]
                j = len(rec) - 2
                while j >= 0 and rec[j] > t:
                    j -= 2
                if j < 0 or rec[j] != t:
                    # Merged into the window of a later change of the
                    # object (see _merged), which is judged at its own tid.
                    continue
                if rec[j + 1] < new:
                    result.add(oid)
        return result
