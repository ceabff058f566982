"""Queries over transactions and revisions: iteration, history, undo log.

Each method takes the session to run on as its first argument, so the
same queries serve load sessions (a snapshot) and store sessions (the
locked, latest view used while preparing an undo).
"""

from zope.interface import implementer

from .interfaces import IIterator
from .interfaces import IHistoryPreservingIterator


def _b(value):
    return bytes(value) if value is not None else None


@implementer(IIterator)
class Iterator:

    def __init__(self, adapter):
        self.adapter = adapter

    def iter_current_records(self, session, start_oid, limit):
        """``[(oid, tid, state)]`` of current objects with oid >=
        *start_oid*, in oid order; a damaged state is a CorruptRecord."""
        checked = self.adapter.mover.checked
        params = (start_oid,) * self.current_records_bounds + (limit,)
        return [(oid, tid, checked(oid, state, tid, size)[0])
                for oid, tid, state, size in session.fetchall(
                    self.current_records_sql, params)]

    def _records(self, session, sql, tid):
        """``[(oid, state, prev_tid)]`` of *sql*'s rows ``(oid, state,
        state_size, prev_tid)`` of transaction *tid*, sizes checked."""
        checked = self.adapter.mover.checked
        return [(oid, checked(oid, state, tid, size)[0], prev)
                for oid, state, size, prev in session.fetchall(sql, (tid,))]

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

    # The oid bound is given for both tables: PostgreSQL merge-joined
    # them, reading object_state from its first row at every call
    # (record_iternext, a call per object, grew with the oid).
    current_records_sql = (
        'SELECT c.zoid, c.tid, s.state, s.state_size FROM current_object c '
        'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE c.zoid >= %s AND s.zoid >= %s AND s.state IS NOT NULL '
        'ORDER BY c.zoid LIMIT %s')
    current_records_bounds = 2
    object_count_sql = (
        'SELECT COUNT(*) FROM current_object c '
        'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE s.state IS NOT NULL')

    def transactions(self, session, start, stop, newest_first=False,
                     include_packed=True, limit=None):
        """``[(tid, user, description, extension, packed)]``."""
        sql = ('SELECT tid, username, description, extension, packed '
               'FROM transactions WHERE tid >= %s AND tid <= %s')
        if not include_packed:
            sql += ' AND packed = %s'
        sql += ' ORDER BY tid' + (' DESC' if newest_first else '')
        params = [start, stop]
        if not include_packed:
            params.append(False)
        if limit is not None:
            sql += ' LIMIT %s'
            params.append(limit)
        # A database that stores zero bytes as NULL (Oracle) gives None
        # for an empty user or description.
        return [(tid, _b(u) or b'', _b(d) or b'', _b(e) or b'', bool(p))
                for tid, u, d, e, p in session.fetchall(sql, params)]

    def records(self, session, tid):
        """``[(oid, state, prev_tid)]`` written by transaction *tid*."""
        return self._records(
            session, 'SELECT zoid, state, state_size, prev_tid '
            'FROM object_state WHERE tid = %s ORDER BY zoid', tid)

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

    # Rows with a NULL state are tombstones of deleted objects.
    current_records_sql = (
        'SELECT zoid, tid, state, state_size FROM object_state '
        'WHERE zoid >= %s '
        'AND state IS NOT NULL ORDER BY zoid LIMIT %s')
    current_records_bounds = 1
    object_count_sql = ('SELECT COUNT(*) FROM object_state '
                        'WHERE state IS NOT NULL')

    def transactions(self, session, start, stop, newest_first=False,
                     include_packed=True, limit=None):
        # Without history only the tids of current revisions remain; each
        # stands for a packed transaction with no metadata.
        sql = ('SELECT DISTINCT tid FROM object_state '
               'WHERE tid >= %s AND tid <= %s AND state IS NOT NULL '
               'ORDER BY tid'
               + (' DESC' if newest_first else ''))
        params = [start, stop]
        if limit is not None:
            sql += ' LIMIT %s'
            params.append(limit)
        return [(tid, b'', b'', b'', True)
                for (tid,) in session.fetchall(sql, params)]

    def records(self, session, tid):
        return self._records(
            session, 'SELECT zoid, state, state_size, NULL FROM object_state '
            'WHERE tid = %s AND state IS NOT NULL ORDER BY zoid', tid)

    def object_history(self, session, oid, limit):
        return self._history(oid, [
            (tid, size, b'', b'', b'') for tid, size in session.fetchall(
                'SELECT tid, state_size FROM object_state WHERE zoid = %s',
                (oid,))])
