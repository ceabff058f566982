"""A thin wrapper around one DB-API connection.

All SQL in relstorage is written with ``%s`` placeholders; values always
travel as parameters. Drivers with another paramstyle translate the
statement once (``Session.translate``) and cache it.
"""
import contextlib
import logging
import threading

from zope.interface import implementer

from ..exceptions import DatabaseDisconnected
from ..exceptions import DatabaseFull
from ..exceptions import PermissionDenied
from .interfaces import ISession

log = logging.getLogger(__name__)


@implementer(ISession)
class Session:
    """One connection and one cursor, in explicit-transaction mode.

    Subclasses may override ``translate``, ``table_exists`` and, where the
    driver can send several statements at once, ``execute_script`` and the
    deferral of transaction verbs (``defers_verbs``).
    """

    begin_sql = 'BEGIN'
    #: When true, BEGIN (and a ROLLBACK directly followed by BEGIN) are
    #: sent together with the next statement instead of on their own,
    #: saving a round trip each.
    defers_verbs = False
    #: The replica-conf or ro-replica-conf server it is connected to
    #: (None: the one the adapter's own parameters name), the server
    #: list's generation when it connected, and the newest tid a load
    #: session saw on it (see replicas).
    server = None
    generation = 0
    verified = 0
    #: Whether each fetch of a stream's rows is a round trip (the server
    #: sends the next rows when asked), rather than a read of what it
    #: sends unasked.
    fetches_ask_server = False
    #: Whether the database tells this session of others' commits
    #: (commits_announced), and what this session sends with each of its
    #: own commits to tell the others.
    hears_commits = False
    commit_announcements = ()

    def __init__(self, adapter, conn):
        self.adapter = adapter
        self.conn = conn
        self.cursor = conn.cursor()
        self.in_transaction = False
        # A session may be shared by threads (a storage used directly, not
        # through ZODB connections); a statement and the fetch of its
        # results must not interleave with another thread's.
        self.lock = threading.RLock()
        #: Transaction verbs waiting to go out with the next statement.
        self.pending = ''
        #: Statements (or scripts) sent to the server: round trips.
        self.round_trips = 0
        #: Whether a session-level commit lock may be held (MySQL).
        self.holds_commit_lock = False
        #: Callables run when the session closes (releasing file locks).
        self.on_close = []
        #: The kind of work the session does now (one of traffic.KINDS),
        #: and what it sent for each (see count_round_trip).
        self.kind = 'other'
        self.sent = adapter.traffic.opened()

    def describe(self):
        return self.adapter.describe(self.server)

    def count_round_trip(self, statements=1):
        """Count one message sent (its answer waited for) carrying
        *statements*, as work of the session's kind. (Under the session's
        lock.)"""
        self.round_trips += 1
        counts = self.sent[self.kind]
        counts[0] += 1
        counts[1] += statements

    def commits_announced(self):
        """Whether another session committed since the last call (see
        ILoadSession.commits_announced); None: this session is not told
        of commits."""
        return None

    # Statement execution

    def translate(self, stmt):
        return stmt

    @contextlib.contextmanager
    def guarded(self):
        """Turn the driver's "connection lost" errors into
        DatabaseDisconnected, naming the database."""
        try:
            yield
        except DatabaseDisconnected:
            raise
        except Exception as e:
            self.translate_error(e)
            raise
        except BaseException:
            self.interrupted()
            raise

    def translate_error(self, e):
        """Raise what a driver error *e* means to the storage, if it means
        more than itself (a lost connection, a missing privilege)."""
        if self.is_permission_error(e):
            raise PermissionDenied(
                'the database user may not do this in the %s: %s (a '
                'user that may only read needs read-only true)'
                % (self.describe(),
                   str(e).strip().splitlines()[0])) from e
        if self.is_full_error(e):
            raise DatabaseFull(
                'the %s has no room left: %s; nothing of this transaction '
                'was committed' % (self.describe(),
                                   str(e).strip().splitlines()[0])) from e
        if self.is_disconnect(e):
            self.in_transaction = False
            self.pending = ''
            raise DatabaseDisconnected(
                'lost the connection to the %s: %s'
                % (self.describe(),
                   str(e).strip().splitlines()[0] if str(e).strip()
                   else type(e).__name__)) from e

    # What the driver's errors mean (each database's session says).

    def is_disconnect(self, error):
        """Whether a driver *error* means the connection is gone."""
        return False

    def is_permission_error(self, error):
        """Whether a driver *error* means the user lacks a privilege."""
        return False

    def is_full_error(self, error):
        """Whether a driver *error* means the database has no room left
        (a tablespace or quota full)."""
        return False

    def missing_create_privilege(self, error):
        """What the user lacks to create the schema, and how to give it,
        after the driver *error* refused it (this session's transaction
        rolled back)."""
        return ('%s; the user needs the privilege to create tables there '
                '(the database\'s guide shows the statements)'
                % first_line(error))

    def execute(self, stmt, params=()):
        # The hot path: errors are translated inline, without a context
        # manager's cost (the results are fetched with the statement, so
        # fetching them cannot lose the connection).
        with self.lock:
            cursor = self.cursor
            if cursor is None:
                self.lost()
            if self.pending:
                stmt = self.pending + self.translate(stmt)
                self.pending = ''
            else:
                stmt = self.translate(stmt)
            self.count_round_trip(stmt.count('; ') + 1)
            try:
                cursor.execute(stmt, params)
            except Exception as e:
                self.translate_error(e)
                raise
            except BaseException:
                self.interrupted()
                raise
        return self.cursor

    def interrupted(self):
        """A statement was interrupted (the greenlet waiting for it
        killed, a KeyboardInterrupt): the connection is somewhere in the
        middle of it, so it is closed, and the server ends its session
        (rolling its transaction back, releasing its locks); the next use
        finds it lost, and a reconnect reopens it."""
        log.debug('a statement on %s was interrupted; closing its '
                  'connection', self.describe())
        self.in_transaction = False
        self.pending = ''
        self.close()

    def live_cursor(self):
        """The cursor; DatabaseDisconnected when the session was closed."""
        if self.cursor is None:
            self.lost()
        return self.cursor

    def lost(self):
        """Raise DatabaseDisconnected for a session that was closed (its
        connection lost and not reopened): a reconnect at the next
        boundary reopens it, as for any lost connection."""
        self.in_transaction = False
        self.pending = ''
        raise DatabaseDisconnected(
            'the connection to the %s was lost and is not open'
            % self.describe())

    def flush(self):
        """Send deferred transaction verbs now."""
        with self.lock, self.guarded():
            if self.pending:
                cursor = self.live_cursor()
                self.count_round_trip(self.pending.count('; '))
                cursor.execute(self.pending)
                self.pending = ''

    #: Whether the driver's executemany() sends each row's statement in
    #: a message of its own (psycopg2), rather than all in one message or
    #: a pipeline of them.
    executes_many_one_by_one = False

    def executemany(self, stmt, seq):
        seq = list(seq)
        with self.lock, self.guarded():
            self.flush()
            if not seq:
                return  # (the drivers send nothing)
            if self.executes_many_one_by_one:
                for _ in seq:
                    self.count_round_trip()
            else:
                self.count_round_trip(len(seq))
            self.live_cursor().executemany(self.translate(stmt), seq)

    def execute_script(self, statements):
        """Run ``[(stmt, params)]`` in order; drivers that can send them in
        one message override this."""
        with self.lock:
            for stmt, params in statements:
                self.execute(stmt, params)

    def fetchone(self, stmt, params=()):
        with self.lock:
            return self.execute(stmt, params).fetchone()

    def fetchall(self, stmt, params=()):
        with self.lock:
            return self.execute(stmt, params).fetchall()

    def stream_cursor(self):
        """A new cursor whose results come from the server as they are
        fetched (not all with the statement), or None where this
        connection cannot read them so."""
        return self.conn.cursor()

    def stream(self, stmt, params=()):
        """A Stream of *stmt*'s rows, read as they are asked for, or None
        where the connection cannot stream (see stream_cursor). Until the
        stream ends, the session is its own: nothing else may run on it
        (close the session to abandon a stream half-way)."""
        with self.lock, self.guarded():
            self.flush()
            cursor = self.stream_cursor()
            if cursor is None:
                return None
            self.count_round_trip()
            try:
                cursor.execute(self.translate(stmt), params)
            except BaseException:
                _close_quietly(cursor)
                raise
        return Stream(self, cursor)

    def scalar(self, stmt, params=()):
        row = self.fetchone(stmt, params)
        return row[0] if row is not None else None

    def table_exists(self, name):
        raise NotImplementedError

    # Transactions

    def begin(self, sql=None):
        sql = sql or self.begin_sql
        if self.defers_verbs:
            with self.lock:
                self.pending += sql + '; '
        else:
            self.execute(sql)
        self.in_transaction = True

    def commit(self):
        self.in_transaction = False
        with self.lock:
            if self.pending:
                # Nothing ran since BEGIN: there is nothing to commit; an
                # earlier transaction's end is sent now (else the server
                # would hold it, and its snapshot, until the next
                # statement).
                self._drop_pending()
                self.flush()
                return
            self.execute('COMMIT')

    def rollback(self):
        self.in_transaction = False
        with self.lock:
            if self.pending:
                self._drop_pending()
                self.flush()  # (as in commit)
                return
            self.execute('ROLLBACK')

    def _drop_pending(self):
        """Forget the deferred verbs of a transaction in which nothing
        ran but an earlier transaction's end waiting with them (the
        ROLLBACK of restart()), which stays pending. (Under the lock.)"""
        ended = self.pending.startswith('ROLLBACK')
        self.pending = 'ROLLBACK; ' if ended else ''

    def restart(self, begin_sql):
        """End the current transaction (holding no locks: a read-only
        snapshot) and begin another, in as few round trips as possible."""
        if self.defers_verbs and self.in_transaction:
            with self.lock:
                if not self.pending:
                    self.pending = 'ROLLBACK; '
        elif self.in_transaction:
            self.rollback()
        self.begin(begin_sql)

    def end_read(self, now=True):
        """End a read-only transaction (a snapshot). Where verbs are
        deferred and *now* is false, the ROLLBACK goes out with the next
        statement; otherwise it is sent at once, if anything ran in it."""
        if not self.in_transaction:
            if now:
                self.flush()  # (an end deferred before)
            return
        self.in_transaction = False
        with self.lock:
            if self.pending:
                # Nothing ran since BEGIN; only an earlier transaction
                # (ROLLBACK; BEGIN) may still be waiting to end.
                self._drop_pending()
            elif self.defers_verbs:
                self.pending = 'ROLLBACK; '
            else:
                self.execute('ROLLBACK')
                return
        if now:
            self.flush()

    def rollback_quietly(self):
        """Roll back, swallowing (and logging) errors from a broken
        connection; used on abort paths that must not raise. Nothing is
        sent when no transaction is open (committed already, say: the
        finally of a commit; PostgreSQL would warn of the ROLLBACK)."""
        if not self.in_transaction and not self.pending:
            return True
        try:
            self.rollback()
        except Exception:  # noqa: BLE001 -- an abort path must not raise
            log.debug('rollback failed on %s', self.describe(),
                      exc_info=True)
            return False
        return True

    def close(self):
        for func in self.on_close:
            func()
        self.on_close = []
        self.adapter.traffic.closed(self.sent)
        for thing in (self.cursor, self.conn):
            _close_quietly(thing)
        self.cursor = self.conn = None

    @property
    def closed(self):
        return self.conn is None


def first_line(error):
    """The first line of what *error* says (its class's name if
    nothing)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _close_quietly(thing):
    try:
        thing.close()
    except Exception:  # noqa: BLE001 -- closing must not raise
        pass


class Stream:
    """The rows of one statement on a session (see Session.stream),
    fetched a batch at a time."""

    def __init__(self, session, cursor):
        self.session = session
        self.cursor = cursor

    def fetch(self, size):
        """The next rows, up to *size* of them; [] at the end (when the
        stream is closed)."""
        session, cursor = self.session, self.cursor
        if cursor is None:
            return []
        with session.lock, session.guarded():
            if session.closed:
                session.lost()
            if session.fetches_ask_server:
                session.count_round_trip(0)
            rows = cursor.fetchmany(size)
        if not rows:
            self.close()
        return rows

    def close(self):
        """End the stream: its cursor closed (the results not read
        skipped: for a stream left half-way, closing the session is
        quicker)."""
        cursor, self.cursor = self.cursor, None
        if cursor is not None and not self.session.closed:
            _close_quietly(cursor)


def in_list(values):
    """``'(%s, %s, ...)'`` with one placeholder per value."""
    return '(' + ', '.join(['%s'] * len(values)) + ')'
