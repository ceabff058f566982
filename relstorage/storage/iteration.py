"""Iterating over transactions (IStorageIteration) and over current
records (IStorageCurrentRecordIteration)."""
from ZODB.BaseStorage import DataRecord
from ZODB.BaseStorage import TransactionRecord
from ZODB.utils import p64
from ZODB.utils import u64

#: Transactions fetched per query while iterating.
PAGE = 500
MAX_TID = 2 ** 63 - 1


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


class Iteration:
    """iterator() and record_iternext() of one storage instance: the
    first on sessions of its own, the second through its *view*."""

    def __init__(self, adapter, view):
        self.adapter = adapter
        self.view = view

    def iterator(self, start=None, stop=None):
        return TransactionIterator(self.adapter, start, stop)

    def record_iternext(self, next=None):
        start = u64(next) if next is not None else 0
        if start > MAX_TID:
            raise ValueError('no more records')
        rows = self.view.read(
            lambda session: session.iter_current_records(start, 2))
        if not rows:
            raise ValueError('no more records')
        oid, tid, state = rows[0]
        next_oid = p64(rows[1][0]) if len(rows) > 1 else None
        return p64(oid), p64(tid), state, next_oid
