"""Reading ahead among the objects one object refers to.

Code that walks a container (its values, a BTree's buckets, a folder's
children) loads each child with its own database round trip. When a
second child of the same recently read object misses the cache, the walk
is likely to go on: the next children are read in one query, a few at
first and twice as many each time the walk reaches past them, into the
shared cache, where the loads that follow find them.

A child loaded on its own (a lookup in a BTree, one item of a folder)
costs nothing more than noticing, with a substring search, which recent
state refers to it. Only a second miss among the same object's references
parses that state, and only with a pattern search for the 8-byte oids of
ZODB's persistent references (``SHORT_BINBYTES`` of length 8 in the
pickle): an oid found there by chance is read ahead for nothing, one
never found is simply loaded when asked for. Read-ahead only ever puts
into the cache states it proves current, like any load.

A walk goes on from one object to the next: a BTree bucket refers to
the next bucket after its values, so reading a bucket's values ahead
reads the next bucket too. An object read ahead in a walk starts where
that walk was (its children are read ahead from the first miss on, as
many at once as the walk had reached), instead of starting over at one
child at a time: a bucket of 30 values then costs one query, not four.

The object that refers to a missed one may never pass through here: a
bucket that lives in the ZODB connection's own cache (made or read there
earlier, as in a script that inserts, changes and then reads back) is
not loaded again, while its values, ghosts evicted from the shared cache,
are. Such misses are read ahead by oid instead: objects created together
get oids close together, so a second miss without a referrer that
follows the one before it closely in oid order reads the oids after it in
one query, a few at first and twice as many each time the run goes on
past either end of what it read (ZODB gives a commit's new objects their
oids bucket by bucket, the last bucket first: a walk in key order goes
down in oid order from one bucket to the next and up within each). An
oid read so that no longer exists, or whose object is not wanted, costs a
row in that query, never a wrong state.

Iterating a BTree is read ahead further, many buckets and their values
at a time, through the tree's inner nodes (see treewalk.py); what that
does not take on is read ahead as above.
"""
import collections

from ZODB.utils import p64

from .load import MAX_ID
from .treewalk import TreeWalks
from .treewalk import references


class _Referrer:
    """A recently read object and the oids it refers to, in order."""

    __slots__ = ('oids', 'requested', 'misses', 'batch')

    def __init__(self, oids):
        self.oids = oids
        #: Positions already read (or asked for) through this object.
        self.requested = bytearray(len(oids))
        self.misses = 0
        self.batch = ReadAhead.FIRST_BATCH


class ReadAhead:
    """Per storage instance (used under its load lock)."""

    #: How many of the last states read are searched for a missed oid.
    RECENT = 8
    #: How many parsed referrers are kept.
    REFERRERS = 8
    #: The first and the largest number of objects read ahead at once.
    FIRST_BATCH = 16
    MAX_BATCH = 500
    #: States longer than this are not searched, which bounds what a miss
    #: costs to a substring search in at most RECENT times this (the tree
    #: walks' bound too).
    MAX_SEARCHED = TreeWalks.MAX_SEARCHED
    #: Misses without a referrer this close in oid order make a run.
    RUN_GAP = 4

    def __init__(self, holds):
        #: holds(oid) -> whether the shared cache has an entry for oid.
        self._holds = holds
        self._recent = collections.deque(maxlen=self.RECENT)
        #: note((oid, state)): *oid* was read with *state* (from the cache
        #: or not). The deque's own append: this is called on every load.
        self.note = self._recent.append
        self._referrers = collections.OrderedDict()  # oid -> _Referrer
        #: oid -> (referrer, position), for the oids of parsed referrers.
        self._where = {}
        #: Referrers not yet parsed: oid -> misses seen among their oids.
        self._first_misses = {}
        #: Objects read ahead by a walk: oid -> the walk's batch size.
        self._walked = {}
        #: Walks through BTrees' buckets (see treewalk.py).
        self.trees = TreeWalks(holds, self.FIRST_BATCH, self.MAX_BATCH)
        self._forget_run()

    def _forget_run(self):
        #: The last miss without a referrer, the lowest and highest oid
        #: its run has asked for (None: no run), and the run's next batch
        #: size.
        self._last_alone = None
        self._run = None
        self._run_batch = self.FIRST_BATCH

    def forget_walks(self):
        """Start over at a new transaction (what the last one read ahead
        may have been changed or evicted since); the recent states stay,
        as hints to what refers to what."""
        self._referrers.clear()
        self._where.clear()
        self._first_misses.clear()
        self._walked.clear()
        self.trees.forget()
        self._forget_run()

    def along_with(self, oid):
        """The oids to read together with *oid*, which is not cached: a
        list starting with *oid*, or None to read it alone."""
        batch = self.trees.along_with(oid, self._recent)
        if batch is not None:
            return batch
        found = self._where.get(oid)
        if found is None:
            found = self._find_referrer(oid)
            if found is None:
                return self._along_in_run(oid)
            if found is False:
                return None
        referrer, pos = found
        referrer.misses += 1
        requested = referrer.requested
        if referrer.misses < 2 or requested[pos]:
            # The first child of an object read so far, or one read ahead
            # already that the cache could not keep: alone.
            requested[pos] = 1
            return None
        oids = referrer.oids
        holds = self._holds
        batch = [oid]
        requested[pos] = 1
        want = referrer.batch
        referrer.batch = min(want * 2, self.MAX_BATCH)
        for i in range(pos + 1, len(oids)):
            if len(batch) >= want:
                break
            if not requested[i]:
                requested[i] = 1
                other = oids[i]
                if other != oid and not holds(other):
                    batch.append(other)
        if len(batch) < 2:
            return None
        walked = self._walked
        if len(walked) > 4 * self.MAX_BATCH:
            walked.clear()
        for other in batch:
            walked[other] = want
        return batch

    def _along_in_run(self, oid):
        """*oid* missed and no recent state refers to it: the oids beside
        it when it goes on a run of such misses (see the module's
        documentation), else None."""
        last, self._last_alone = self._last_alone, oid
        want = self._run_batch
        if self._run is None:
            if last is None or not 0 < oid - last <= self.RUN_GAP:
                return None
            lo, hi = oid, oid + want - 1
        else:
            lo, hi = self._run
            if lo <= oid <= hi:
                return None  # asked for already: gone, or evicted since
            if hi < oid <= hi + self.RUN_GAP:
                lo, hi = hi + 1, hi + want
            elif lo - want <= oid < lo:
                lo, hi = lo - want, lo - 1
            else:
                self._run = None
                self._run_batch = self.FIRST_BATCH
                return None
        lo, hi = max(lo, 0), min(hi, MAX_ID)
        run = self._run or (lo, hi)
        self._run = (min(lo, run[0]), max(hi, run[1]))
        self._run_batch = min(want * 2, self.MAX_BATCH)
        holds = self._holds
        batch = [oid] + [other for other in range(lo, hi + 1)
                         if other != oid and not holds(other)]
        return batch if len(batch) > 1 else None

    def _find_referrer(self, oid):
        """``(referrer, position)`` of *oid* among the references of a
        recent state; False for the first miss among a state's references
        (nothing parsed yet); None when no recent state refers to it."""
        key = p64(oid)
        for parent, state in reversed(self._recent):
            if (parent == oid or len(state) > self.MAX_SEARCHED
                    or key not in state):
                continue
            if parent in self._referrers:
                continue  # parsed already, and oid is not among its refs
            walk = self._walked.pop(parent, None)
            if walk is not None:
                # Read ahead by a walk that goes on through it: no need
                # to wait for a second miss, nor to start small.
                found = self._parse(parent, state, oid)
                if found is not None:
                    found[0].misses = 1
                    found[0].batch = walk
                return found
            misses = self._first_misses.get(parent, 0) + 1
            if misses < 2:
                # The first miss among its references: remember it, but
                # parse nothing yet (a lookup reads one child only).
                self._first_misses[parent] = misses
                if len(self._first_misses) > 4 * self.REFERRERS:
                    del self._first_misses[next(iter(self._first_misses))]
                return False
            self._first_misses.pop(parent, None)
            return self._parse(parent, state, oid)
        return None

    def _parse(self, parent, state, oid):
        oids = references(state)
        referrer = _Referrer(oids)
        referrer.misses = 1   # the first miss, counted by _find_referrer
        where = self._where
        for pos, child in enumerate(oids):
            where.setdefault(child, (referrer, pos))
        self._referrers[parent] = referrer
        if len(self._referrers) > self.REFERRERS:
            _, old = self._referrers.popitem(last=False)
            for child in old.oids:
                if where.get(child, (None,))[0] is old:
                    del where[child]
        return where.get(oid)
