"""What SQLite does differently: one file per database in a data
directory, WAL so readers never block the writer, the single writer as the
lock taken at vote, and a separate small file for handing out oids so that
allocating an oid never waits for a committing transaction."""
import collections
import contextlib
import fcntl
import logging
import os
import re
import sqlite3
import threading
import time
import urllib.parse

from ...exceptions import CommitLockTimeout
from ...exceptions import DatabaseMissing
from ...exceptions import ConfigurationError
from ...exceptions import DatabaseUnavailable
from ..oidallocator import OID_BLOCK
from ..adapter import Adapter
from .. import cooperative
from ..locker import Locker
from ..mover import HistoryFreeMover
from ..mover import HistoryPreservingMover
from ..oidallocator import OIDAllocator
from ..schema import Schema
from ..schema import Types
from ..schema import relstorage4_mode
from ..session import Session
from ..sql import qmark
from . import files
from .checkpoint import Checkpointer
from .inspect import SQLiteStatistics
from .checkpoint import retry
from . import errors
from . import room
from .votes import SQLiteVoteClaims

log = logging.getLogger(__name__)

MAIN_FILE = 'relstorage.sqlite3'
OID_FILE = 'oids.sqlite3'
#: Where RelStorage 4 keeps its tables, in the same data-dir.
RS4_FILE = 'main.sqlite3'

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

TEMP_STORE_DDL = """
CREATE TEMP TABLE IF NOT EXISTS temp_store (
    zoid        INTEGER NOT NULL PRIMARY KEY,
    prev_tid    INTEGER NOT NULL,
    state       BLOB,
    blob_id     INTEGER
)
"""


class SQLiteTypes(Types):
    bigint = 'INTEGER'
    blob = 'BLOB'
    bool = 'BOOLEAN'
    true = '1'
    false = '0'


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
    #: commit-lock-timeout; 0 (the pack session) fails at once.
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
            raise self.adapter.writer_timeout()
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
            self.adapter.raise_classified(e)
            raise


def open_read_only(path):
    """A read-only connection to the SQLite file at *path* (never creates
    it)."""
    return sqlite3.connect('file:%s?mode=ro' % urllib.parse.quote(path),
                           uri=True)


class SQLiteSchema(Schema):

    def relstorage4_mode(self, session):
        # RelStorage 4 keeps its tables in a file of its own, beside ours.
        path = os.path.join(self.adapter.data_dir, RS4_FILE)
        if not os.path.exists(path):
            return None
        conn = open_read_only(path)
        try:
            names = {name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
        return relstorage4_mode(names.__contains__)

    def relstorage4_session(self):
        adapter = self.adapter
        conn = open_read_only(os.path.join(adapter.data_dir, RS4_FILE))
        conn.isolation_level = None     # transactions are explicit
        return SQLiteSession(adapter, conn)


class SQLiteLocker(Locker):
    # BEGIN IMMEDIATE at vote already made this connection the only writer.
    exclusive_clause = ''
    shared_clause = ''

    def hold_commit_lock(self, session, last_tid_sql):
        return session.scalar(last_tid_sql)

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        # BEGIN IMMEDIATE already made this the writer, or raised when the
        # slot was taken (see begin_with_commit_lock).
        return session.scalar(last_tid_sql)

    def begin_with_commit_lock(self, session, last_tid_sql, wait=0):
        # The pack session waits for the writer slot only when asked to.
        session.writer_wait = wait
        try:
            session.begin(self.adapter.store_begin_sql)
        except CommitLockTimeout:
            return self.BUSY
        finally:
            session.writer_wait = 0
        return session.scalar(last_tid_sql)

    def try_pack_lock(self, session):
        # An exclusive lock on a file beside the database, held by an open
        # descriptor that is closed with the session (or by the kernel
        # when the process dies).
        path = os.path.join(self.adapter.data_dir, 'pack.lock')
        fd = files.open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        session.on_close.append(lambda: os.close(fd))
        return True


class SQLiteMoverMixin:
    # SQLite's parser needs a WHERE before ON CONFLICT in INSERT ... SELECT;
    # the history-free statement has one of its own.
    insert_select_where = ' WHERE 1'

    def fetch_current(self, session, oid):
        # The hottest statement, run in-process: straight to the cursor
        # (an embedded database has no connection to lose, and a busy
        # writer does not block readers in WAL mode).
        with session.lock:
            session.round_trips += 1
            return session.cursor.execute(
                session.translate(self.load_current_sql), (oid,)).fetchone()


class SQLiteHPMover(SQLiteMoverMixin, HistoryPreservingMover):
    pass


class SQLiteHFMover(SQLiteMoverMixin, HistoryFreeMover):
    pass


class SQLiteOIDAllocator(OIDAllocator):
    """Oids come from a one-row table in a file of their own."""

    def __init__(self, adapter):
        super().__init__(adapter)
        self._conn = None

    def _connection(self):
        if self._conn is None:
            conn = files.connect(
                os.path.join(self.adapter.data_dir, OID_FILE),
                self.adapter.options.commit_lock_timeout,
                [('journal_mode', 'wal')])
            conn.execute(
                'CREATE TABLE IF NOT EXISTS next_oid '
                '(id INTEGER PRIMARY KEY, next INTEGER NOT NULL)')
            self._conn = conn
        return self._conn

    def _ensure_row(self, conn, session):
        if conn.execute('SELECT COUNT(*) FROM next_oid').fetchone()[0] == 0:
            # A new (or lost) oid file starts above every stored oid.
            start = (session.scalar('SELECT MAX(zoid) FROM object_state')
                     or 0) + 1
            conn.execute('INSERT OR IGNORE INTO next_oid (id, next) '
                         'VALUES (0, ?)', (start,))

    @contextlib.contextmanager
    def _classified(self):
        """The oid file's errors told like the database's (DatabaseFull
        for no room, CommitLockTimeout for a lock held too long)."""
        try:
            yield
        except sqlite3.Error as e:
            self.adapter.raise_classified(e)
            raise

    def new_blocks(self, session, blocks):
        count = blocks * OID_BLOCK
        with self._classified(), self.adapter.oid_lock:
            conn = self._connection()
            self._ensure_row(conn, session)
            first = conn.execute(
                'UPDATE next_oid SET next = next + ? WHERE id = 0 '
                'RETURNING next', (count,)).fetchone()[0] - count
        return [(first, count)]

    def raise_to(self, max_oid):
        # The counter lives in its own file, so it is raised at once rather
        # than in the commit's transaction; raising it early is harmless.
        with self._classified(), self.adapter.oid_lock:
            conn = self._connection()
            if conn.execute('SELECT COUNT(*) FROM next_oid').fetchone()[0]:
                conn.execute('UPDATE next_oid SET next = MAX(next, ?) '
                             'WHERE id = 0', (max_oid + 1,))
            else:
                conn.execute('INSERT INTO next_oid (id, next) VALUES (0, ?)',
                             (max_oid + 1,))
        return []

    def reset(self, session):
        with self._classified(), self.adapter.oid_lock:
            self._connection().execute('DELETE FROM next_oid')

    def reset_after_drop(self):
        self.reset(None)

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def yield_interval(interval, cooperating):
    """The gevent_yield_interval option's *interval* when gevent is in
    use (*cooperating*: asked for by the driver name, or
    monkey-patching), else None with a warning that it is ignored."""
    from ...options import IGNORED_SQLITE_KEYS
    from ...options import warn_ignored
    if cooperating:
        return max(1, interval)
    warn_ignored('gevent_yield_interval',
                 IGNORED_SQLITE_KEYS['gevent_yield_interval'])
    return None


class SQLiteAdapter(Adapter):

    types = SQLiteTypes
    schema_class = SQLiteSchema
    hp_mover_class = SQLiteHPMover
    hf_mover_class = SQLiteHFMover
    locker_class = SQLiteLocker
    vote_claims_class = SQLiteVoteClaims
    oid_allocator_class = SQLiteOIDAllocator
    statistics_class = SQLiteStatistics
    database_name = 'SQLite'

    @property
    def upgrade_class(self):
        """SQLiteUpgrade (imported here: its module imports this one)."""
        from .upgrade import SQLiteUpgrade
        return SQLiteUpgrade

    uri_keys = ('driver', 'data_dir')

    @classmethod
    def section_from_uri(cls, uri):
        """``sqlite:///var/app/db``: the data directory is the path, or
        the ``data_dir`` argument (RelStorage 4's
        ``sqlite://?data_dir=/var/app/db``)."""
        if uri.netloc:
            raise ConfigurationError(
                'sqlite URI %s: the data directory is a path '
                '(sqlite:///var/app/db), not a host' % uri.redacted)
        given = uri.keys.get('data_dir')
        if given and uri.path and given != uri.path:
            raise ConfigurationError(
                'sqlite URI %s names two data directories (the path and '
                'data_dir): give one' % uri.redacted)
        return {'data_dir': uri.path or given or None, 'pragmas': None}
    load_begin_sql = 'BEGIN DEFERRED'
    store_begin_sql = 'BEGIN IMMEDIATE'
    # A reader cannot become the writer while another process is one
    # (SQLite fails at once): whoever may create the schema starts as the
    # writer, and the others wait for it, then find the schema made.
    schema_begin_sql = 'BEGIN IMMEDIATE'
    temp_store_emptied_by_commit = False
    # BEGIN IMMEDIATE at vote makes the commit transaction the writer.
    supports_prepare_at_vote = True
    # A reader's snapshot keeps the WAL from starting again (Checkpointer).
    requires_snapshot_end_at_vote = True
    #: Every commit of another connection changes PRAGMA data_version.
    supports_commit_announcements = True
    # SQLite's limit before 3.32 (32766 since); read from each connection.
    max_params = 999
    # SQLite queues nobody: a waiting writer's busy handler retries after
    # sleeps of up to 100 ms, so a pack that took the lock again at once
    # would keep it from that writer for the whole pack.
    pack_pause_between_batches = 0.15
    #: The store session's page cache, in pages: the vote writes all but
    #: this much to the WAL, and reserves room for the rest.
    store_cache_pages = 128

    #: With gevent in use, long statements yield every this many VM
    #: steps (RelStorage's gevent_yield_interval); None: they do not.
    yield_interval = None

    def __init__(self, data_dir, pragmas=None, driver='auto', options=None,
                 gevent_yield_interval=None):
        from ...options import Options
        asked, name = cooperative.split_driver_name(driver)
        if name not in ('auto', 'sqlite3'):
            raise ConfigurationError(
                'driver: unknown SQLite driver %r (use auto or sqlite3)'
                % driver)
        self.cooperative = cooperative.cooperating(asked)
        if gevent_yield_interval is not None:
            self.yield_interval = yield_interval(gevent_yield_interval,
                                                 self.cooperative)
        if not data_dir:
            raise ConfigurationError('data-dir: an SQLite data directory '
                                     'is required')
        self.data_dir = os.path.abspath(os.path.expanduser(data_dir))
        self.pragmas = dict(DEFAULT_PRAGMAS)
        for name, value in (pragmas or {}).items():
            name = name.lower().replace('-', '_')
            value = str(value)
            if not _PRAGMA_NAME.match(name) or not _PRAGMA_VALUE.match(value):
                raise ConfigurationError(
                    'pragmas: invalid SQLite pragma %s = %r' % (name, value))
            self.pragmas[name] = value
        self.oid_lock = threading.Lock()
        self.main_path = os.path.join(self.data_dir, MAIN_FILE)
        #: The writer queue's key: one file, however its path is spelled.
        self._queue_key = os.path.realpath(self.main_path)
        super().__init__(options if options is not None else Options())
        #: Without an automatic checkpoint chosen by the user, commits
        #: leave checkpoints to a thread (see Checkpointer).
        self.checkpointer = None
        if 'wal_autocheckpoint' not in self.pragmas:
            self.checkpointer = Checkpointer(
                self.main_path, self.options.commit_lock_timeout)

    @property
    def writers(self):
        """The order in which this process's store sessions of this
        database write (shared with every adapter of the same file)."""
        return WriterQueue.for_file(self._queue_key)

    def describe(self, server=None):
        return 'SQLite database in %s' % self.data_dir

    def writer_timeout(self):
        return CommitLockTimeout(
            'the %s stayed locked by another writer longer than '
            'commit-lock-timeout (%ss)'
            % (self.describe(), self.options.commit_lock_timeout))

    def raise_classified(self, error):
        """Raise what the SQLite *error* means to the storage, when it
        means more than itself: CommitLockTimeout for another writer's
        lock, DatabaseFull for no room."""
        kind = errors.kind(error)
        if kind == errors.BUSY:
            raise self.writer_timeout() from None
        if kind == errors.FULL:
            raise errors.database_full(self.describe(), error) from None

    def location(self):
        return ('sqlite', os.path.realpath(self.data_dir))

    def open_connection(self, for_store, server=None):
        path = self.main_path
        yielder = None
        try:
            if self.options.read_only:
                # Connecting would create it: a read-only storage creates
                # nothing.
                if not os.path.exists(path):
                    raise DatabaseMissing(
                        'the %s does not exist (no %s there)'
                        % (self.describe(), MAIN_FILE))
                conn = files.connect_read_only(
                    path, self.options.commit_lock_timeout,
                    self.pragmas.items())
            else:
                files.make_data_dir(self.data_dir)
                conn = files.connect(path, self.options.commit_lock_timeout,
                                     self.pragmas.items())
            if self.yield_interval:
                yielder = cooperative.sqlite_yielder()
                conn.set_progress_handler(yielder, self.yield_interval)
            self.max_params = conn.getlimit(
                sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        except (OSError, sqlite3.Error) as e:
            raise DatabaseUnavailable(
                'cannot open the %s: %s' % (self.describe(), e)) from None
        session = SQLiteSession(self, conn)
        session.writer_wait = self.options.commit_lock_timeout
        session.yielder = yielder
        return session

    def prepare_store_session(self, session):
        session.execute(TEMP_STORE_DDL)
        # What the COMMIT still writes after the vote is what the cache
        # holds (see room): a small cache, spilled as the vote writes.
        session.execute('PRAGMA cache_size = %d' % self.store_cache_pages)
        session.execute('PRAGMA cache_spill = ON')
        # The page size, and how many dirty pages the cache holds at
        # most (the larger of its size and the spill threshold).
        session.commit_pages = (session.scalar('PRAGMA page_size'),
                                session.scalar('PRAGMA cache_spill'))
        if self.checkpointer is not None:
            session.execute('PRAGMA wal_autocheckpoint = 0')

    def reserve_commit(self, session):
        page_size, pages = session.commit_pages
        room.reserve(self.main_path, page_size, pages, self.describe())

    def commits_announced(self, session):
        if not self.options.poll_interval:
            return None
        # Changes when any other connection (another instance, another
        # process) committed since this one last asked; read from the
        # WAL index in shared memory, no disk read. Outside a snapshot:
        # within one it keeps the snapshot's value.
        try:
            version = session.scalar('PRAGMA data_version')
        except Exception:  # noqa: BLE001 -- a real poll finds out
            return True
        changed = version != getattr(session, 'data_version', None)
        session.data_version = version
        return changed

    def committed(self, rows, tid):
        if self.checkpointer is not None:
            self.checkpointer.committed(
                sum(len(row[2]) for row in rows if row[2] is not None)
                + len(rows) * Checkpointer.row_bytes)

    def prepare_pack_session(self, session):
        session.execute('PRAGMA busy_timeout = 0')
        session.writer_wait = 0
        # The pack's scratch tables hold the whole reference graph: in a
        # temporary file (with SQLite's small page cache in front of it),
        # not in this process's memory as commits' temp_store is.
        session.execute('PRAGMA temp_store = FILE')

    def after_pack_reads(self, session):
        # The pre-pack's snapshot kept the WAL from being checkpointed
        # while writers committed, and each batch adds to it; copy it back
        # here, so that it is not some writer's commit that pays for it
        # (a passive checkpoint waits for nobody and blocks nobody).
        session.execute('PRAGMA wal_checkpoint(PASSIVE)')

    def close(self):
        self.oids.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        room.release(self.main_path)
