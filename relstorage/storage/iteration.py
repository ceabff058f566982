"""Iterating over transactions (IStorageIteration) and over current
records (IStorageCurrentRecordIteration)."""
import threading
from collections import OrderedDict

from ZODB.BaseStorage import DataRecord
from ZODB.BaseStorage import TransactionRecord
from ZODB.utils import p64
from ZODB.utils import u64

#: Transactions fetched per query while iterating.
PAGE = 500
MAX_TID = 2 ** 63 - 1
#: Current records fetched per query by record_iternext; a walk's first
#: query fetches fewer, for callers that want only the first record.
RECORD_BATCH = 1000
FIRST_RECORD_BATCH = 50
#: Walks of record_iternext remembered at once (each holds the rest of
#: its batch); beyond them the oldest is forgotten and, if it is
#: continued, reads its next batch afresh.
WALKS = 4


def tid_bounds(start, stop):
    """*start* and *stop* (8-byte tids, or None for either end) as the
    integers a query takes: a stop past the largest tid a column holds is
    the newest transaction, and a start past it finds nothing (the
    database is not asked for a number its columns cannot hold)."""
    first = u64(start) if start is not None else 0
    last = min(u64(stop), MAX_TID) if stop is not None else MAX_TID
    return first, last


class RelTransactionRecord(TransactionRecord):
    """One transaction; iterating it yields its DataRecords."""

    def __init__(self, iterator, tid, user, description, extension, packed):
        super().__init__(p64(tid), 'p' if packed else ' ', user or b'',
                         description or b'', extension or b'')
        self._iterator = iterator
        self._itid = tid

    def __iter__(self):
        for oid, state, prev_tid in self._iterator._records(self._itid):
            yield DataRecord(p64(oid), self.tid, state, None)


class TransactionIterator:
    """Walks the transactions between two tids on a session of its own,
    so that iterating never disturbs the storage's snapshot."""

    def __init__(self, adapter, start, stop):
        self._adapter = adapter
        self._session = None  # opened at the first step
        self._done = False
        self._next, self._stop = tid_bounds(start, stop)
        self._page = []

    def __iter__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # An iterator abandoned half-way must not keep its connection (and,
        # on SQLite, its read snapshot) until the process exits.
        self.close()

    def __next__(self):
        if not self._page:
            if self._done or self._next > self._stop:
                self.close()
                raise StopIteration
            if self._session is None:
                self._session = self._adapter.open_load_session()
                self._session.restart()
            self._page = self._session.transactions(
                self._next, self._stop, limit=PAGE)
            if not self._page:
                self.close()
                raise StopIteration
            self._page.reverse()
            self._next = self._page[0][0] + 1
        return RelTransactionRecord(self, *self._page.pop())

    def _records(self, tid):
        if self._session is None:
            raise ValueError('the iterator was closed')
        return self._session.records(tid)

    def close(self):
        self._done = True
        session, self._session = self._session, None
        if session is not None:
            session.close()


class RecordWalk:
    """What record_iternext read ahead: the rest of one batch of current
    records (``(oid, tid, state)``, the next last), read in one snapshot."""

    __slots__ = ('rows', 'ended', 'mark')

    def __init__(self, rows, limit, mark):
        rows.reverse()
        self.rows = rows
        #: The batch was short: nothing came after it in its snapshot.
        self.ended = len(rows) < limit
        #: What the view was when the batch was read (see Iteration._mark).
        self.mark = mark


class Iteration:
    """iterator() and record_iternext() of one storage instance: the
    first on sessions of its own, the second through its *view*.

    record_iternext reads current records in batches ordered by oid, each
    batch in one snapshot (the instance's, or for a storage used directly
    the newest at that moment), and serves the calls from the batch. The
    *next* it returns is the next record's oid: a call given it continues
    from the batch, any other value (an oid to start at, as with
    FileStorage) reads a new batch from there. What a caller sees when the
    database changes between calls: each record as it was in the snapshot
    of its batch (its tid and state always belong together), every object
    that exists throughout exactly once, in oid order; an object created
    or deleted meanwhile may be seen or not. After this instance commits
    or moves to a newer snapshot, the next call reads afresh, so that its
    own changes are seen.
    """

    def __init__(self, adapter, view):
        self.adapter = adapter
        self.view = view
        self._lock = threading.Lock()
        #: The oid each walk serves next -> its RecordWalk, oldest first.
        self._walks = OrderedDict()

    def iterator(self, start=None, stop=None):
        return TransactionIterator(self.adapter, start, stop)

    def _mark(self):
        """What makes read-ahead records stale: a commit of this instance
        and, for an instance of a ZODB connection, a newer snapshot (a
        storage used directly reads the newest data at each batch)."""
        view = self.view
        return view.last_tid, (None if view.is_root else view.tid)

    def _read(self, start, limit):
        rows = self.view.read(
            lambda session: session.iter_current_records(start, limit))
        # (After the read, which may have moved the view.)
        return RecordWalk(rows, limit, self._mark())

    def record_iternext(self, next=None):
        start = u64(next) if next is not None else 0
        if start > MAX_TID:
            raise ValueError('no more records')
        with self._lock:
            walk = self._walks.pop(start, None)
            if walk is None:
                walk = self._read(start, FIRST_RECORD_BATCH)
            elif walk.mark != self._mark():
                walk = self._read(start, RECORD_BATCH)
            if not walk.rows:
                raise ValueError('no more records')
            oid, tid, state = walk.rows.pop()
            if not walk.rows and not walk.ended and oid < MAX_TID:
                walk = self._read(oid + 1, RECORD_BATCH)
            next_oid = None
            if walk.rows:
                following = walk.rows[-1][0]
                next_oid = p64(following)
                self._walks[following] = walk
                while len(self._walks) > WALKS:
                    self._walks.popitem(last=False)
        return p64(oid), p64(tid), state, next_oid
