"""Queries over transactions and revisions: iteration, history, undo log.

Each method takes the session to run on as its first argument, so the
same queries serve load sessions (a snapshot) and store sessions (the
locked, latest view used while preparing an undo).
"""

from zope.interface import implementer

from .sql import SQL

from .inspect import HistoryFreeInspector
from .inspect import HistoryPreservingInspector
from .components import IHistoryPreservingIterator
from .components import IIterator
from .mover import all_bytes


def _ordered(template, **parts):
    """*template*'s statements by ``(newest first, limited)``, its other
    slots filled from *parts*."""
    return {
        (newest_first, limited): template.format(
            order=' DESC' if newest_first else '',
            limit=' LIMIT %s' if limited else '', **parts)
        for newest_first in (False, True) for limited in (False, True)}


#: Transactions between two tids (their metadata), by whether packed
#: ones are included, then as _ordered.
TRANSACTIONS = {
    packed: _ordered(SQL(
        'SELECT tid, username, description, extension, packed '
        'FROM transactions WHERE tid >= %s AND tid <= %s{packed} '
        'ORDER BY tid{order}{limit}'),
        packed='' if packed else ' AND packed = %s')
    for packed in (False, True)}
#: Without history: the tids between two that current revisions have.
#: (Read from the tid index alone: a transaction that only deleted
#: objects, whose rows wait for the pack, is one without records.)
CURRENT_TIDS = _ordered(SQL(
    'SELECT DISTINCT tid FROM object_state WHERE tid >= %s AND tid <= %s '
    'ORDER BY tid{order}{limit}'))


#: What iter_current_records reads of a page of current revisions (the
#: inspector's pages, where a deleted object's state is NULL).
CURRENT_RECORD_COLUMNS = 's.tid, s.state, s.state_size'
#: With history, a page as one join, for the servers whose planners read
#: it along current_object's primary key (ServerStatistics.
#: joins_along_the_key): the inspector's subquery makes SQLite sort the
#: joined rows, states and all, and MariaDB the subquery's result.
FLAT_CURRENT_RECORDS = SQL(
    'SELECT c.zoid, {columns} FROM current_object c '
    'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
    'WHERE c.zoid > %s ORDER BY c.zoid LIMIT %s').format(
        columns=CURRENT_RECORD_COLUMNS)


#: Every current record from an oid on, in oid order, as one statement
#: (a stream), with history and without.
STREAMED_CURRENT_RECORDS = {
    True: SQL(
        'SELECT c.zoid, {columns} FROM current_object c '
        'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE c.zoid >= %s ORDER BY c.zoid').format(
            columns=CURRENT_RECORD_COLUMNS),
    False: SQL(
        'SELECT s.zoid, {columns} FROM object_state s '
        'WHERE s.zoid >= %s ORDER BY s.zoid').format(
            columns=CURRENT_RECORD_COLUMNS),
}
#: With history, the same along object_state's key (see
#: ServerStatistics.revision_counts_sql), taken where objects have at
#: most this many revisions on average.
STREAMED_ALONG_REVISIONS = SQL(
    'SELECT s.zoid, {columns} FROM object_state s '
    'JOIN current_object c ON c.zoid = s.zoid AND c.tid = s.tid '
    'WHERE s.zoid >= %s ORDER BY s.zoid').format(
        columns=CURRENT_RECORD_COLUMNS)
FEW_REVISIONS = 1.5


class CurrentRecordStream:
    """The current records of one statement's stream, a batch of columns
    at a time (see Iterator.stream_current_records)."""

    def __init__(self, stream, mover):
        self.stream = stream
        self.mover = mover
        #: Whether every row was read.
        self.ended = False

    def batch(self, size):
        """``(oids, tids, states)`` of the current objects among the next
        rows (up to *size*, as iter_current_records), or None after the
        last."""
        while True:
            rows = self.stream.fetch(size)
            if not rows:
                self.ended = True
                return None
            columns = self.mover.checked_states(rows)
            if columns[0]:
                return columns

    def close(self):
        self.stream.close()


def _b(value):
    return bytes(value) if value is not None else None


@implementer(IIterator)
class Iterator:

    def __init__(self, adapter):
        self.adapter = adapter

    def iter_current_records(self, session, start_oid, limit):
        """``(records, resume)``: *records* ``(oids, tids, states)``, in
        columns, of the current objects among the next *limit* rows from
        *start_oid* on, in oid order (a damaged state is a CorruptRecord),
        and the oid the next page starts at, None after the last. A page
        is chosen by the primary key alone, so that each costs the same
        whatever the server's statistics say."""
        rows = session.fetchall(self.current_records_sql,
                                (start_oid - 1, limit))
        records = self.adapter.mover.checked_states(rows)
        resume = rows[-1][0] + 1 if len(rows) >= limit else None
        return records, resume

    def stream_current_records(self, session, start_oid):
        """A CurrentRecordStream of the current objects from *start_oid*
        on, in oid order, as one statement read a batch at a time (until
        it ends, *session* is the stream's), or None where the session
        cannot stream (then iter_current_records reads pages)."""
        stream = session.stream(self.streamed_records_sql(session),
                                (start_oid,))
        if stream is None:
            return None
        return CurrentRecordStream(stream, self.adapter.mover)

    def streamed_records_sql(self, session):
        """The statement of stream_current_records."""
        return STREAMED_CURRENT_RECORDS[self.keep_history]

    #: Whether records() yields the deletions of a transaction (its rows
    #: without a state).
    records_deleted = True

    def records(self, session, tid):
        """``(oids, states)`` written by transaction *tid*, in columns,
        sizes checked (a deletion's state None: see records_deleted)."""
        rows = session.fetchall(
            'SELECT zoid, state, state_size FROM object_state '
            'WHERE tid = %s ORDER BY zoid', (tid,))
        if not rows:
            return (), ()
        oids, states, sizes = zip(*rows)
        states = all_bytes(states) if tid >= 0 else None
        if states is not None:
            # The usual transaction: every state checked at once.
            if tuple(map(len, states)) == sizes and min(oids) >= 0:
                return oids, states
        checked = self.adapter.mover.checked
        rows = [(oid, checked(oid, state, tid, size)[0])
                for oid, state, size in rows
                if state is not None or self.records_deleted]
        return tuple(zip(*rows)) if rows else ((), ())

    def _history(self, oid, rows):
        """*rows* of object_history, their tids checked."""
        for row in rows:
            if row[0] < 0:
                self.adapter.mover.out_of_range(oid, row[0])
        return rows

    def object_count(self, session):
        return session.scalar(self.object_count_sql) or 0

    def size_in_bytes(self, session):
        """The bytes of object state kept, all revisions included."""
        return int(session.scalar(
            'SELECT COALESCE(SUM(state_size), 0) FROM object_state') or 0)


@implementer(IHistoryPreservingIterator)
class HistoryPreservingIterator(Iterator):

    keep_history = True

    def __init__(self, adapter):
        super().__init__(adapter)
        if adapter.statistics_class.joins_along_the_key:
            self.current_records_sql = FLAT_CURRENT_RECORDS

    current_records_sql = HistoryPreservingInspector.page_sql.format(
        columns=CURRENT_RECORD_COLUMNS)

    def streamed_records_sql(self, session):
        stats = self.adapter.statistics_class
        if stats.revision_counts_sql is not None:
            revisions, objects = session.fetchone(stats.revision_counts_sql)
            if objects and (revisions or 0) <= FEW_REVISIONS * objects:
                for stmt in stats.along_revisions_setup:
                    session.execute(stmt)
                return STREAMED_ALONG_REVISIONS
        return STREAMED_CURRENT_RECORDS[True]
    object_count_sql = (
        'SELECT COUNT(*) FROM current_object c '
        'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE s.state IS NOT NULL')

    def transactions(self, session, start, stop, newest_first=False,
                     include_packed=True, limit=None):
        """``[(tid, user, description, extension, packed)]``."""
        sql = TRANSACTIONS[include_packed][newest_first, limit is not None]
        params = [start, stop]
        if not include_packed:
            params.append(False)
        if limit is not None:
            params.append(limit)
        # A database that stores zero bytes as NULL (Oracle) gives None
        # for an empty user or description.
        return [(tid, _b(u) or b'', _b(d) or b'', _b(e) or b'', bool(p))
                for tid, u, d, e, p in session.fetchall(sql, params)]

    def object_history(self, session, oid, limit):
        """``[(tid, size, user, description, extension)]``, newest first."""
        return self._history(oid, [
            (tid, size, _b(u) or b'', _b(d) or b'', _b(e) or b'')
            for tid, size, u, d, e in session.fetchall(
                'SELECT s.tid, s.state_size, t.username, t.description, '
                't.extension FROM object_state s '
                'JOIN transactions t ON t.tid = s.tid '
                'WHERE s.zoid = %s ORDER BY s.tid DESC LIMIT %s',
                (oid, limit))])

    def transaction_exists(self, session, tid):
        row = session.fetchone(
            'SELECT packed FROM transactions WHERE tid = %s', (tid,))
        return None if row is None else bool(row[0])

    def states_before(self, session, tid):
        """For every object written by *tid*: ``(oid, state_before)``
        where state_before is what the object held just before *tid*
        (None when *tid* created it)."""
        rows = session.fetchall(
            'SELECT cur.zoid, prev.state, prev.tid FROM object_state cur '
            'LEFT JOIN object_state prev '
            'ON prev.zoid = cur.zoid AND prev.tid = cur.prev_tid '
            'WHERE cur.tid = %s ORDER BY cur.zoid', (tid,))
        return [(oid, _b(state), prev_tid) for oid, state, prev_tid in rows]


class HistoryFreeIterator(Iterator):

    keep_history = False

    # (Rows with a NULL state are tombstones of deleted objects.)
    current_records_sql = HistoryFreeInspector.page_sql.format(
        columns=CURRENT_RECORD_COLUMNS)
    object_count_sql = ('SELECT COUNT(*) FROM object_state '
                        'WHERE state IS NOT NULL')

    def transactions(self, session, start, stop, newest_first=False,
                     include_packed=True, limit=None):
        # Without history only the tids of current revisions remain; each
        # stands for a packed transaction with no metadata.
        sql = CURRENT_TIDS[newest_first, limit is not None]
        params = [start, stop]
        if limit is not None:
            params.append(limit)
        return [(tid, b'', b'', b'', True)
                for (tid,) in session.fetchall(sql, params)]

    #: (Rows without a state wait for the pack; they were deleted.)
    records_deleted = False

    def object_history(self, session, oid, limit):
        return self._history(oid, [
            (tid, size, b'', b'', b'') for tid, size in session.fetchall(
                'SELECT tid, state_size FROM object_state WHERE zoid = %s',
                (oid,))])
