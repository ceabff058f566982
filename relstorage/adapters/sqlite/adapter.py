"""The SQLite adapter: one file per database in a data directory, WAL so
readers never block the writer, the single writer as the lock taken at
vote, and a separate small file for handing out oids (see this package's
session, schema, locker, mover and oidallocator, which it assembles)."""
import os
import threading

from ...exceptions import ConfigurationError
from .. import cooperative
from ..adapter import Adapter
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
from .session import WriterQueue
from .session import SQLiteConnector
from .votes import SQLiteVoteClaims


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
    # SQLite queues nobody: a waiting writer's busy handler retries after
    # sleeps of up to 100 ms, so a pack that took the lock again at once
    # would keep it from that writer for the whole pack.
    pack_pause_between_batches = 0.15
    #: The store session's page cache, in pages: the vote writes all but
    #: this much to the WAL, and reserves room for the rest.
    store_cache_pages = 128

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
            gevent_yield_interval = yield_interval(gevent_yield_interval,
                                                   self.cooperative)
        if not data_dir:
            raise ConfigurationError('data-dir: an SQLite data directory '
                                     'is required')
        self.data_dir = os.path.abspath(os.path.expanduser(data_dir))
        self.oid_lock = threading.Lock()
        self.main_path = os.path.join(self.data_dir, MAIN_FILE)
        #: The writer queue's key: one file, however its path is spelled.
        self._queue_key = os.path.realpath(self.main_path)
        self.options = options if options is not None else Options()
        self.connector = SQLiteConnector(self, pragmas, gevent_yield_interval)
        super().__init__(self.options)
        #: Without an automatic checkpoint chosen by the user, commits
        #: leave checkpoints to a thread (see Checkpointer).
        self.checkpointer = None
        if 'wal_autocheckpoint' not in self.connector.pragmas:
            self.checkpointer = Checkpointer(
                self.main_path, self.options.commit_lock_timeout)

    @property
    def writers(self):
        """The order in which this process's store sessions of this
        database write (shared with every adapter of the same file)."""
        return WriterQueue.for_file(self._queue_key)

    @property
    def max_params(self):
        return self.connector.max_params

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
        super().close()
        self.oids.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        room.release(self.main_path)
