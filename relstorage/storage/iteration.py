"""Iterating over transactions (IStorageIteration) and over current
records (IStorageCurrentRecordIteration)."""
import struct
import threading

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
#: its batch and, for a storage used directly, a session in a snapshot);
#: beyond them the oldest is closed and, if it is continued, reads its
#: next batch in a new snapshot.
WALKS = 4

_pack = struct.Struct('>Q').pack


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
    records, each as record_iternext returns it (``(oid, tid, state,
    next)``, oid and tid as 8 bytes, the next last; the batch's last
    record has no *next* yet, None), what the view was when it was read
    (see Iteration.record_iternext) and, for a storage used directly,
    the walk's own session, whose one snapshot its batches are read in."""

    __slots__ = ('rows', 'resume', 'last_tid', 'tid', 'session')

    def __init__(self, columns, resume, view, session):
        oids, tids, states = columns
        # (The adapter refused negative ids: they pack.)
        oids = list(map(_pack, oids))
        following = oids[1:]
        following.append(None)
        self.rows = rows = list(zip(oids, map(_pack, tids), states,
                                    following))
        rows.reverse()
        #: The oid the next batch starts at (an int), None after the last.
        self.resume = resume if resume is not None and (
            resume <= MAX_TID) else None
        self.last_tid = view.last_tid
        self.tid = None if view.is_root else view.tid
        self.session = session
        if self.resume is None:
            self.close()  # nothing more to read: the snapshot ends now

    def close(self):
        session, self.session = self.session, None
        if session is not None:
            session.close()


class Iteration:
    """iterator() and record_iternext() of one storage instance: the
    first on sessions of its own, the second in batches.

    record_iternext reads current records in batches ordered by oid and
    serves the calls from the batch it holds. A walk of a storage used
    directly (zodbverify, zodbupdate) reads its batches through one
    snapshot on a session of its own, from its first call until its last
    record (or until it is dropped: see WALKS, release()); an instance of
    a ZODB connection reads them in its own snapshot. The *next* it
    returns is the next record's oid: a call given it continues the walk,
    any other value (an oid to start at, as with FileStorage) begins one
    there. What a caller sees when the database changes between calls:
    the records as of the walk's snapshot (each record's tid and state
    belong together), every object that exists throughout exactly once,
    in oid order; an object created or deleted meanwhile may be seen or
    not. After this instance commits or moves to a newer snapshot, the
    next call reads from a new one, so that its own changes are seen.
    """

    def __init__(self, adapter, view):
        self.adapter = adapter
        self.view = view
        self._lock = threading.Lock()
        #: The oid (8 bytes) each walk serves next -> its RecordWalk,
        #: least recently continued first.
        self._walks = {}

    def iterator(self, start=None, stop=None):
        return TransactionIterator(self.adapter, start, stop)

    def _read(self, start, limit, session):
        """A RecordWalk of the records from oid *start* (an int), read on
        *session* (None: in the view's snapshot): the first batch that
        holds any (a batch of deleted objects holds none)."""
        def fetch(session):
            resume = start
            while True:
                columns, resume = session.iter_current_records(resume,
                                                               limit)
                if columns[0] or resume is None or resume > MAX_TID:
                    return columns, resume
        try:
            columns, resume = (self.view.read(fetch) if session is None
                               else fetch(session))
        except BaseException:
            if session is not None:
                session.close()
            raise
        # (After the read, which may have moved the view.)
        return RecordWalk(columns, resume, self.view, session)

    def _begin(self, next, walk):
        """The walk for a call given *next* that no fresh walk serves
        (*walk*: a stale one, or None)."""
        start = u64(next) if next is not None else 0
        if start > MAX_TID:
            if walk is not None:
                walk.close()
            raise ValueError('no more records')
        session = None
        if self.view.is_root:
            session = walk.session if walk is not None else None
            if session is None:
                # On the read-write server: a replica's snapshot could be
                # older than what this instance has seen.
                session = self.adapter.open_load_session(primary=True)
            try:
                session.restart()
            except BaseException:
                session.close()
                raise
        walk = self._read(start, FIRST_RECORD_BATCH
                          if walk is None else RECORD_BATCH, session)
        if not walk.rows:
            raise ValueError('no more records')
        return walk

    def record_iternext(self, next=None):
        view = self.view
        with self._lock:
            walks = self._walks
            walk = walks.pop(next, None)
            # Records read ahead may hide what this instance should see
            # once it committed or (an instance of a ZODB connection) moved
            # to a newer snapshot.
            if walk is None or walk.last_tid != view.last_tid or (
                    walk.tid is not None and walk.tid != view.tid):
                walk = self._begin(next, walk)
            rows = walk.rows
            record = rows.pop()
            if rows:
                following = record[3]
            else:
                if walk.resume is None:
                    return record  # the last: its next is None
                walk = self._read(walk.resume, RECORD_BATCH, walk.session)
                if not walk.rows:
                    return record
                following = walk.rows[-1][0]
                record = record[:3] + (following,)
            other = walks.pop(following, None)
            if other is not None:
                other.close()  # another walk at the same place: one is kept
            walks[following] = walk
            if len(walks) > WALKS:
                walks.pop(list(walks)[0]).close()
            return record

    def release(self):
        """Drop the walks (closing their sessions)."""
        with self._lock:
            walks, self._walks = self._walks, {}
        for walk in walks.values():
            walk.close()
