"""Row locks taken at vote, and the short global commit lock.

Rows are locked in oid order so two committers can never wait for each
other in a cycle over the rows they change; readCurrent rows get shared
locks after that. The commit lock serialises only the choice of the
transaction id and the moment new rows become current.
"""
import time

from zope.interface import implementer

from ..exceptions import CommitLockTimeout
from ..exceptions import SchemaError
from ..exceptions import UnableToLockRows
from .session import in_list
from .components import ILocker
from .sql import SQL

#: Consecutive oids selected as a range rather than one by one.
MIN_RANGE = 3
#: Parameters per row-lock statement.
PARAMS_PER_LOCK = 500

#: The row-lock SELECT; its WHERE is a disjunction of oid ranges and
#: lists made per vote from the oids.
LOCK_ROWS = SQL('SELECT zoid, tid FROM {table} WHERE {where} '
                'ORDER BY zoid{clause}')


def lock_rows_sql(table, clause):
    """The row-lock SELECT on *table* with the lock *clause*, its
    ``{where}`` slot left to fill per statement."""
    return LOCK_ROWS.fill(table=table, clause=clause)


def runs(oids):
    """The sorted *oids* as ``[first, last]`` runs of consecutive values."""
    result = []
    last = None
    for oid in oids:
        if oid - 1 == last:
            result[-1][1] = oid
        else:
            result.append([oid, oid])
        last = oid
    return result


@implementer(ILocker)
class Locker:

    #: Appended to the row-lock SELECTs; empty where the database has a
    #: single writer and locking happened when the transaction began.
    exclusive_clause = ' FOR UPDATE'
    shared_clause = ' FOR SHARE'
    #: Runs of consecutive oids at least this long are selected as a
    #: range; at most max_ranges of them per statement (the parameter
    #: bound is the only one unless a database sets its own).
    min_range = MIN_RANGE
    max_ranges = PARAMS_PER_LOCK

    def singles_where(self, singles):
        """``(clause, params)`` selecting the oids *singles*."""
        return 'zoid IN %s' % in_list(singles), singles

    def singles_params(self, count):
        """How many parameters singles_where makes of *count* oids."""
        return count

    def is_lock_error(self, error):
        """Whether a driver error means "waited too long" or "deadlock"
        while locking rows; both mean the transaction may be retried."""
        return False

    def __init__(self, adapter, mover):
        """A subclass sets its lock clauses before calling this: the
        row-lock statements are built here, once."""
        self.adapter = adapter
        self.mover = mover
        if mover is not None:
            self.exclusive_sql = lock_rows_sql(mover.lock_table,
                                               self.exclusive_clause)
            self.shared_sql = lock_rows_sql(mover.lock_table,
                                            self.shared_clause)

    def lock_rows(self, session, store_oids, read_oids):
        """Lock rows; return ``{oid: current_tid}`` for all that exist."""
        current = {}
        for oids, template in ((sorted(store_oids), self.exclusive_sql),
                               (sorted(set(read_oids) - set(store_oids)),
                                self.shared_sql)):
            for chunk, sql, params in self.statements(oids, template):
                try:
                    current.update(session.fetchall(sql, params))
                except Exception as e:
                    if not self.is_lock_error(e):
                        raise
                    raise UnableToLockRows(
                        'could not lock %d object(s) among oids %s... of %s '
                        'within commit-lock-timeout (%ss): %s'
                        % (len(chunk), ', '.join('0x%x' % o for o in chunk[:5]),
                           self.adapter.describe(),
                           self.adapter.options.commit_lock_timeout,
                           str(e).strip().splitlines()[0])) from None
        return current

    def lock_statements(self, table, oids, clause):
        """``(oids, sql, params)`` selecting ``zoid, tid`` of the sorted
        *oids* of *table* with the lock *clause*, in as many statements
        as needed."""
        return self.statements(oids, lock_rows_sql(table, clause))

    def statements(self, oids, template):
        """lock_statements, its SELECTs being *template* with the WHERE
        filled in.

        Objects created together have consecutive oids: a run of them is
        selected as one range, two parameters instead of one per oid (a
        parameter costs a client-side quote on MySQL, and the server one
        lookup instead of many). The rows are those of *oids* exactly."""
        zoid_where, params, covered = [], [], []
        singles = []

        def statement():
            if singles:
                in_where, in_params = self.singles_where(singles)
                zoid_where.append(in_where)
                params.extend(in_params)
            sql = template.format(where=' OR '.join(zoid_where))
            return covered[:], sql, params[:]

        for first, last in runs(oids):
            if (last - first + 1 >= self.min_range
                    and len(zoid_where) < self.max_ranges):
                zoid_where.append('zoid BETWEEN %s AND %s')
                params += (first, last)
            else:
                singles.extend(range(first, last + 1))
            covered.extend(range(first, last + 1))
            if (len(params) + self.singles_params(len(singles))
                    >= PARAMS_PER_LOCK):
                yield statement()
                del zoid_where[:], params[:], covered[:], singles[:]
        if covered:
            yield statement()

    def hold_commit_lock(self, session, last_tid_sql):
        """Take the commit lock for the rest of the session's transaction;
        then run *last_tid_sql* and return its value."""
        raise NotImplementedError

    #: Called with the seconds each take_commit_lock waited (see
    #: watch_commit_lock); none unless metrics are recorded.
    commit_lock_observers = ()

    def watch_commit_lock(self, observer):
        """Have *observer(seconds)* called after every wait of a commit
        for the commit lock (take_commit_lock), taken or not."""
        self.commit_lock_observers += (observer,)

    def take_commit_lock(self, session, last_tid_sql):
        """hold_commit_lock() for a commit: the wait is told to the
        observers (see watch_commit_lock)."""
        observers = self.commit_lock_observers
        if not observers:
            return self.hold_commit_lock(session, last_tid_sql)
        started = time.perf_counter()
        try:
            return self.hold_commit_lock(session, last_tid_sql)
        finally:
            waited = time.perf_counter() - started
            for observer in observers:
                observer(waited)

    #: What try_commit_lock returns when the lock is taken.
    BUSY = object()

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        """Like hold_commit_lock, but waiting at most *wait* seconds (by
        default not at all): BUSY when another transaction holds the lock
        until then."""
        raise NotImplementedError

    def begin_with_commit_lock(self, session, last_tid_sql, wait=0):
        """Begin a transaction on *session* holding the commit lock,
        waiting at most *wait* seconds for it: the value of
        *last_tid_sql*, or BUSY (and no transaction)."""
        session.begin(self.adapter.store_begin_sql)
        last = self.try_commit_lock(session, last_tid_sql, wait)
        if last is self.BUSY:
            session.rollback_quietly()
            self.after_rollback(session)
        return last

    def release_commit_lock(self):
        """Statements that release the commit lock after COMMIT, for
        databases whose lock outlives the transaction."""
        return []

    def end_commit(self):
        """The statements that end a transaction holding the commit lock:
        COMMIT, and whatever must come just before or after it."""
        return [('COMMIT', ())] + self.release_commit_lock()

    def try_pack_lock(self, session):
        """Take the pack lock for the life of *session* (released when it
        closes, whatever happens); False when another pack holds it."""
        raise NotImplementedError

    def release_pack_lock(self, session):
        """Release the pack lock before *session* closes. Closing alone
        would do, but a server ends a closed connection asynchronously, so
        a pack started right after this one could still find it held."""

    def hold_schema_lock(self, session):
        """Wait (up to commit-lock-timeout) for the lock that processes
        creating the schema of an empty database take in turn, so that
        one creates it and the others find it made. Released by
        release_schema_lock, after the transaction ends. None where the
        transaction that creates the schema excludes the others already
        (SQLite's BEGIN IMMEDIATE)."""

    def schema_lock_timeout(self):
        return SchemaError(
            'another process has been creating the relstorage schema in %s '
            'for longer than commit-lock-timeout (%ss)'
            % (self.adapter.describe(),
               self.adapter.options.commit_lock_timeout))

    def release_schema_lock(self, session):
        """Release what hold_schema_lock took, if it outlives the
        transaction."""

    def after_rollback(self, session):
        """Release what a rollback does not (session-level locks)."""

    def timeout_error(self):
        return CommitLockTimeout(
            'could not take the commit lock of %s within '
            'commit-lock-timeout (%ss)'
            % (self.adapter.describe(), self.adapter.options.commit_lock_timeout))
