"""Iterating over transactions (IStorageIteration) and over current
records (IStorageCurrentRecordIteration)."""
import struct
import threading
from itertools import repeat

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
#: Records taken from a stream at a time: a stream costs no round trip
#: per batch, and a small batch is still in the processor's cache when
#: its records are handed out.
STREAM_BATCH = 200
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
        oids, states = self._iterator._records(self._itid)
        return map(DataRecord, map(_pack, oids), repeat(self.tid), states,
                   repeat(None))


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
    """What record_iternext read ahead: one batch of current records,
    each as record_iternext returns it (``(oid, tid, state, next)``, oid
    and tid as 8 bytes, the next last; the batch's last record has no
    *next* yet, None), the position of the one served next, what the
    view was when it was read (see Iteration.record_iternext) and where
    its next batch comes from (a source: see StreamSource, PageSource)."""

    __slots__ = ('rows', 'pos', 'source', 'view', 'last_tid', 'tid')

    def __init__(self, columns, view, source):
        self.source = source
        self.view = view
        self.take(columns)

    def take(self, columns):
        """Serve the batch *columns* (``(oids, tids, states)``) next, as
        read in the view as it is now (a read may have moved it)."""
        view = self.view
        self.last_tid = view.last_tid
        self.tid = None if view.is_root else view.tid
        oids, tids, states = columns
        # (The adapter refused negative ids: they pack.)
        oids = list(map(_pack, oids))
        following = oids[1:]
        following.append(None)
        self.pos = 0
        self.rows = list(zip(oids, map(_pack, tids), states, following))

    def serves(self, oid, view):
        """Whether the record this walk serves next is *oid*'s (8 bytes),
        as *view* should see it (the view has not moved since the batch
        was read, see Iteration)."""
        rows, pos = self.rows, self.pos
        return (pos < len(rows) and rows[pos][0] == oid
                and self.last_tid == view.last_tid
                and (self.tid is None or self.tid == view.tid))

    def left(self):
        """The records of the batch not yet served."""
        return max(len(self.rows) - self.pos, 0)

    def next_batch(self):
        """Read the next batch: False after the last."""
        try:
            columns = self.source.batch(RECORD_BATCH)
        except BaseException:
            self.close()
            raise
        if columns is None:
            self.close()  # nothing more to read: the snapshot ends now
            return False
        self.take(columns)
        return True

    def close(self):
        self.source.close()


class Source:
    """Where a walk's batches come from, on a session of the walk's own
    (None: none)."""

    __slots__ = ('session',)

    def close(self):
        session, self.session = self.session, None
        if session is not None:
            session.close()


class StreamSource(Source):
    """The batches of a walk of a storage used directly: one statement's
    stream, on a session of the walk's own, in one snapshot."""

    __slots__ = ('records',)

    def __init__(self, session, records):
        self.session = session
        self.records = records

    def batch(self, size):
        return self.records.batch(min(size, STREAM_BATCH))

    def reusable(self):
        """The session, for another walk, if its stream ended (what a
        stream left half-way holds is dropped with its connection)."""
        session, self.session = self.session, None
        if session is not None and not self.records.ended:
            session.close()
            return None
        return session


class PageSource(Source):
    """The batches of a walk read a page (one query) at a time: on a
    session of the walk's own (None: in the view's snapshot, for an
    instance of a ZODB connection)."""

    __slots__ = ('view', 'resume')

    def __init__(self, view, session, resume):
        self.view = view
        self.session = session
        #: The oid (an int) the next page starts at, None after the last.
        self.resume = resume

    def batch(self, size):
        def fetch(session):
            while self.resume is not None:
                columns, resume = session.iter_current_records(
                    self.resume, size)
                self.resume = resume if resume is not None and (
                    resume <= MAX_TID) else None
                if columns[0]:
                    return columns
            return None
        return (self.view.read(fetch) if self.session is None
                else fetch(self.session))

    def reusable(self):
        session, self.session = self.session, None
        return session


def next_key(mapping):
    """The first key of *mapping*."""
    return next(iter(mapping))


class Iteration:
    """iterator() and record_iternext() of one storage instance: the
    first on sessions of its own, the second in batches.

    record_iternext reads current records in batches ordered by oid and
    serves the calls from the batch it holds. A walk of a storage used
    directly (zodbverify, zodbupdate) reads them as one statement,
    streamed, in one snapshot on a session of its own, from its first
    call until its last record (or until it is dropped: see WALKS,
    release()); where the session cannot stream, and for an instance of
    a ZODB connection (in its own snapshot), a page at a time. The *next*
    it returns is the next record's oid: a call given it continues the
    walk, any other value (an oid to start at, as with FileStorage)
    begins one there. What a caller sees when the database changes
    between calls: the records as of the walk's snapshot (each record's
    tid and state belong together), every object that exists throughout
    exactly once, in oid order; an object created or deleted meanwhile
    may be seen or not. After this instance commits or moves to a newer
    snapshot, the next call reads from a new one, so that its own
    changes are seen.
    """

    def __init__(self, adapter, view):
        self.adapter = adapter
        self.view = view
        self._lock = threading.Lock()
        #: The walk the last call continued; the others: the oid (8
        #: bytes) each serves next -> RecordWalk, least recently continued
        #: first.
        self._last = None
        self._walks = {}

    def iterator(self, start=None, stop=None):
        return TransactionIterator(self.adapter, start, stop)

    def _source(self, start, walk):
        """Where a walk from oid *start* (an int) reads its batches (a
        stale *walk*'s session reused where it can be)."""
        if not self.view.is_root:
            if walk is not None:
                walk.close()
            return PageSource(self.view, None, start)
        session = walk.source.reusable() if walk is not None else None
        if session is None:
            # On the read-write server: a replica's snapshot could be
            # older than what this instance has seen.
            session = self.adapter.open_load_session(primary=True)
        try:
            session.restart()
            records = session.stream_current_records(start)
        except BaseException:
            session.close()
            raise
        if records is None:
            return PageSource(self.view, session, start)
        return StreamSource(session, records)

    def _begin(self, next, walk):
        """The walk for a call given *next* that no fresh walk serves
        (*walk*: a stale one, or None)."""
        start = u64(next) if next is not None else 0
        if start > MAX_TID:
            if walk is not None:
                walk.close()
            raise ValueError('no more records')
        source = self._source(start, walk)
        try:
            columns = source.batch(FIRST_RECORD_BATCH if walk is None
                                   else RECORD_BATCH)
        except BaseException:
            source.close()
            raise
        if columns is None:
            source.close()
            raise ValueError('no more records')
        return RecordWalk(columns, self.view, source)

    def record_iternext(self, next=None):
        # The usual call continues the walk the last call continued,
        # within its batch: served without the lock, since what it
        # returns proves itself (the record of the oid asked for, of a
        # walk the view has not left) whatever another thread does
        # meanwhile; where it does not, the call goes the long way.
        walk = self._last
        if walk is not None:
            rows = walk.rows
            pos = walk.pos
            if pos < len(rows) - 1:
                record = rows[pos]
                if record[0] == next:
                    view = self.view
                    if (walk.last_tid == view.last_tid
                            and (walk.tid is None or walk.tid == view.tid)):
                        walk.pos = pos + 1
                        return record
        with self._lock:
            return self._step(next)

    def _step(self, next):
        """record_iternext(*next*) for any other call (under the lock)."""
        view = self.view
        walks = self._walks
        last, self._last = self._last, None
        if last is not None and last.left():
            self._keep(last)
        walk = walks.pop(next, None)
        # Records read ahead may hide what this instance should see once
        # it committed or (an instance of a ZODB connection) moved to a
        # newer snapshot.
        if walk is None or not walk.serves(next, view):
            walk = self._begin(next, walk)
        rows = walk.rows
        record = rows[walk.pos]
        walk.pos += 1
        if walk.pos < len(rows):
            following = record[3]
        else:
            if not walk.next_batch():
                return record  # the last: its next is None
            following = walk.rows[0][0]
            record = record[:3] + (following,)
        other = walks.pop(following, None)
        if other is not None:
            other.close()  # another walk at the same place: one is kept
        self._last = walk
        if len(walks) >= WALKS:
            walks.pop(next_key(walks)).close()
        return record

    def _keep(self, walk):
        """Remember *walk*, under the oid it serves next."""
        following = walk.rows[walk.pos][0]
        other = self._walks.pop(following, None)
        if other is not None:
            other.close()
        self._walks[following] = walk

    def held(self):
        """The records read ahead, of every walk."""
        with self._lock:
            walks = list(self._walks.values())
            if self._last is not None:
                walks.append(self._last)
            return sum(walk.left() for walk in walks)

    def release(self):
        """Drop the walks (closing their sessions)."""
        with self._lock:
            walks, self._walks = list(self._walks.values()), {}
            if self._last is not None:
                walks.append(self._last)
            self._last = None
        for walk in walks:
            walk.close()
