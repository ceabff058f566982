"""RelStorage: the ZODB-facing storage. It knows ZODB and never writes SQL;
everything database-specific happens behind ``relstorage.adapters``."""
import logging
import threading
import time
import weakref
from collections import OrderedDict

import ZODB.interfaces
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.POSException import ReadOnlyError
from ZODB.utils import p64
from zope.interface import alsoProvides
from zope.interface import implementer

from ..blobs import make_blobs
from ..cache import StorageCache
from ..cache import persist
from ..metrics import recorder_for
from .blobs import BlobMethods
from .copy import copy_transactions
from .history import History
from .iteration import Iteration
from .load import Loader
from .pack import Pack
from .readahead import ReadAhead
from .tpc import TPC

log = logging.getLogger(__name__)

#: The most oid blocks (of OID_BLOCK oids) an instance reserves at once.
MAX_OID_BLOCKS = 1024


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
class RelStorage(Loader, TPC, History, Iteration, BlobMethods,
                 ConflictResolvingStorage):
    """A ZODB storage in a relational database.

    The object the application creates is the *root* storage; ZODB asks it
    for one ``new_instance()`` per connection. All instances share the
    adapter and the process-wide pickle cache; each has its own database
    sessions and snapshot.
    """

    _load = None
    _store = None

    def __init__(self, adapter, name=None, options=None, _parent=None):
        if options is None:
            options = adapter.options
        self._adapter = adapter
        self._options = options
        self._name = name or options.name or adapter.describe()
        self._is_root = _parent is None
        if _parent is None:
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
            self._cache = StorageCache(
                int(options.cache_local_mb * 1000000),
                object_max_bytes=options.cache_local_object_max,
                delta_limit=options.cache_delta_size_limit)
            self._blobs = make_blobs(options, adapter.keep_history,
                                     adapter.cache_key)
            self._persist = None
            if options.cache_local_dir and self._cache.limit_bytes:
                self._persist = persist.PersistentCache.open(
                    adapter, options, self._cache.limit_bytes)
            if self._persist is not None:
                self._persist.warm(self._cache, adapter)
            self._metrics = recorder_for(self)
        else:
            self._cache = _parent._cache
            self._blobs = _parent._blobs
            self._metrics = _parent._metrics
        self._load_lock = threading.RLock()
        self._load_acquire = self._load_lock.acquire
        self._load_release = self._load_lock.release
        self._tpc_lock = threading.Lock()
        self._oid_lock = threading.Lock()
        self._tpc = None
        self._view_tid = None
        #: Where the next poll may start instead of _view_tid: the tid of
        #: this instance's own last commit, when nothing else was committed
        #: between _view_tid and it (own changes are not invalidations).
        self._poll_base = None
        self._own_changes = []
        #: The tids of this instance's own commits since its view: their
        #: changes are no invalidations for it, whatever else committed.
        self._own_tids = set()
        self._last_poll = 0.0
        self._poll_forced = False
        self._poll_failed = False
        self._store_lock = threading.Lock()
        self._last_tid = 0
        self._free_oids = []
        self._oid_blocks = 1
        self._seen = None if adapter.keep_history else OrderedDict()
        # Read-ahead fills the shared cache: without one it is of no use.
        self._readahead = (ReadAhead(self._cache.holds)
                           if self._cache.limit_bytes else None)
        self._closed = False
        self._instances = weakref.WeakSet()
        if adapter.keep_history:
            alsoProvides(self, ZODB.interfaces.IStorageUndoable)
        if self._blobs is not None:
            alsoProvides(self, ZODB.interfaces.IBlobStorageRestoreable)

    # Instances

    def new_instance(self):
        instance = type(self)(self._adapter, self._name, self._options,
                              _parent=self)
        self._instances.add(instance)
        return instance

    def release(self):
        """Close this instance's database sessions (ZODB is done with the
        connection that used it)."""
        for attr in ('_load', '_store'):
            session = getattr(self, attr)
            if session is not None:
                setattr(self, attr, None)
                session.close()

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

    def _store_session(self):
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = self._adapter.open_store_session()
        return self._store

    # Simple facts

    def getName(self):
        return self._name

    def describe(self):
        """Which database this is, in words (never a password)."""
        return self._adapter.describe()

    sortKey = describe

    def isReadOnly(self):
        return self._options.read_only

    def lastTransaction(self):
        if self._is_root:
            # Commits happen through instances; ask the database.
            with self._reading():
                pass
        return p64(max(self._last_tid, self._view_tid or 0))

    def __len__(self):
        with self._reading():
            return self._load_session().object_count()

    def getSize(self):
        with self._reading():
            return self._load_session().size_in_bytes()

    def __repr__(self):
        return '<%s %s>' % (type(self).__name__, self._name)

    # Writing helpers used by the tpc phases

    def new_oid(self):
        # Called once per new object: the common case is one pop. (A
        # read-only storage never has free oids: _more_oids refuses.)
        with self._oid_lock:
            free = self._free_oids
            if not free:
                free = self._more_oids()
            return free.pop().to_bytes(8, 'big')

    def _more_oids(self):
        self._check_writable()
        ranges = self._adapter.new_oid_blocks(self._store_session(),
                                              self._oid_blocks)
        # An instance that keeps running out asks for more at once (an
        # unused rest is lost when it closes: oids are many).
        self._oid_blocks = min(self._oid_blocks * 2, MAX_OID_BLOCKS)
        free = []
        for first, count in reversed(ranges):
            free.extend(range(first + count - 1, first - 1, -1))
        self._free_oids = free
        return free

    def _after_commit(self, tid, rows, previous=None, serials=None,
                      checked=True):
        """*previous*: the newest tid before this commit, if known;
        *serials*: oid -> tid for rows that keep their own (copies);
        *checked*: every row was checked against the revision this
        instance read (no restore, no undo), so no other change of those
        objects since the view can hide behind this commit."""
        self._last_tid = tid
        self._poll_forced = True
        cache = self._cache
        # One (state, tid) tuple per object, held by both the shared cache
        # and this instance's _seen.
        if serials:
            committed = [(oid, (state, serials[oid]))
                         for oid, _, state in rows]
        else:
            committed = [(oid, (state, tid)) for oid, _, state in rows]
        with self._load_lock:
            cache.store_committed_many(committed)
            if checked:
                self._own_tids.add(tid)
            if self._seen is not None:
                remember = self._remember
                for oid, value in committed:
                    remember(oid, value)
            base = self._poll_base or self._view_tid
            if base is not None and previous == base:
                self._poll_base = tid
                # What changed between the view and this commit: exactly
                # these rows; the next poll tells the shared cache, so
                # that it serves them. Flat (oid, tid, oid, tid...): ints,
                # which the garbage collector does not count, where a
                # tuple per object would live until that poll.
                own = self._own_changes
                for oid, value in committed:
                    own.append(oid)
                    own.append(value[1])
            else:
                self._poll_base = None
                del self._own_changes[:]

    # Whole-database operations

    @property
    def restores_transactions_together(self):
        """Whether a copy may restore several source transactions in one
        commit (see relstorage.storage.copy): without history, yes."""
        return not self._adapter.keep_history

    def copyTransactionsFrom(self, other, verbose=False):
        copy_transactions(other, self)

    def pack(self, t, referencesf, gc=None, progress=None):
        """IStorage.pack: see pack_with_result (this returns None)."""
        self.pack_with_result(t, referencesf, gc, progress)

    def pack_with_result(self, t, referencesf, gc=None, progress=None,
                         prepack_only=None, use_prepack_state=None,
                         workers=None):
        """Remove revisions not current at time *t* and, with pack-gc (or
        *gc*), objects unreachable from the root at *t*. Returns counts
        (a PackResult).

        *progress*, if given, is called after every committed batch with
        ``(done, total)`` counts of objects handled. *prepack_only* (default:
        the pack-prepack-only option) only finds the garbage and keeps the
        finding in the database; *use_prepack_state* (default:
        pack-skip-prepack) removes what the last such pre-pack found,
        to the pack time it used, instead of running one. *workers* is
        how many worker processes the pre-pack reads references in
        (default: the pack-workers option)."""
        self._check_writable()
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
        result = Pack(self, t, referencesf, gc, progress, prepack_only,
                      use_prepack_state, workers).run()
        log.info('packed %s to %s: %s', self._name, time.ctime(t),
                 dict(result))
        return result

    def zap_all(self):
        """Remove every object and transaction (tests, zodbconvert)."""
        if self._options.read_only:
            raise ReadOnlyError()
        self._adapter.zap_all()
        self._cache.clear()
        with self._load_lock:
            self._view_tid = self._poll_base = None
            del self._own_changes[:]
            self._own_tids.clear()
            self._last_tid = 0
        self._free_oids = []

    cleanup = zap_all
