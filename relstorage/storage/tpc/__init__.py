"""Two-phase commit.

``store`` and friends only buffer (``TransactionBuffer``); nothing touches
the database before ``tpc_vote``. Vote locks rows, detects and resolves
conflicts and uploads the states (``vote.py``); finish takes the short
commit lock, picks the tid and makes the rows current in one database
transaction (``finish.py``). Where the commit transaction is the only
writer from vote on (SQLite), vote does all of that but the COMMIT, so
that finish cannot fail for lack of room.
"""
import threading

from ZODB.POSException import ConflictError
from ZODB.POSException import ReadOnlyError
from ZODB.POSException import StorageTransactionError
from ZODB.utils import p64
from ZODB.utils import u64

from .finish import finish
from .vote import vote


class TransactionBuffer:
    """What one transaction has asked to store, before vote."""

    def __init__(self, transaction, restore_tid=None, status=' '):
        self.transaction = transaction
        self.restore_tid = restore_tid
        self.packed = status == 'p'
        #: oid -> (expected current tid, state or None for a deletion)
        self.stores = {}
        #: oids whose states are copied as they are (restore/undo):
        #: no conflict check.
        self.restored = set()
        #: oid -> tid that must still be current at vote (readCurrent)
        self.read_current = {}
        self.voting = False
        self.voted = False
        self.resolved = ()
        #: [(oid, prev_tid, state)] as uploaded at vote
        self.rows = ()
        #: oid -> the file of its new blob, owned by the storage
        self.blobs = {}
        #: committed blob files placed before the commit (shared blob-dir)
        self.placed = []
        #: oid -> the tid a restored history-free row keeps (its serial in
        #: the source), when a copy restores several source transactions
        #: as one (see relstorage.storage.copy)
        self.serials = {}
        #: Whether every store was checked against the revision this
        #: instance read as of its view (not so for restores, nor for
        #: undo, which starts from the newest revision).
        self.view_checked = True
        #: The metrics' timing of the phases (see relstorage.metrics).
        self.timing = None
        #: The commit's arguments, when vote prepared it (see vote.py).
        self.commit_args = None

    def own_serials(self):
        """The restored rows' own tids, if every row is restored with one
        (else None: every row gets the commit's tid)."""
        serials = self.serials
        if (self.restore_tid is None or not serials
                or len(serials) != len(self.stores)
                or max(serials.values()) > self.restore_tid):
            return None
        return serials


class Commit:
    """The two-phase commit protocol of one storage instance, and the
    store session it commits on (opened at first use).

    *blobs* is the storage's blob helper (or None), *metrics* its
    recorder; *resolve* is ZODB's tryToResolveConflict, bound to the
    storage; *end_snapshot* ends the instance's read snapshot (see
    vote.py) and *after_commit* tells the view what was committed (see
    view.View.after_commit).
    """

    def __init__(self, adapter, read_only, blobs, metrics, resolve,
                 end_snapshot, after_commit):
        self.adapter = adapter
        self.read_only = read_only
        self.blobs = blobs
        self.metrics = metrics
        self.resolve = resolve
        self.end_snapshot = end_snapshot
        self.after_commit = after_commit
        #: The store session, or None until it is first needed.
        self.session = None
        self.store_lock = threading.Lock()
        #: The TransactionBuffer of the transaction in progress, or None.
        self.tpc = None
        self.tpc_lock = threading.Lock()

    def store_session(self):
        """The store session, opened if need be."""
        if self.session is None:
            with self.store_lock:
                if self.session is None:
                    self.session = self.adapter.open_store_session()
        return self.session

    def release(self):
        """Close the store session (reopened when next needed)."""
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def check_writable(self):
        if self.read_only:
            raise ReadOnlyError()

    def buffer_for(self, transaction):
        """The buffer of *transaction*, which must be the one in
        progress."""
        tpc = self.tpc
        if tpc is None or tpc.transaction is not transaction:
            raise StorageTransactionError(self, transaction)
        return tpc

    def tpc_transaction(self):
        tpc = self.tpc
        return tpc.transaction if tpc is not None else None

    def tpc_begin(self, transaction, tid=None, status=' '):
        self.check_writable()
        tpc = self.tpc
        if tpc is not None and tpc.transaction is transaction:
            raise StorageTransactionError(
                'Duplicate tpc_begin calls for same transaction')
        buffer = TransactionBuffer(
            transaction, u64(tid) if tid is not None else None, status)
        buffer.timing = self.metrics.commit_timing()
        # A storage used directly by several threads commits one
        # transaction at a time, like every ZODB storage.
        self.tpc_lock.acquire()
        self.tpc = buffer

    def store(self, oid, serial, data, version, transaction):
        tpc = self.tpc
        if (tpc is None or tpc.transaction is not transaction or version
                or isinstance(serial, str)):
            # The rare cases, and the errors, off the path taken once per
            # object of every commit.
            self.check_writable()
            if version:
                raise StorageTransactionError('versions are not supported')
            tpc = self.buffer_for(transaction)
            if isinstance(serial, str):  # some callers spell z64 as a str
                serial = serial.encode('latin-1')
        tpc.stores[int.from_bytes(oid, 'big')] = (
            int.from_bytes(serial, 'big') if serial else 0, data)

    def restore(self, oid, serial, data, version, prev_txn, transaction):
        """Store a copied revision as it is (no conflict checks); *data*
        None records that the object does not exist in this revision."""
        self.check_writable()
        tpc = self.buffer_for(transaction)
        ioid = u64(oid)
        tpc.stores[ioid] = (None, data)
        tpc.restored.add(ioid)
        tpc.view_checked = False
        if serial and not self.adapter.keep_history:
            tpc.serials[ioid] = u64(serial)

    def deleteObject(self, oid, oldserial, transaction):
        self.check_writable()
        tpc = self.buffer_for(transaction)
        tpc.stores[u64(oid)] = (u64(oldserial), None)

    def checkCurrentSerialInTransaction(self, oid, serial, transaction):
        tpc = self.buffer_for(transaction)
        tpc.read_current[u64(oid)] = u64(serial)

    def tpc_vote(self, transaction):
        tpc = self.buffer_for(transaction)
        if tpc.voted:
            return tpc.resolved
        tpc.voting = True
        tpc.timing.vote_begins()
        try:
            vote(self, tpc)
        except ConflictError as e:  # ReadConflictError too
            self.metrics.conflict_raised(e, tpc)
            raise
        finally:
            tpc.voting = False
        tpc.timing.vote_ends()
        tpc.voted = True
        return tpc.resolved

    def tpc_finish(self, transaction, f=None):
        tpc = self.buffer_for(transaction)
        try:
            if not tpc.voted:
                self.tpc_vote(transaction)
            tpc.timing.finish_begins()
            tid = finish(self, tpc)
            tpc.timing.finish_ends()
        except BaseException:
            # Nothing was committed; release every lock now, since the
            # transaction is over for this storage.
            self.tpc_abort(transaction)
            raise
        try:
            if f is not None:
                f(p64(tid))
        finally:
            self.end_tpc()
        return p64(tid)

    def tpc_abort(self, transaction):
        tpc = self.tpc
        if tpc is None or tpc.transaction is not transaction:
            return
        try:
            if self.session is not None:
                self.session.rollback()
        finally:
            try:
                if self.blobs is not None:
                    self.blobs.abort(tpc)
            finally:
                self.end_tpc()

    def end_tpc(self):
        self.tpc = None
        self.tpc_lock.release()
