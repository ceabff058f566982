"""The SQLite adapter: one file per database in a data directory, WAL so
readers never block the writer, the single writer as the lock taken at
vote, and a separate small file for handing out oids (see this package's
session, schema, locker, mover and oidallocator, which it assembles)."""
import logging
import os
import sqlite3
import threading

from ...exceptions import CommitLockTimeout
from ...exceptions import ConfigurationError
from ...exceptions import DatabaseMissing
from ...exceptions import DatabaseUnavailable
from .. import cooperative
from ..adapter import Adapter
from . import errors
from . import files
from . import room
from .checkpoint import Checkpointer
from .files import MAIN_FILE
from .inspect import SQLiteStatistics
from .locker import SQLiteLocker
from .mover import SQLiteHFMover
from .mover import SQLiteHPMover
from .oidallocator import SQLiteOIDAllocator
from .schema import TEMP_STORE_DDL
from .schema import SQLiteSchema
from .schema import SQLiteTypes
from .session import connection_pragmas
from .session import WriterQueue
from .session import SQLiteSession
from .votes import SQLiteVoteClaims

log = logging.getLogger(__name__)


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
        self.pragmas = connection_pragmas(pragmas or {})
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
