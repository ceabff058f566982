"""RelStorage: the ZODB-facing storage. It knows ZODB and never writes SQL;
everything database-specific happens behind ``relstorage.adapters``."""
import logging
import threading
import time
import weakref

import ZODB.interfaces
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.POSException import ReadOnlyError
from ZODB.serialize import referencesf
from ZODB.utils import p64
from zope.interface import alsoProvides
from zope.interface import implementer

from ..blobs import make_blobs
from ..cache import StorageCache
from ..cache import persist
from ..metrics import recorder_for
from .blobs import BlobMethods
from .callers import calling_db
from .copy import copy_transactions
from .history import History
from .history import UndoableHistory
from .iteration import Iteration
from .load import Loader
from .pack.multidb import pack_databases
from .pack.pack import Pack
from .readahead import ReadAhead
from .tpc import Commit
from .view import Seen
from .view import View
from .view import remembered_states

log = logging.getLogger(__name__)

#: The most oid blocks (of OID_BLOCK oids) an instance reserves at once.
MAX_OID_BLOCKS = 1024


#: The ZODB methods each part of an instance answers, bound to the
#: instance as it is made (no call in between on the hot paths: load,
#: store, tpc_*, poll_invalidations).
VIEW_METHODS = ('poll_invalidations', 'sync', 'afterCompletion')
LOADER_METHODS = ('load', 'loadBefore', 'loadSerial', 'prefetch', 'getTid')
COMMIT_METHODS = ('tpc_begin', 'store', 'restore', 'deleteObject',
                  'checkCurrentSerialInTransaction', 'tpc_vote',
                  'tpc_finish', 'tpc_abort', 'tpc_transaction')
HISTORY_METHODS = ('history', 'supportsUndo', 'undoLog', 'undoInfo',
                   'undo')
ITERATION_METHODS = ('iterator', 'record_iternext')
BLOB_METHODS = ('temporaryDirectory', 'storeBlob', 'restoreBlob',
                'loadBlob', 'openCommittedBlobFile')


def _bind(target, part, names):
    for name in names:
        setattr(target, name, getattr(part, name))


def _weakly(method):
    """*method* (bound), holding its object weakly: a part that calls back
    into the storage must not keep it alive (an instance that ZODB drops
    is freed at once, closing its sessions, as without parts)."""
    ref = weakref.WeakMethod(method)

    def call(*args, **kwargs):
        return ref()(*args, **kwargs)
    return call


def _multi_database(db, storage):
    """``(name, {database name: storage})`` of the multi-database *db*
    is one of (*storage* standing for *db*'s own), or None when *db* is
    alone."""
    if len(db.databases) < 2:
        return None
    storages = {name: other.storage for name, other
                in db.databases.items()}
    storages[db.database_name] = storage
    return db.database_name, storages


@implementer(
    ZODB.interfaces.IStorage,
    ZODB.interfaces.IMVCCStorage,
    ZODB.interfaces.IMultiCommitStorage,
    ZODB.interfaces.IStorageRestoreable,
    ZODB.interfaces.IStorageIteration,
    ZODB.interfaces.IStorageCurrentRecordIteration,
    ZODB.interfaces.IExternalGC,
    ZODB.interfaces.ReadVerifyingStorage,
)
class RelStorage(ConflictResolvingStorage):
    """A ZODB storage in a relational database.

    The object the application creates is the *root* storage; ZODB asks it
    for one ``new_instance()`` per connection. All instances share the
    adapter and the process-wide pickle cache; each has its own database
    sessions and snapshot.

    An instance is made of parts, each answering some of ZODB's methods
    (bound to the instance in __init__): its View (snapshot and polling,
    view.py), Loader (load.py), Commit (two-phase commit, tpc/), History
    or, with history, UndoableHistory (history.py), Iteration and
    BlobMethods.
    """

    def __init__(self, adapter, name=None, options=None, _parent=None):
        if options is None:
            options = adapter.options
        self._adapter = adapter
        self._options = options
        self._name = name or options.name or adapter.describe()
        self._is_root = _parent is None
        if _parent is None:
            self._open_root(adapter, options)
        else:
            self._cache = _parent._cache
            self._seen = _parent._seen
            self._blobs = _parent._blobs
            self._metrics = _parent._metrics
        self._oid_lock = threading.Lock()
        self._free_oids = []
        self._oid_blocks = 1
        self._closed = False
        self._instances = weakref.WeakSet()
        self._make_parts(adapter, options)
        if self._blobs is not None:
            alsoProvides(self, ZODB.interfaces.IBlobStorageRestoreable)

    def _open_root(self, adapter, options):
        options.check_supported()
        if (options.poll_interval
                and not adapter.supports_commit_announcements):
            log.warning(
                'poll-interval %s on the %s, which does not announce '
                'commits: a connection kept open may read data up to '
                '%s s older than other processes\' commits (its own it '
                'sees at once, and a connection opened from the pool '
                'sees every commit made before)',
                options.poll_interval, adapter.describe(),
                options.poll_interval)
        adapter.prepare()
        self._seen = Seen()
        self._cache = StorageCache(
            int(options.cache_local_mb * 1000000),
            object_max_bytes=options.cache_local_object_max,
            delta_limit=options.cache_delta_size_limit)
        self._blobs = make_blobs(options, adapter.keep_history,
                                 adapter.cache_key,
                                 adapter.open_load_session,
                                 adapter.describe())
        self._persist = None
        if options.cache_local_dir and self._cache.limit_bytes:
            self._persist = persist.PersistentCache.open(
                adapter, options, self._cache.limit_bytes)
        if self._persist is not None:
            self._persist.warm(self._cache, adapter)
        self._metrics = recorder_for(options.metrics, self._name,
                                     self._cache, adapter, self._blobs)

    def _make_parts(self, adapter, options):
        cache, blobs, metrics = self._cache, self._blobs, self._metrics
        keep_history = adapter.keep_history
        # Read-ahead fills the shared cache: without one it is of no use.
        readahead = (ReadAhead(cache.holds) if cache.limit_bytes else None)
        self._view = view = View(
            adapter, cache, remembered_states(keep_history), readahead, metrics,
            options, self._name, self._is_root, self._seen)
        resolve = _weakly(self.tryToResolveConflict)
        self._commit = commit = Commit(
            adapter, options.read_only, blobs, metrics, resolve,
            view.end_snapshot_now, view.after_commit)
        self._loader = loader = Loader(view, cache, readahead, metrics,
                                       keep_history, commit)
        blob_methods = BlobMethods(self._name, blobs, commit, view.read)
        _bind(self, view, VIEW_METHODS)
        _bind(self, loader, LOADER_METHODS)
        _bind(self, commit, COMMIT_METHODS)
        self._iteration = iteration = Iteration(adapter, view)
        _bind(self, iteration, ITERATION_METHODS)
        _bind(self, blob_methods, BLOB_METHODS)
        if keep_history:
            history = UndoableHistory(view, commit, resolve, blobs,
                                      blob_methods.loadBlob)
            alsoProvides(self, ZODB.interfaces.IStorageUndoable)
        else:
            history = History(view, commit)
        _bind(self, history, HISTORY_METHODS)

    # Instances

    def new_instance(self):
        instance = type(self)(self._adapter, self._name, self._options,
                              _parent=self)
        self._instances.add(instance)
        return instance

    def release(self):
        """Close this instance's database sessions (ZODB is done with the
        connection that used it)."""
        self._view.release()
        self._commit.release()
        self._iteration.release()

    def close(self):
        if self._closed:
            return
        self._closed = True
        self.release()
        if self._is_root:
            # Closing the storage closes the database connections of every
            # instance made from it, even those whose ZODB connections were
            # never closed.
            for instance in list(self._instances):
                instance.release()
            if self._persist is not None:
                self._persist.keep(self._cache)
            self._metrics.close()
            self._adapter.close()

    @property
    def closed(self):
        return self._closed

    @property
    def fshelper(self):
        """ZODB's FilesystemHelper of the blob directory (ZODB's blob
        copying and tests look files up through it)."""
        if self._blobs is None:
            raise AttributeError('fshelper')  # not a blob storage
        return self._blobs.fshelper

    # Simple facts

    @property
    def adapter(self):
        """The database adapter, for tools that speak to the same database
        directly (relstorage-metrics' figures, speedtest)."""
        return self._adapter

    def traffic(self):
        """What this storage sent its database, its instances' sessions
        and its own, open and closed: ``{kind: {'round_trips': n,
        'statements': n}}`` for the kinds of work ``load``, ``poll``,
        ``store`` (the vote), ``commit``, ``pack`` and ``other`` (see
        docs/metrics.rst)."""
        return self._adapter.traffic.figures()

    def label(self):
        """The storage's own name: its section's, or, unnamed, its
        database's description (what metrics label it by)."""
        return self._name

    def getName(self):
        """The storage's name and the database it is (server and
        database, never a password): what Zope's Database page shows."""
        described = self._adapter.describe()
        if self._name == described:
            return described
        return '%s (%s)' % (self._name, described)

    def describe(self):
        """Which database this is, in words (never a password)."""
        return self._adapter.describe()

    sortKey = describe

    def isReadOnly(self):
        return self._options.read_only

    def lastTransaction(self):
        return p64(self._view.newest_tid())

    def __len__(self):
        return self._view.read(lambda session: session.object_count())

    def getSize(self):
        """Bytes the database takes on disk, as its server tells them
        without reading the tables (see IReads.database_size)."""
        return self._view.read(lambda session: session.database_size())

    def __repr__(self):
        return '<%s %s>' % (type(self).__name__, self._name)

    # New oids

    def new_oid(self):
        # Called once per new object: the common case is one pop. (A
        # read-only storage never has free oids: _more_oids refuses.)
        with self._oid_lock:
            free = self._free_oids
            if not free:
                free = self._more_oids()
            return free.pop().to_bytes(8, 'big')

    def _more_oids(self):
        self._commit.check_writable()
        adapter = self._adapter
        ranges = adapter.new_oid_blocks(
            self._view.session() if adapter.oids_from_load_session
            else self._commit.store_session(), self._oid_blocks)
        # An instance that keeps running out asks for more at once (an
        # unused rest is lost when it closes: oids are many).
        self._oid_blocks = min(self._oid_blocks * 2, MAX_OID_BLOCKS)
        free = []
        for first, count in reversed(ranges):
            free.extend(range(first + count - 1, first - 1, -1))
        self._free_oids = free
        return free

    # Whole-database operations

    @property
    def restores_transactions_together(self):
        """Whether a copy may restore several source transactions in one
        commit (see relstorage.storage.copy): without history, yes."""
        return not self._adapter.keep_history

    def copyTransactionsFrom(self, other, verbose=False):
        copy_transactions(other, self)

    def pack(self, t, referencesf, gc=None, progress=None):
        """IStorage.pack: see pack_with_result (this returns None).

        Called by ``ZODB.DB.pack`` (Zope's "Pack" button) of a DB that is
        one of a multi-database, this packs together with the others:
        the objects they refer to are kept (ZODB tells a storage that
        provides IMVCCStorage nothing of its DB, so the DB is the one
        calling here)."""
        db = calling_db(self)
        databases = _multi_database(db, self) if db is not None else None
        self.pack_with_result(t, referencesf, gc, progress,
                              databases=databases)

    def pack_with_result(self, t, referencesf, gc=None, progress=None,
                         prepack_only=None, use_prepack_state=None,
                         workers=None, databases=None):
        """Remove revisions not current at time *t* and, with pack-gc (or
        *gc*), objects unreachable from the root at *t*. Returns counts
        (a PackResult).

        *databases*, ``(this database's name, {database name: storage})``
        of a multi-database this storage is part of (see pack()), keeps
        the objects the other databases refer to: their records are read
        for their references to this one (see pack.multidb).

        *progress*, if given, is called after every committed batch with
        ``(done, total)`` counts of objects handled. *prepack_only* (default:
        the pack-prepack-only option) only finds the garbage and keeps the
        finding in the database; *use_prepack_state* (default:
        pack-skip-prepack) removes what the last such pre-pack found,
        to the pack time it used, instead of running one. *workers* is
        how many worker processes the pre-pack reads references in
        (default: the pack-workers option)."""
        pack = self.new_pack(t, referencesf, gc, progress, prepack_only,
                             use_prepack_state, workers)
        if databases is None or not pack.gc:
            result = pack.run()
        else:
            name, storages = databases
            result = pack_databases(
                storages, t, referencesf, [name], gc,
                {name: progress}, workers, prepack_only,
                use_prepack_state)[name]
            if isinstance(result, Exception):
                raise result
        log.info('packed %s to %s: %s', self._name, time.ctime(t),
                 dict(result))
        return result

    def new_pack(self, t, referencesf, gc=None, progress=None,
                 prepack_only=None, use_prepack_state=None, workers=None,
                 company=None):
        """A pack of this storage, as pack_with_result() makes (a
        storage.pack.pack.Pack, not yet run), alone or in the *company*
        of other databases (see storage.pack.multidb)."""
        self._commit.check_writable()
        options = self._options
        if gc is None:
            gc = options.pack_gc
        if prepack_only is None:
            prepack_only = options.pack_prepack_only
        if use_prepack_state is None:
            use_prepack_state = options.pack_skip_prepack
        if workers is None:
            workers = options.pack_workers
        if prepack_only and use_prepack_state:
            raise ValueError('a pack cannot both only pre-pack and skip the '
                             'pre-pack (pack-prepack-only and '
                             'pack-skip-prepack)')
        return Pack(self._adapter, options, self._cache, self._blobs,
                    self._metrics, t, referencesf, gc, progress,
                    prepack_only, use_prepack_state, workers, company)

    def keep_references(self, workers=None):
        """Read the references of every current state and keep them for
        the next pack (see keptrefs), removing nothing: what zodbconvert
        and relstorage-upgrade do once they have filled a database, so
        that its first pack unpickles only what changed since. Returns
        the pre-pack's figures (a PackResult)."""
        pack = self.new_pack(time.time(), referencesf, gc=True,
                             prepack_only=False, use_prepack_state=False,
                             workers=workers)
        pack.refs_only = True
        return pack.run()

    def zap_all(self):
        """Remove every object and transaction (tests, zodbconvert)."""
        if self._options.read_only:
            raise ReadOnlyError()
        self._adapter.zap_all()
        self._cache.clear()
        self._view.forget_all()
        self._free_oids = []

    cleanup = zap_all
