"""SQLite sessions: the pragmas a connection is opened with, and the
single writer, which the threads of a process become in turn
(WriterQueue) and other processes by trying BEGIN IMMEDIATE again in
short pauses."""
import collections
import os
import re
import sqlite3
import threading
import time

from zope.interface import implementer

from ...exceptions import CommitLockTimeout
from ...exceptions import ConfigurationError
from ...exceptions import DatabaseMissing
from ...exceptions import DatabaseUnavailable
from .. import cooperative
from ..components import IConnector
from ..session import Session
from ..sql import qmark
from . import errors
from . import files
from .checkpoint import retry
from .files import MAIN_FILE


#: Pragma names a user may set; values are checked before use because
#: PRAGMA statements cannot take bound parameters.
_PRAGMA_NAME = re.compile(r'^[a-z_]+$')
_PRAGMA_VALUE = re.compile(r'^[A-Za-z0-9_\-.]+$')

DEFAULT_PRAGMAS = {
    'journal_mode': 'wal',
    'synchronous': 'normal',
    'foreign_keys': 'off',
    'temp_store': 'memory',
    'cache_size': '-16000',
}


def connection_pragmas(given):
    """DEFAULT_PRAGMAS with the pragmas *given* (a ``<pragmas>`` section's
    ``{name: value}``), each checked; ConfigurationError names one that is
    not a plain name and value."""
    pragmas = dict(DEFAULT_PRAGMAS)
    for name, value in given.items():
        name = name.lower().replace('-', '_')
        value = str(value)
        if not _PRAGMA_NAME.match(name) or not _PRAGMA_VALUE.match(value):
            raise ConfigurationError(
                'pragmas: invalid SQLite pragma %s = %r' % (name, value))
        pragmas[name] = value
    return pragmas


class WriterQueue:
    """First come, first served: the threads of one process become
    SQLite's writer in the order they asked. A thread that finishes hands
    the turn straight to the longest waiting one.

    There is one queue per database file and process (``for_file``),
    shared by every adapter of that file: storages opened separately in
    one process (a DB per thread, a tool beside an application) would
    otherwise meet only at SQLite's lock, trying again in pauses, where
    the threads that arrived last win most often and one that waited
    long can lose to the others for the whole commit-lock-timeout."""

    _by_file = {}
    _by_file_lock = threading.Lock()

    @classmethod
    def for_file(cls, path):
        """The queue of this process for the database file *path*
        (a real path)."""
        with cls._by_file_lock:
            queue = cls._by_file.get(path)
            if queue is None:
                queue = cls._by_file[path] = cls()
            return queue

    @classmethod
    def _forked(cls):
        # A forked child has none of its parent's threads: a turn taken
        # or waited for there is never given back here.
        cls._by_file_lock = threading.Lock()
        cls._by_file = {}

    def __init__(self):
        self._lock = threading.Lock()
        self._waiting = collections.deque()
        self._taken = False

    def acquire(self, timeout):
        with self._lock:
            if not self._taken and not self._waiting:
                self._taken = True
                return True
            turn = threading.Event()
            self._waiting.append(turn)
        if turn.wait(timeout):
            return True
        with self._lock:
            if turn.is_set():   # handed over as the wait ended
                return True
            self._waiting.remove(turn)
            return False

    def release(self):
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._taken = False


os.register_at_fork(after_in_child=WriterQueue._forked)


class SQLiteSession(Session):

    _cache = {}
    #: Seconds BEGIN IMMEDIATE waits for another writer: the adapter sets
    #: commit-lock-timeout; 0 (the pack writer) fails at once.
    writer_wait = 0.0
    #: The first and the longest pause between tries for the write lock.
    first_pause = 0.0002
    max_pause = 0.002

    def begin(self, sql=None):
        """BEGIN IMMEDIATE waits for the writer before it by trying again
        after pauses of at most ``max_pause``, not in SQLite's busy
        handler: that one sleeps 1, 2, 5, 10, 15, 20, 25 ms and more
        between tries, so a commit queued behind another began on
        average several milliseconds after the lock came free."""
        if sql != 'BEGIN IMMEDIATE' or self.writer_wait <= 0:
            return super().begin(sql)
        # The threads of this process take their turns in order; only
        # other processes are met by trying again (under load, a thread
        # trying again could lose to the others for the whole timeout).
        started = time.monotonic()
        if not self.adapter.writers.acquire(self.writer_wait):
            raise self.writer_timeout()
        self._writer_turn = True
        try:
            checkpointer = self.adapter.checkpointer
            if checkpointer is not None:
                checkpointer.wait_for_restart()
            with self.lock:
                self.conn.execute('PRAGMA busy_timeout = 0')
                try:
                    self._begin_writer(sql, max(
                        0.0, self.writer_wait - (time.monotonic() - started)))
                finally:
                    ms = int(self.writer_wait * 1000)
                    self.conn.execute('PRAGMA busy_timeout = %d' % ms)
        except BaseException:
            self._end_turn()
            raise
        self.in_transaction = True

    _writer_turn = False

    def _end_turn(self):
        if self._writer_turn:
            self._writer_turn = False
            self.adapter.writers.release()

    def commit(self):
        try:
            super().commit()
        finally:
            self._end_turn()

    def execute_script(self, statements):
        super().execute_script(statements)
        # A store session's commit ends its script (on failure the caller
        # rolls back, which ends the turn).
        if any(stmt == 'COMMIT' for stmt, _ in statements):
            self._end_turn()

    def rollback(self):
        try:
            super().rollback()
        finally:
            self._end_turn()

    def close(self):
        try:
            super().close()
        finally:
            self._end_turn()

    def _begin_writer(self, sql, wait):
        # CommitLockTimeout: another writer holds the lock (execute's
        # translation of SQLITE_BUSY).
        retry(lambda: self.execute(sql), CommitLockTimeout,
              wait, self.first_pause, self.max_pause)

    def translate(self, stmt):
        try:
            return self._cache[stmt]
        except KeyError:
            result = self._cache[stmt] = qmark(stmt)
            return result

    def table_exists(self, name):
        return self.scalar(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' "
            "AND name = %s", (name,)) > 0

    #: The progress handler letting other greenlets run (None: none).
    yielder = None

    def execute(self, stmt, params=()):
        try:
            return super().execute(stmt, params)
        except sqlite3.Error as e:
            if self.yielder is not None:
                self.yielder.raise_stopped()
            errors.raise_classified(e, self.describe(),
                                    self.adapter.options.commit_lock_timeout)
            raise

    def writer_timeout(self):
        """The CommitLockTimeout of a writer that waited its turn longer
        than commit-lock-timeout."""
        return errors.writer_timeout(self.describe(),
                                     self.adapter.options.commit_lock_timeout)

    #: PRAGMA data_version when commits_announced() last asked.
    data_version = None

    def commits_announced(self):
        if not self.hears_commits:
            return None
        # Changes when any other connection (another instance, another
        # process) committed since this one last asked; read from the
        # WAL index in shared memory, no disk read. Outside a snapshot:
        # within one it keeps the snapshot's value.
        try:
            version = self.scalar('PRAGMA data_version')
        except Exception:  # noqa: BLE001 -- a real poll finds out
            return True
        changed = version != self.data_version
        self.data_version = version
        return changed


@implementer(IConnector)
class SQLiteConnector:
    """Opens the SQLite sessions of an adapter on its main file (created
    with its data directory, unless read-only), with the pragmas (the
    defaults and the ``<pragmas>`` given, each checked), the busy wait
    of commit-lock-timeout and, under gevent, the progress handler."""

    #: The most parameters one statement may carry: SQLite's limit
    #: before 3.32 (32766 since), until a connection tells its own.
    max_params = 999

    def __init__(self, adapter, pragmas, yield_interval):
        self.adapter = adapter
        self.options = adapter.options
        self.pragmas = connection_pragmas(pragmas or {})
        #: With gevent in use, long statements yield every this many VM
        #: steps (gevent_yield_interval); None: they do not.
        self.yield_interval = yield_interval

    def describe(self, server=None):
        return 'SQLite database in %s' % self.adapter.data_dir

    def location(self):
        return ('sqlite', os.path.realpath(self.adapter.data_dir))

    def open(self, for_store, server=None):
        path = self.adapter.main_path
        timeout = self.options.commit_lock_timeout
        yielder = None
        try:
            if self.options.read_only:
                # Connecting would create it: a read-only storage creates
                # nothing.
                if not os.path.exists(path):
                    raise DatabaseMissing(
                        'the %s does not exist (no %s there)'
                        % (self.describe(), MAIN_FILE))
                conn = files.connect_read_only(path, timeout,
                                               self.pragmas.items())
            else:
                files.make_data_dir(self.adapter.data_dir)
                conn = files.connect(path, timeout, self.pragmas.items())
            if self.yield_interval:
                yielder = cooperative.sqlite_yielder()
                conn.set_progress_handler(yielder, self.yield_interval)
            self.max_params = conn.getlimit(
                sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        except (OSError, sqlite3.Error) as e:
            raise DatabaseUnavailable(
                'cannot open the %s: %s' % (self.describe(), e)) from None
        session = SQLiteSession(self.adapter, conn)
        session.writer_wait = timeout
        session.yielder = yielder
        session.hears_commits = bool(self.options.poll_interval)
        return session
