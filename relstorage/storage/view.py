"""An instance's view of the database: the snapshot it reads from, the load
session that holds it, and the polls that move it forward.

Every database read of an instance goes through its view's load session.
A storage used directly reads under the view's lock, so that several
threads may share it; an instance made for a ZODB connection is used by
that connection's thread alone, and between polls its loads take no lock
(see Loader.load).
"""
import contextlib
import logging
import threading
import time
from collections import OrderedDict

from ZODB.utils import p64

from ..exceptions import RelStorageError
from ..exceptions import StaleDatabase
from .callers import called_by_zodb
from .callers import zodb_polls_next

log = logging.getLogger(__name__)

#: States a history-free instance remembers for conflict resolution.
SEEN_LIMIT = 10000


class RecentStates(OrderedDict):
    """History-free: the old revisions are gone from the database, but
    conflict resolution needs the state a transaction started from.
    Remembers the states this instance read or committed, ``oid -> (state,
    tid)``, until a poll reports them changed (ZODB goes on using an object
    it committed without loading it again), at most SEEN_LIMIT of them,
    the longest remembered forgotten first; reading a remembered state
    again does not move it. (An OrderedDict: deleting a plain dict's first
    key, one at a time, makes each next search for it step over every key
    deleted before, 5 us per state past the limit.)"""

    #: Whether states are remembered (the load path tests this once per
    #: hit).
    remembers = True

    def remember(self, oid, value):
        """Keep *value*, ``(state, tid)``, the very tuple the shared cache
        holds where it has one; a None state (a deletion) only forgets
        *oid*."""
        self.pop(oid, None)
        if value[0] is None:
            return
        self[oid] = value
        if len(self) > SEEN_LIMIT:
            self.popitem(last=False)

    def remember_many(self, values):
        """remember() each ``(oid, (state, tid))`` of *values*."""
        remember = self.remember
        for oid, value in values:
            remember(oid, value)

    def forget(self, oids):
        """A poll found *oids* changed (None: it cannot tell what)."""
        if not self:
            return
        if oids is None:
            self.clear()
        else:
            pop = self.pop
            for oid in oids:
                pop(oid, None)


class NoStates:
    """History-preserving: every revision stays in the database, where
    conflict resolution reads it; nothing is remembered."""

    __slots__ = ()
    remembers = False

    def get(self, oid, default=None):
        return default

    def remember(self, oid, value):
        pass

    def remember_many(self, values):
        pass

    def forget(self, oids):
        pass

    def clear(self):
        pass

    def __len__(self):
        return 0


def remembered_states(keep_history):
    """The states an instance remembers in its mode."""
    return NoStates() if keep_history else RecentStates()


class Seen:
    """What the instances of one storage have seen of its database: the
    newest tid any of them polled or committed. A poll that finds an
    older one has met a database that lost transactions (a failover to a
    standby that had not received them, a restore from a backup), unless
    this storage emptied it itself (zap_all, which starts it again)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tid = 0
        #: How many times this storage emptied the database.
        self.zaps = 0

    def emptied(self):
        with self.lock:
            self.tid = 0
            self.zaps += 1

    def saw(self, tid):
        with self.lock:
            if tid > self.tid:
                self.tid = tid

    def went_back(self, tid, floor):
        """The database's newest is *tid*, read by a poll that began when
        the newest seen was *floor*: the newest this storage has seen if
        both are newer (the first to find the loss), else None. (Only
        what was seen before the poll began counts: a commit or another
        instance's poll that ends while this poll runs may be newer
        than the snapshot this poll reads.)"""
        with self.lock:
            if not 0 < tid < min(floor, self.tid):
                return None
            lost, self.tid = self.tid, tid
            return lost


class View:
    """The snapshot one storage instance reads from, and its polling.

    *tid* is the view: the newest commit this instance sees. The poll
    that begins a ZODB transaction begins its snapshot exactly at the view
    (see poll_invalidations); *exact* (history-free) makes every other
    poll do so too, since the revisions a newer snapshot would hide are
    gone. *remembered* are the
    instance's remembered states (see RecentStates), forgotten as polls find
    them changed. A root storage (*is_root*, used directly rather than
    through ZODB connections) polls before every read.
    """

    def __init__(self, adapter, cache, remembered, readahead, metrics, options,
                 name, is_root, seen):
        self.adapter = adapter
        #: Shared by the instances of one storage (see Seen).
        self.seen = seen
        self.zaps = seen.zaps
        self.cache = cache
        self.remembered = remembered
        self.exact = remembered.remembers
        self.readahead = readahead
        self.metrics = metrics
        self.poll_interval = options.poll_interval
        self.revert_when_stale = options.revert_when_stale
        #: Polls through read-only replicas may answer older than this
        #: process's own commits (its own changes cover them meanwhile).
        self.polls_may_lag = adapter.polls_may_lag
        self.name = name
        self.is_root = is_root
        self.lock = threading.RLock()
        #: The load session, opened at the first read (see session()).
        self.load = None
        self.tid = None
        #: Whether reads may use tid as it is, without a poll first.
        self.fresh = False
        #: Where the next poll may start instead of tid: the tid of this
        #: instance's own last commit, when nothing else was committed
        #: between tid and it (own changes are not invalidations).
        self.poll_base = None
        self.own_changes = []
        #: The tids of this instance's own commits since its view: their
        #: changes are no invalidations for it, whatever else committed.
        self.own_tids = set()
        #: The tid of this instance's own last commit.
        self.last_tid = 0
        self.last_poll = 0.0
        self.poll_forced = False
        self.poll_failed = False

    def session(self):
        """The load session, opened if need be."""
        if self.load is None:
            self.load = self.adapter.open_load_session()
        return self.load

    def release(self):
        """Close the load session (reopened by the next read)."""
        session, self.load = self.load, None
        if session is not None:
            session.close()

    def ensure(self):
        """The tid of the snapshot this instance reads from.

        A storage used directly (not through ZODB connections) reads the
        newest data on every call, as callers of a plain storage expect;
        an instance made by new_instance() keeps its snapshot until ZODB
        polls at the next transaction boundary.
        """
        if not self.fresh:
            self.poll(snapshot=self.exact)
        return self.tid

    def poll(self, snapshot):
        """Move the view to the newest commit; return the oids (ints)
        changed since the previous view, or None when they cannot be known.

        With *snapshot* the poll begins the snapshot that the reads until
        the next poll use, exactly at the view; otherwise the first read
        begins one, which may be newer than the view (see
        Loader._as_of_view). Nothing changes until the poll has succeeded:
        if it fails (a lost connection, say), the next poll cannot know
        what changed in between and returns None, so ZODB invalidates
        everything."""
        started = self.metrics.clock()
        session = self.session()
        old = self.poll_base or self.tid
        unknown = self.poll_failed
        cache = self.cache
        fetch = self.fetch_changes
        if self.poll_base and not unknown:
            # This instance's own commits since its view are every change
            # there: the shared cache learns them without asking.
            own = self.own_changes  # oid, tid, oid, tid...
            cache.after_poll(self.tid, self.poll_base,
                             zip(own[0::2], own[1::2]), complete=True,
                             fetch_changes=fetch)
        del self.own_changes[:]
        # What was announced until now, this poll sees: forgotten, so that
        # it causes no second poll (and piles up nowhere while the polls
        # are forced, by this instance's own commits, say).
        session.commits_announced()
        self.poll_failed = True
        self.fresh = False
        # What the database must show at least, unless it lost
        # transactions: what was seen before this poll began.
        floor = self.seen.tid
        own = max(old or 0, 0 if self.polls_may_lag else self.last_tid)
        new = session.restart() if snapshot else session.poll()
        self.check_not_behind(new, own, floor)
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
            own = self.own_tids
            oids = cache.changes_between(old, new, skip_tids=own)
            if oids is None:
                # Read in one statement with the newest tid, which may have
                # moved on since: no change can be missed in between.
                new, changes = session.poll_changes(old)
                cache.after_poll(old, new, changes, fetch_changes=fetch)
                oids = [oid for oid, tid in changes if tid not in own]
        if self.readahead is not None:
            # What was read ahead in the last transaction is of no use to
            # tell what to read ahead in the next.
            self.readahead.forget_walks()
        self.tid = new
        self.poll_base = None
        self.own_tids.clear()
        self.last_poll = time.monotonic()
        self.poll_forced = False
        self.poll_failed = False
        self.fresh = not self.is_root
        self.remembered.forget(oids)
        self.seen.saw(new)
        self.metrics.polled(started, oids)
        return oids

    def check_not_behind(self, new, own, floor):
        """The database's newest tid is *new*; before the poll that read
        it began, this instance had seen *own* (its view, or its own last
        commit) and the storage *floor* (see Seen.went_back). A database
        older than what this storage has seen lost the
        transactions in between (see Seen): no cache may serve them, so
        the shared cache and the remembered states are dropped, and the poll
        after this one invalidates every object (the poll counts as
        failed); an instance that had seen them says so with
        StaleDatabase, once, since no later poll can tell that they ever
        were (new commits soon give the database newer tids than theirs).
        A database that is empty (0) was emptied, which loses nothing
        that anyone can be served."""
        if self.zaps != self.seen.zaps:
            # This storage emptied the database since this instance's
            # last poll: its view is of a database that is gone.
            self.zaps = self.seen.zaps
            return
        lost = self.seen.went_back(new, floor)
        if lost is not None:
            self.cache.clear()
            log.error(
                '%s has gone back in time: its newest transaction is %016x, '
                'but %016x was seen; the transactions after %016x were lost '
                '(a failover to a standby that had not received them, or a '
                'restore); every cached state of them was dropped',
                self.name, new, lost, new)
        if not 0 < new < own:
            return
        self.remembered.forget(None)
        self.tid = new
        self.poll_base = None
        del self.own_changes[:]
        self.own_tids.clear()
        self.last_tid = 0
        if not self.revert_when_stale:
            raise StaleDatabase(
                '%s has gone back in time: its newest transaction is %016x, '
                'but this connection saw %016x; the transactions after '
                '%016x were lost (a failover to a standby that had not '
                'received them?); the next transaction reads what the '
                'database has now' % (self.name, new, own, new))

    def fetch_changes(self, after_tid, upto_tid):
        return self.session().changes(after_tid, upto_tid)

    def poll_invalidations(self):
        # (Connection.afterCompletion polls, through newTransaction, so
        # that invalidations apply early; a poll at open() or begin() is
        # followed by reads, this one perhaps by nothing.)
        ending = called_by_zodb('newTransaction', 'afterCompletion')
        with self.lock:
            interval = self.poll_interval
            if (interval and self.tid is not None
                    and not self.poll_forced
                    and time.monotonic() - self.last_poll < interval
                    and not self.session().commits_announced()):
                # Within the interval, and no commit announced (or a
                # database that announces none): keep the view (and send
                # the end of the snapshot that was to go with this poll).
                if ending:
                    self.end_snapshot()
                return []
            # The poll begins the snapshot the transaction's reads use,
            # exactly at the view: history-free, the revisions a newer one
            # would hide are gone; with history, a pack running meanwhile
            # may remove them too (a pack to now removes what was current
            # at the view and changed since), whereas the database keeps
            # for a snapshot already begun the rows deleted after it. Not
            # after the poll that ZODB makes as a transaction ends: the
            # connection may stay idle for long, and must not hold a
            # snapshot then.
            try:
                oids = self.poll(snapshot=not ending)
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
                            self.name, e)
                self.end_snapshot()  # (if its end was to go with the poll)
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
        with self.lock:
            # A connection of implicit transactions polls next: the
            # snapshot's end goes with that poll, in one round trip.
            self.end_snapshot(now=not zodb_polls_next())
            if called_by_zodb('close'):
                self.poll_forced = True

    def end_snapshot(self, now=True):
        if self.load is not None:
            try:
                self.load.end_snapshot(now)
            except Exception:  # noqa: BLE001 -- a lost connection; the
                # next poll reopens it
                log.debug('ending the snapshot of %s failed', self.name,
                          exc_info=True)

    def end_snapshot_now(self):
        """end_snapshot(), taking the lock (from another part)."""
        with self.lock:
            self.end_snapshot()

    @contextlib.contextmanager
    def reading(self):
        """The lock and the view for a read; a storage used directly (no
        transactions end its snapshots) ends the snapshot after it."""
        with self.lock:
            view = self.ensure()
            try:
                yield view
            finally:
                if self.is_root:
                    self.end_snapshot()

    def read(self, fetch):
        """``fetch(load session)``, read in this instance's snapshot."""
        with self.reading():
            return fetch(self.session())

    def newest_tid(self):
        """The newest tid this instance knows of: its view, or its own
        last commit (a root storage asks the database first)."""
        if self.is_root:
            # Commits happen through instances; ask the database.
            with self.reading():
                pass
        return max(self.last_tid, self.tid or 0)

    def after_commit(self, tid, rows, previous=None, serials=None,
                     checked=True):
        """This instance committed *rows* (``(oid, prev_tid, state)``) as
        *tid*. *previous*: the newest tid before this commit, if known;
        *serials*: oid -> tid for rows that keep their own (copies);
        *checked*: every row was checked against the revision this
        instance read (no restore, no undo), so no other change of those
        objects since the view can hide behind this commit."""
        self.last_tid = tid
        self.poll_forced = True
        if not self.polls_may_lag:
            # (From replicas a poll may answer older than this commit for
            # a while: only what polls answered counts there.)
            self.seen.saw(tid)
        cache = self.cache
        # One (state, tid) tuple per object, held by both the shared cache
        # and the remembered states.
        if serials:
            committed = [(oid, (state, serials[oid]))
                         for oid, _, state in rows]
        else:
            committed = [(oid, (state, tid)) for oid, _, state in rows]
        with self.lock:
            cache.store_committed_many(committed)
            if checked:
                self.own_tids.add(tid)
            self.remembered.remember_many(committed)
            base = self.poll_base or self.tid
            if base is not None and previous == base:
                self.poll_base = tid
                # What changed between the view and this commit: exactly
                # these rows; the next poll tells the shared cache, so
                # that it serves them. Flat (oid, tid, oid, tid...): ints,
                # which the garbage collector does not count, where a
                # tuple per object would live until that poll.
                own = self.own_changes
                for oid, value in committed:
                    own.append(oid)
                    own.append(value[1])
            else:
                self.poll_base = None
                del self.own_changes[:]

    def forget_all(self):
        """The database was emptied (zap_all): no view, no own commits."""
        self.seen.emptied()
        with self.lock:
            self.zaps = self.seen.zaps
            self.tid = self.poll_base = None
            self.fresh = False
            del self.own_changes[:]
            self.own_tids.clear()
            self.last_tid = 0
