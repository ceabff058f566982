"""Reading objects: the current state through the shared cache, older
revisions straight from the database, and polling that moves an
instance's snapshot forward."""
import time

from ZODB.POSException import POSKeyError
from ZODB.utils import p64
from ZODB.utils import u64

#: States a history-free instance keeps for conflict resolution.
SEEN_LIMIT = 10000


class Loader:
    """Mixin of RelStorage: load, loadSerial, loadBefore, prefetch, polling.

    Every database read of an instance goes through its load session under
    ``self._load_lock``, so one storage can be used from several threads.
    """

    # Snapshot handling

    def _load_session(self):
        if self._load is None:
            self._load = self._adapter.open_load_session()
        return self._load

    def _ensure_view(self):
        """The tid of the snapshot this instance reads from.

        A storage used directly (not through ZODB connections) reads the
        newest data on every call, as callers of a plain storage expect;
        an instance made by new_instance() keeps its snapshot until ZODB
        polls at the next transaction boundary.
        """
        if self._view_tid is None or self._is_root or self._poll_failed:
            self._poll()
        return self._view_tid

    def _poll(self):
        """Start a new snapshot; return the oids (ints) changed since the
        previous one, or None when they cannot be known.

        Nothing changes until the poll has succeeded: if it fails (a lost
        connection, say), the next poll cannot know what changed in
        between and returns None, so ZODB invalidates everything."""
        session = self._load_session()
        old = self._poll_base or self._view_tid
        unknown = self._poll_failed
        self._poll_failed = True
        new = session.restart()
        cache = self._cache
        fetch = self._fetch_changes
        if old is None or unknown or new < old:
            # A first poll; or the changes since the last view are unknown,
            # or the database was emptied or replaced under us.
            if old is not None and new < old:
                cache.clear()
            cache.after_poll(None, new, (), fetch_changes=fetch)
            oids = () if old is None else None
        elif new == old:
            oids = ()
        else:
            oids = cache.changes_between(old, new)
            if oids is None:
                changes = session.changes(old, new)
                cache.after_poll(old, new, changes, fetch_changes=fetch)
                oids = [oid for oid, _ in changes]
        self._view_tid = new
        self._poll_base = None
        self._last_poll = time.monotonic()
        self._poll_forced = False
        self._poll_failed = False
        seen = self._seen
        if seen:
            if oids is None:
                seen.clear()
            else:
                for oid in oids:
                    seen.pop(oid, None)
        return oids

    def _fetch_changes(self, after_tid, upto_tid):
        return self._load_session().changes(after_tid, upto_tid)

    def poll_invalidations(self):
        with self._load_lock:
            interval = self._options.poll_interval
            if (interval and self._view_tid is not None
                    and not self._poll_forced
                    and time.monotonic() - self._last_poll < interval):
                return []
            oids = self._poll()
        if oids is None:
            return None
        return [p64(oid) for oid in oids]

    def sync(self, force=True):
        """ZODB calls this just before poll_invalidations; the poll itself
        starts the new snapshot, so there is nothing to do here."""

    def afterCompletion(self):
        """Called by ZODB after a transaction ends; nothing to release
        beyond what the next poll replaces."""

    # Current state

    def load(self, oid, version=''):
        ioid = u64(oid)
        with self._load_lock:
            view = self._ensure_view()
            hit = self._cache.get(ioid, view)
            if hit is not None:
                state, tid = hit
                self._remember(ioid, tid, state)
                return state, p64(tid)
            state, tid = self._load_session().load_current(ioid)
            if state is None:
                raise POSKeyError(oid)
            self._cache.store(ioid, tid, state, view)
            self._remember(ioid, tid, state)
            return state, p64(tid)

    def getTid(self, oid):
        return self.load(oid)[1]

    def prefetch(self, oids):
        """Load the given objects into the shared cache in one query."""
        with self._load_lock:
            view = self._ensure_view()
            cache = self._cache
            wanted = [u64(oid) for oid in oids]
            wanted = [oid for oid in wanted if cache.get(oid, view) is None]
            if not wanted:
                return
            found = self._load_session().load_many(wanted)
            for oid, (state, tid) in found.items():
                if state is not None:
                    cache.store(oid, tid, state, view)

    def _remember(self, oid, tid, state):
        """History-free storages keep no old revisions, but conflict
        resolution needs the state a transaction started from: keep the
        states this instance read or committed until a poll reports them
        changed (ZODB keeps using an object it committed without loading
        it again), at most SEEN_LIMIT of them, the oldest forgotten first.
        """
        seen = self._seen
        if seen is not None:
            seen.pop(oid, None)
            if state is None:
                return
            seen[oid] = (tid, state)
            if len(seen) > SEEN_LIMIT:
                del seen[next(iter(seen))]

    # Older revisions

    def loadSerial(self, oid, serial):
        ioid, itid = u64(oid), u64(serial)
        seen = self._seen.get(ioid) if self._seen is not None else None
        if seen is not None and seen[0] == itid:
            return seen[1]
        hit = self._cache.peek(ioid, itid)
        if hit is not None:
            return hit
        with self._load_lock:
            if self._tpc is not None:
                # Conflict resolution (at vote, or in undo) needs the newest
                # committed state, which the snapshot may not see yet.
                state, found = self._store_session().load_revision(ioid, itid)
            else:
                self._ensure_view()
                state, found = self._load_session().load_revision(ioid, itid)
        if state is None:
            raise POSKeyError(oid, serial)
        return state

    def loadBefore(self, oid, tid):
        with self._load_lock:
            self._ensure_view()
            result = self._load_session().load_before(u64(oid), u64(tid))
            if result is None:
                # "No revision before tid" for an object that exists, but
                # an error for one the database has never heard of.
                if self._load_session().load_current(u64(oid))[1] is None:
                    raise POSKeyError(oid)
                return None
        state, start, end = result
        if state is None:
            # The revision current then records that the object was gone
            # (its creation undone, or deleted).
            raise POSKeyError(oid)
        return state, p64(start), (p64(end) if end is not None else None)
