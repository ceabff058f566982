"""Reading objects: the current state through the shared cache, older
revisions straight from the database (the snapshot and its polling are
the view's, see view.py)."""
import struct

from ZODB.POSException import POSKeyError
from ZODB.POSException import ReadConflictError
from ZODB.utils import p64
from ZODB.utils import u64

from ..exceptions import CorruptRecord

_ID = struct.Struct('>Q')
#: ``(int,)`` of an 8-byte oid or tid, and the 8 bytes of an int: a third
#: faster than int.from_bytes and int.to_bytes, on every load.
oid_int = _ID.unpack
tid_bytes = _ID.pack

#: The largest oid or tid the databases' signed 64-bit columns hold.
MAX_ID = (1 << 63) - 1


def stored_id(oid):
    """*oid* (8 bytes) as the integer it is stored under; POSKeyError for
    one above MAX_ID, or not 8 bytes long, which no row can have (asking
    the database would fail on its type instead)."""
    try:
        ioid = oid_int(oid)[0]
    except struct.error:
        raise POSKeyError(oid) from None
    if ioid > MAX_ID:
        raise POSKeyError(oid)
    return ioid


class Loader:
    """load, loadSerial, loadBefore, prefetch and getTid of one storage
    instance, reading through its *view* (see view.View) and the shared
    *cache*; *commit* (see tpc.Commit) lends its store session to reads
    that must see newer data than the snapshot. History-free, the view's
    remembered states (view.RecentStates) serve conflict resolution."""

    def __init__(self, view, cache, readahead, metrics, keep_history,
                 commit):
        self.view = view
        self.cache = cache
        self.remembered = view.remembered
        self.remembers = view.remembered.remembers
        self.remembered_get = view.remembered.get
        self.readahead = readahead
        self.metrics = metrics
        self.keep_history = keep_history
        self.commit = commit

    def _as_of_view(self, session, ioid, tid, view):
        """The snapshot began after the poll and *ioid* changed (as *tid*)
        in between: the ``(state, tid)`` current at *view*. Without
        history that state is gone, and with history a pack since may
        have removed it (it was not current at the pack time): a
        ReadConflictError, which ZODB retries with a new view (as ZODB's
        own MVCC adapter does for a pack running under a reader)."""
        found = None
        if self.keep_history:
            found = session.load_before(ioid, view + 1)
        if found is None:
            error = ReadConflictError(
                'object 0x%x changed (transaction %016x) after this '
                'connection\'s view (%016x), and its state then is gone'
                % (ioid, tid, view),
                oid=p64(ioid),
                serials=(p64(tid), p64(view)))
            self.metrics.read_conflict(error)
            raise error
        return found[0], found[1]

    def _gone_since_view(self, session, ioid, view):
        """*ioid* has no row in a snapshot that began after the view (the
        first read after a poll begins it): a pack may have removed it in
        between, while the view still reaches it (garbage collected once
        unreachable, which this view cannot know). A ReadConflictError,
        which ZODB retries with a new view, as ZODB's own MVCC adapter
        does for a pack running under a reader; a POSKeyError only when
        the snapshot is the view's."""
        newest = session.snapshot_tid()
        if newest > view:
            error = ReadConflictError(
                'object 0x%x is gone from the database since this '
                'connection\'s view (%016x; a pack since?)' % (ioid, view),
                oid=p64(ioid))
            self.metrics.read_conflict(error)
            raise error

    # Current state

    def load(self, oid, version='', _locked=False):
        snapshot = self.view
        if not (snapshot.fresh or _locked):
            # A storage used directly, from any thread, or an instance
            # before its first poll: under the lock, at a view made sure.
            with snapshot.lock:
                snapshot.ensure()
                return self.load(oid, version, True)
        # Else an instance of a ZODB connection within a transaction: one
        # thread uses it, and its view stays until the next poll (in that
        # thread too), so its reads need no lock; the shared cache has its
        # own. A lock taken and released on each hit was a seventh of the
        # storage's part of a hot read.
        view = snapshot.tid
        # The hot path is a hit in the shared cache: kept to a few calls.
        try:
            ioid = oid_int(oid)[0]
        except struct.error:
            raise POSKeyError(oid) from None
        hit = self.cache.get(ioid, view)
        if hit is None:
            return self._load_missed(oid, ioid, view)
        state, tid = hit
        if self.remembers:
            # Already remembered (the same tid is the same state): a
            # lookup, not the reordering of remember(), which was a sixth
            # of a history-free read from the cache.
            known = self.remembered_get(ioid)
            if known is None or known[1] != tid:
                self.remembered.remember(ioid, hit)
        readahead = self.readahead
        if readahead is not None:
            readahead.note((ioid, state))
        return state, tid_bytes(tid)

    def _load_missed(self, oid, ioid, view):
        """load() of an object the shared cache does not serve at
        *view*: read from the database (and read ahead)."""
        if ioid > MAX_ID:
            raise POSKeyError(oid)
        snapshot = self.view
        readahead = self.readahead
        session = snapshot.session()
        batch = (readahead.along_with(ioid) if readahead is not None
                 else None)
        if batch is None:
            state, tid = session.load_current(ioid)
        else:
            state, tid = self._load_along(session, batch, view)
        if tid is not None and tid > view:
            state, tid = self._as_of_view(session, ioid, tid, view)
        elif tid is None and not snapshot.is_root:
            self._gone_since_view(session, ioid, view)
        if snapshot.is_root:
            snapshot.end_snapshot()
        if state is None:
            raise POSKeyError(oid)
        value = (state, tid)
        self.cache.store_many(((ioid, value),), view)
        self.remembered.remember(ioid, value)
        if readahead is not None:
            readahead.note((ioid, state))
        return state, p64(tid)

    def _load_along(self, session, oids, view):
        """Read *oids* in one query into the shared cache; return the
        first one's ``(state, tid)``."""
        try:
            found = session.load_many(oids)
        except CorruptRecord:
            # A damaged row among those read ahead must not fail the load
            # of another: the error belongs to the load of that row.
            return session.load_current(oids[0])
        self.cache.store_many(found, view)
        first = found.get(oids[0], (None, None))
        trees = self.readahead.trees
        while trees.expecting:
            # A walk through a tree looks at what was read; it may need
            # the next level of the tree's nodes.
            more = trees.arrived(found)
            if not more:
                break
            try:
                found = session.load_many(more)
            except CorruptRecord:
                trees.forget()
                break
            self.cache.store_many(found, view)
        return first

    def getTid(self, oid):
        return self.load(oid)[1]

    def prefetch(self, oids):
        """Load the given objects into the shared cache in one query."""
        with self.view.reading() as view:
            cache = self.cache
            wanted = [u64(oid) for oid in oids]
            wanted = [oid for oid in wanted
                      if oid <= MAX_ID and not cache.serves(oid, view)]
            if not wanted:
                return
            session = self.view.session()
            try:
                found = session.load_many(wanted)
            except CorruptRecord:
                # A hint: a damaged row fails its own load, not this.
                found = {}
                for oid in wanted:
                    try:
                        found[oid] = session.load_current(oid)
                    except CorruptRecord:
                        continue
            cache.store_many(found, view)

    # Older revisions

    def _session_before(self, before, view):
        """The session that answers a loadBefore(*before*): the snapshot,
        unless *before* asks past the view while this instance has itself
        committed since (its snapshot cannot see that commit until the
        next poll): then the store session, between its transactions,
        where each statement reads the newest committed data. (A root
        storage's view is polled for every read; and mid-commit the store
        session may hold the commit's rows before they are committed.)"""
        store = self.commit.session
        if (before - 1 <= view or self.view.last_tid <= view
                or self.view.is_root or store is None
                or store.committing):
            return self.view.session()
        return store

    def loadSerial(self, oid, serial):
        ioid, itid = stored_id(oid), u64(serial)
        if itid > MAX_ID:
            raise POSKeyError(oid, serial)
        seen = self.remembered.get(ioid)
        if seen is not None and seen[1] == itid:
            self.metrics.loaded('instance')
            return seen[0]
        hit = self.cache.peek(ioid, itid)
        if hit is not None:
            self.metrics.loaded('shared_cache')
            return hit
        self.metrics.loaded('database')
        view = self.view
        with view.lock:
            if self.commit.tpc is not None:
                # Conflict resolution (at vote, or in undo) needs the newest
                # committed state, which the snapshot may not see yet.
                state, found = self.commit.store_session().load_revision(
                    ioid, itid)
            else:
                with view.reading():
                    state, found = view.session().load_revision(ioid, itid)
        if state is None:
            raise POSKeyError(oid, serial)
        return state

    def loadBefore(self, oid, tid):
        with self.view.reading() as view:
            ioid = stored_id(oid)
            # Before a tid past the largest a column holds: the newest
            # revision (no revision is ever committed as MAX_ID itself).
            before = min(u64(tid), MAX_ID)
            self.metrics.loaded('database')
            session = self._session_before(before, view)
            result = session.load_before(ioid, before)
            if result is None:
                # "No revision before tid" for an object that exists, but
                # an error for one the database has never heard of.
                if session.load_current(ioid)[1] is None:
                    raise POSKeyError(oid)
                return None
        state, start, end = result
        if state is None:
            # The revision current then records that the object was gone
            # (its creation undone, or deleted).
            raise POSKeyError(oid)
        return state, p64(start), (p64(end) if end is not None else None)
