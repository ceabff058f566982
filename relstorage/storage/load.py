"""Reading objects: the current state through the shared cache, older
revisions straight from the database, and polling that moves an
instance's snapshot forward."""
import contextlib
import logging
import sys
import time

from ZODB.POSException import POSKeyError
from ZODB.POSException import ReadConflictError
from ZODB.utils import p64
from ZODB.utils import u64

from ..exceptions import CorruptRecord
from ..exceptions import RelStorageError

#: States a history-free instance keeps for conflict resolution.
SEEN_LIMIT = 10000

#: The largest oid or tid the databases' signed 64-bit columns hold.
MAX_ID = (1 << 63) - 1


def stored_id(oid):
    """*oid* (8 bytes) as the integer it is stored under; POSKeyError for
    one above MAX_ID, which no row can have (asking the database would
    fail on its type instead)."""
    ioid = int.from_bytes(oid, 'big')
    if ioid > MAX_ID:
        raise POSKeyError(oid)
    return ioid

log = logging.getLogger(__name__)


def _zodb_caller(skip):
    """The name of the function *skip* frames above the one asking, if it
    is ZODB's, else None. ZODB tells a storage instance nothing else of
    why it calls (a transaction ending, a connection closing)."""
    try:
        code = sys._getframe(skip + 1).f_code
    except ValueError:  # called from near the top of a program
        return None
    return code.co_name if 'ZODB' in code.co_filename else None


def _polled_as_transaction_ended():
    """Whether poll_invalidations was called by ZODB's
    Connection.afterCompletion (through newTransaction), which polls as
    each transaction ends so that invalidations apply early; a poll at
    open() or begin() is followed by reads, this one perhaps by nothing."""
    # 1: poll_invalidations, 2: newTransaction, 3: its caller
    return (_zodb_caller(2) == 'newTransaction'
            and _zodb_caller(3) == 'afterCompletion')


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
            self._poll(snapshot=self._seen is not None)
        return self._view_tid

    def _poll(self, snapshot):
        """Move the view to the newest commit; return the oids (ints)
        changed since the previous view, or None when they cannot be known.

        With *snapshot* the poll begins the snapshot that the reads until
        the next poll use, exactly at the view; otherwise the first read
        begins one, which may be newer than the view (see _as_of_view).
        Nothing changes until the poll has succeeded: if it fails (a lost
        connection, say), the next poll cannot know what changed in
        between and returns None, so ZODB invalidates everything."""
        started = self._metrics.clock()
        session = self._load_session()
        old = self._poll_base or self._view_tid
        unknown = self._poll_failed
        cache = self._cache
        fetch = self._fetch_changes
        if self._poll_base and not unknown:
            # This instance's own commits since its view are every change
            # there: the shared cache learns them without asking.
            own = self._own_changes  # oid, tid, oid, tid...
            cache.after_poll(self._view_tid, self._poll_base,
                             zip(own[0::2], own[1::2]), complete=True,
                             fetch_changes=fetch)
        del self._own_changes[:]
        # What was announced until now, this poll sees: forgotten, so that
        # it causes no second poll (and piles up nowhere while the polls
        # are forced, by this instance's own commits, say).
        session.commits_announced()
        self._poll_failed = True
        new = session.restart() if snapshot else session.poll()
        if old is None or unknown or new < old:
            # A first poll; or the changes since the last view are unknown,
            # or the database was emptied or replaced under us.
            if old is not None and new < old:
                cache.clear()
            cache.after_poll(None, new, (), fetch_changes=fetch)
            oids = () if old is None else None
        elif new == old:
            oids = ()
            if cache.p0 is None:
                # Nothing changed, but the cache was cleared: start its
                # change index here, or it would keep nothing until the
                # next commit moves the view.
                cache.after_poll(old, new, (), fetch_changes=fetch)
        else:
            # This instance's own commits are no invalidations for it, even
            # with others' commits in between: an object it wrote and
            # nobody wrote after has its own tid as its newest, and no
            # other change since the view can hide behind it (the commit
            # checked that the revision it replaced was the one read).
            own = self._own_tids
            oids = cache.changes_between(old, new, skip_tids=own)
            if oids is None:
                # Read in one statement with the newest tid, which may have
                # moved on since: no change can be missed in between.
                new, changes = session.poll_changes(old)
                cache.after_poll(old, new, changes, fetch_changes=fetch)
                oids = [oid for oid, tid in changes if tid not in own]
        if self._readahead is not None:
            # What was read ahead in the last transaction is of no use to
            # tell what to read ahead in the next.
            self._readahead.forget_walks()
        self._view_tid = new
        self._poll_base = None
        self._own_tids.clear()
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
        self._metrics.polled(started, oids)
        return oids

    def _fetch_changes(self, after_tid, upto_tid):
        return self._load_session().changes(after_tid, upto_tid)

    def poll_invalidations(self):
        with self._load_lock:
            interval = self._options.poll_interval
            if (interval and self._view_tid is not None
                    and not self._poll_forced
                    and time.monotonic() - self._last_poll < interval
                    and not self._load_session().commits_announced()):
                # Within the interval, and no commit announced (or a
                # database that announces none): keep the view.
                return []
            # History-free reads need a snapshot exactly at the view (the
            # revisions a newer one would hide are gone), except after the
            # poll that ZODB makes as a transaction ends: the connection
            # may stay idle for long, and must not hold a snapshot then.
            ending = _polled_as_transaction_ended()
            try:
                oids = self._poll(snapshot=self._seen is not None
                                  and not ending)
            except RelStorageError as e:
                if not ending:
                    raise
                # The transaction is over (committed, perhaps): an error
                # here would reach the application as the commit's, and a
                # retry would apply it twice. The next poll, as the next
                # transaction begins, tries again (and invalidates
                # everything, not knowing what changed meanwhile).
                log.warning('polling %s after a transaction ended failed '
                            '(the next transaction polls again): %s',
                            self._name, e)
                oids = None
        if oids is None:
            return None
        return [p64(oid) for oid in oids]

    def sync(self, force=True):
        """ZODB calls this just before poll_invalidations; the poll itself
        starts the new snapshot, so there is nothing to do here."""

    def afterCompletion(self):
        """Called by ZODB after a transaction ends (and when a connection
        closes): end the snapshot, so that an idle connection holds none
        (no PostgreSQL session "idle in transaction", no SQLite reader
        pinning the WAL).

        A connection that closes goes back to ZODB's pool, and whoever
        opens it next expects every commit made before: its next poll is
        a real one, whatever the poll-interval. Within the interval the
        instance would otherwise trust that no commit was announced, but
        a commit is visible before its announcement reaches a listener
        (PostgreSQL sends NOTIFY to the listening sessions after the
        COMMIT, from their own server processes): in a loop of commits,
        nearly half had not reached the listener when the COMMIT returned.
        """
        with self._load_lock:
            self._end_snapshot()
            if _zodb_caller(1) == 'close':
                self._poll_forced = True

    def _end_snapshot(self):
        if self._load is not None:
            try:
                self._load.end_snapshot()
            except Exception:  # noqa: BLE001 -- a lost connection; the
                # next poll reopens it
                log.debug('ending the snapshot of %s failed', self._name,
                          exc_info=True)

    @contextlib.contextmanager
    def _reading(self):
        """The load lock and the view for a read; a storage used directly
        (no transactions end its snapshots) ends the snapshot after it."""
        with self._load_lock:
            view = self._ensure_view()
            try:
                yield view
            finally:
                if self._is_root:
                    self._end_snapshot()

    def _as_of_view(self, session, ioid, tid, view):
        """The snapshot began after the poll and *ioid* changed (as *tid*)
        in between: the ``(state, tid)`` current at *view*. Without
        history that state is gone, and with history a pack since may
        have removed it (it was not current at the pack time): a
        ReadConflictError, which ZODB retries with a new view (as ZODB's
        own MVCC adapter does for a pack running under a reader)."""
        found = None
        if self._adapter.keep_history:
            found = session.load_before(ioid, view + 1)
        if found is None:
            error = ReadConflictError(
                'object 0x%x changed (transaction %016x) after this '
                'connection\'s view (%016x), and its state then is gone'
                % (ioid, tid, view),
                oid=p64(ioid),
                serials=(p64(tid), p64(view)))
            self._metrics.read_conflict(error)
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
            self._metrics.read_conflict(error)
            raise error

    # Current state

    def load(self, oid, version=''):
        # The hot path is a hit in the shared cache: kept to a few calls.
        ioid = int.from_bytes(oid, 'big')
        # Not ``with``: acquiring and releasing the lock through bound
        # methods costs half as much, on every hit.
        self._load_acquire()
        try:
            view = self._view_tid
            if view is None or self._is_root or self._poll_failed:
                view = self._ensure_view()
            cache = self._cache
            readahead = self._readahead
            hit = cache.get(ioid, view)
            if hit is not None:
                state, tid = hit
                seen = self._seen
                if seen is not None:
                    # Already kept (the same tid is the same state): a
                    # lookup, not the reordering of _remember, which was
                    # a sixth of a history-free read from the cache.
                    kept = seen.get(ioid)
                    if kept is None or kept[1] != tid:
                        self._remember(ioid, hit)
                if readahead is not None:
                    readahead.note((ioid, state))
                return state, tid.to_bytes(8, 'big')
            if ioid > MAX_ID:
                raise POSKeyError(oid)
            session = self._load_session()
            batch = (readahead.along_with(ioid) if readahead is not None
                     else None)
            if batch is None:
                state, tid = session.load_current(ioid)
            else:
                state, tid = self._load_along(session, batch, view)
            if tid is not None and tid > view:
                state, tid = self._as_of_view(session, ioid, tid, view)
            elif tid is None and not self._is_root:
                self._gone_since_view(session, ioid, view)
            if self._is_root:
                self._end_snapshot()
            if state is None:
                raise POSKeyError(oid)
            value = (state, tid)
            cache.store_many(((ioid, value),), view)
            self._remember(ioid, value)
            if readahead is not None:
                readahead.note((ioid, state))
            return state, p64(tid)
        finally:
            self._load_release()

    def _load_along(self, session, oids, view):
        """Read *oids* in one query into the shared cache; return the
        first one's ``(state, tid)``."""
        try:
            found = session.load_many(oids)
        except CorruptRecord:
            # A damaged row among those read ahead must not fail the load
            # of another: the error belongs to the load of that row.
            return session.load_current(oids[0])
        self._cache.store_many(found, view)
        return found.get(oids[0], (None, None))

    def getTid(self, oid):
        return self.load(oid)[1]

    def prefetch(self, oids):
        """Load the given objects into the shared cache in one query."""
        with self._reading() as view:
            cache = self._cache
            wanted = [u64(oid) for oid in oids]
            wanted = [oid for oid in wanted
                      if oid <= MAX_ID and not cache.serves(oid, view)]
            if not wanted:
                return
            session = self._load_session()
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
            self._cache.store_many(found, view)

    def _remember(self, oid, value):
        """History-free storages keep no old revisions, but conflict
        resolution needs the state a transaction started from: keep the
        states this instance read or committed until a poll reports them
        changed (ZODB keeps using an object it committed without loading
        it again), at most SEEN_LIMIT of them, the longest kept forgotten
        first; reading a kept state again does not move it. *value* is
        ``(state, tid)``, the very tuple the shared cache holds where it
        has one; a None state (a deletion) only forgets *oid*. (An
        OrderedDict: deleting a plain dict's first key, one at a time,
        makes each next search for it step over every key deleted before,
        5 us per state past the limit.)
        """
        seen = self._seen
        if seen is not None:
            seen.pop(oid, None)
            if value[0] is None:
                return
            seen[oid] = value
            if len(seen) > SEEN_LIMIT:
                seen.popitem(last=False)

    # Older revisions

    def _session_before(self, before, view):
        """The session that answers a loadBefore(*before*): the snapshot,
        unless *before* asks past the view while this instance has itself
        committed since (its snapshot cannot see that commit until the
        next poll): then the store session, between its transactions,
        where each statement reads the newest committed data. (A root
        storage's view is polled for every read; and mid-commit the store
        session may hold the commit's rows before they are committed.)"""
        if (before - 1 <= view or self._last_tid <= view or self._is_root
                or self._store is None or self._store.session.in_transaction):
            return self._load_session()
        return self._store

    def loadSerial(self, oid, serial):
        ioid, itid = stored_id(oid), u64(serial)
        if itid > MAX_ID:
            raise POSKeyError(oid, serial)
        seen = self._seen.get(ioid) if self._seen is not None else None
        if seen is not None and seen[1] == itid:
            self._metrics.loaded('instance')
            return seen[0]
        hit = self._cache.peek(ioid, itid)
        if hit is not None:
            self._metrics.loaded('shared_cache')
            return hit
        self._metrics.loaded('database')
        with self._load_lock:
            if self._tpc is not None:
                # Conflict resolution (at vote, or in undo) needs the newest
                # committed state, which the snapshot may not see yet.
                state, found = self._store_session().load_revision(ioid, itid)
            else:
                with self._reading():
                    state, found = self._load_session().load_revision(
                        ioid, itid)
        if state is None:
            raise POSKeyError(oid, serial)
        return state

    def loadBefore(self, oid, tid):
        with self._reading() as view:
            ioid = stored_id(oid)
            # Before a tid past the largest a column holds: the newest
            # revision (no revision is ever committed as MAX_ID itself).
            before = min(u64(tid), MAX_ID)
            self._metrics.loaded('database')
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
