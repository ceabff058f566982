"""Moving object states between Python and the tables, per history mode.

``HistoryPreservingMover`` and ``HistoryFreeMover`` hold the statements for
loading, uploading into the per-connection ``temp_store`` table and making
uploaded rows current. Adapters subclass them only where their SQL differs
(for example the upsert spelling).
"""
from zope.interface import implementer

from ..exceptions import CorruptRecord
from .._util import chunks
from .session import in_list
from .sql import SQL
from .sql import Rows


#: One statement (so one consistent view, even outside any transaction)
#: giving the newest tid, on the row whose oid is -1, and each object
#: changed after ``%s`` up to it, with its tid.
#:
#: No row the statement sees is newer than the newest tid it sees (both
#: are written by the same transactions), so the scan's upper bound is the
#: largest tid there can be: a constant, unlike the newest tid, so that
#: PostgreSQL's planner estimates the rows from the index's statistics (a
#: handful) rather than as a fixed share of the table, which chose a
#: parallel plan on a large table; and with no statistics at all (a table
#: never analyzed) a range on both sides still leads it to the index,
#: where ``tid > %s`` alone made it scan the whole table.
POLL = SQL('SELECT -1, ({last}){no_table} UNION ALL SELECT zoid, tid '
           'FROM {table} WHERE tid > %s AND tid <= 9223372036854775807')
#: An INSERT ... SELECT that replaces the row of an existing key: the
#: columns, the SELECT, what a database needs before its upsert clause
#: (insert_select_where), and that clause (Mover.upsert).
UPSERT_SELECT = SQL('INSERT INTO {table} ({cols}) {select}{where}{upsert}')
from .blobs import BLOB_OF
from .components import IMover


def all_bytes(states):
    """*states* (a tuple of a column) as bytes, or None if one is NULL (a
    deleted object's). (The types are asked first: ``None in`` a tuple of
    a driver's memoryviews has each compare itself to None, at the cost
    of a TypeError made and dropped.)"""
    types = set(map(type, states))
    if types == _BYTES:
        return states
    if type(None) in types:
        return None
    return tuple(map(bytes, states))


_BYTES = {bytes}


@implementer(IMover)
class Mover:
    """What both modes share."""

    #: Ends an ``INSERT ... SELECT`` that replaces on key conflict;
    #: ``{sets}`` becomes one ``upsert_set`` per column to overwrite.
    #: (A database whose clause names no key leaves ``{key}`` out.)
    upsert_suffix = SQL(' ON CONFLICT ({key}) DO UPDATE SET {sets}')
    upsert_set = SQL('{col} = excluded.{col}')
    #: Some databases need a WHERE before ON CONFLICT in INSERT ... SELECT.
    insert_select_where = ' WHERE TRUE'
    #: The byte length of temp_store's state, 0 for NULL.
    state_length_clause = 'COALESCE(LENGTH(state), 0)'
    #: The byte length of a blob chunk ``chunk`` (NULL for NULL).
    chunk_length_clause = 'LENGTH(chunk)'
    #: Completes a SELECT that reads no table (Oracle's FROM DUAL).
    no_table = ''

    def __init__(self, adapter):
        self.adapter = adapter
        #: blob_of's statement (see blobs.BLOB_OF).
        self.blob_of_sql = BLOB_OF.format(length=self.chunk_length_clause)
        #: See POLL.
        self.poll_sql = POLL.format(last=self.last_tid_sql,
                                    no_table=self.no_table,
                                    table=self.current_table)

    #: Polls: the table with one row per object, holding its current tid.
    current_table = None

    def upsert(self, key, cols):
        sets = ', '.join(self.upsert_set.format(col=c) for c in cols)
        parts = {'key': key} if 'key' in self.upsert_suffix.slots else {}
        return self.upsert_suffix.format(sets=sets, **parts)

    def upsert_select(self, table, key, cols, select_sql):
        """A statement writing the rows of *select_sql* (whose columns
        are named as *cols*) into *table*, replacing the row of an
        existing *key*."""
        return UPSERT_SELECT.format(
            table=table, cols=', '.join(cols), select=select_sql,
            where=self.insert_select_where,
            upsert=self.upsert(key, [col for col in cols if col != key]))

    # Loading

    def fetch_current(self, session, oid):
        """The ``(state, tid, state_size)`` row of *oid*, or None."""
        return session.fetchone(self.load_current_sql, (oid,))

    def load_current(self, session, oid):
        row = self.fetch_current(session, oid)
        if row is None:
            return None, None
        return self.checked(oid, *row)

    def checked(self, oid, state, tid, size):
        """``(state, tid)`` of a row read with its state_size;
        CorruptRecord, naming the object, when they disagree or when the
        row's ids are out of range."""
        if oid < 0 or tid < 0:
            self.out_of_range(oid, tid)
        if state is None:
            return None, tid
        state = bytes(state)
        if len(state) != size:
            # The row was changed by something else than the storage (which
            # writes both together), or damaged: say which, rather than
            # hand ZODB bytes that fail to unpickle without naming it.
            raise CorruptRecord(
                'the state of object 0x%x (transaction %016x) in the %s is '
                'damaged: %d bytes where %d were written'
                % (oid, tid, self.adapter.describe(), len(state), size))
        return state, tid

    def checked_states(self, rows):
        """``(oids, tids, states)``, in columns, of the ``(oid, tid, state,
        size)`` *rows* that hold a state (not deleted), each checked as by
        checked() (a page of current records)."""
        if not rows:
            return (), (), ()
        oids, tids, states, sizes = zip(*rows)
        states = all_bytes(states)
        if states is not None:
            # The usual page: every state checked at once.
            if (tuple(map(len, states)) == sizes
                    and min(oids) >= 0 and min(tids) >= 0):
                return oids, tids, states
        kept = []
        add = kept.append
        for oid, tid, state, size in rows:
            if state is not None:
                state = bytes(state)
                if len(state) == size and oid >= 0 and tid >= 0:
                    add((oid, tid, state))
                    continue
            self.checked(oid, state, tid, size)  # raises unless deleted
        return tuple(zip(*kept)) if kept else ((), (), ())

    def out_of_range(self, oid, tid):
        """A row naming a negative oid or tid: nothing the storage writes
        (ids are unsigned 64-bit values kept below 2**63), so the row was
        written by something else; ZODB could not even spell its ids."""
        raise CorruptRecord(
            'a row of the %s has an id out of range (object %d, transaction '
            '%d; ids are never negative): it was not written by the storage'
            % (self.adapter.describe(), oid, tid))

    def load_many(self, session, oids):
        """``{oid: (state, tid)}`` of the current revisions of those of
        *oids* that exist."""
        result = {}
        checked = self.checked
        for chunk in chunks(oids):
            sql = self.load_many_sql % in_list(chunk)
            for oid, state, tid, size in session.fetchall(sql, chunk):
                result[oid] = checked(oid, state, tid, size)
        return result

    def current_tids(self, session, oids):
        """``{oid: tid}`` of the current revisions of *oids*, unlocked."""
        result = {}
        for chunk in chunks(oids):
            sql = self.current_tids_sql % in_list(chunk)
            result.update(session.fetchall(sql, chunk))
        return result

    def load_revision(self, session, oid, tid):
        row = session.fetchone(
            'SELECT state, state_size FROM object_state '
            'WHERE zoid = %s AND tid = %s', (oid, tid))
        if row is None:
            return None, False
        return self.checked(oid, row[0], tid, row[1])[0], True

    # Storing

    def upload(self, session, rows):
        """Put ``(oid, prev_tid, state, blob_id)`` rows into temp_store."""
        session.executemany(
            'INSERT INTO temp_store (zoid, prev_tid, state, blob_id) '
            'VALUES (%s, %s, %s, %s)', rows)

    def split_direct(self, rows):
        """``(direct, rest)``: the rows of a commit whose tid is not imposed
        that :meth:`copy_into_place` writes at commit, once the tid is
        chosen, and the rest, which go through temp_store. Here: none."""
        return (), rows

    def copy_into_place(self, session, rows, tid):
        """Write the *rows* :meth:`split_direct` chose into place as *tid*,
        inside the commit transaction, before the commit script (which
        then runs :meth:`after_copy`)."""
        raise NotImplementedError

    def after_copy(self, tid):
        """Statements that complete :meth:`copy_into_place`."""
        return []

    def clear_temp(self, session):
        session.execute('DELETE FROM temp_store')

    def write_in_place(self, session, rows, tid):
        """Write ``(oid, prev_tid, state, blob_id)`` rows straight into
        their tables as *tid*, with multi-row statements, instead of
        uploading them for ``move_into_place``; only for a commit
        transaction that is the only writer from vote on."""
        # Each row takes at most six parameters.
        per_statement = max(1, min(500, self.adapter.max_params // 6))
        for chunk in chunks(rows, per_statement):
            for stmt, params in self._in_place(chunk, tid):
                session.execute(stmt, params)


class HistoryPreservingMover(Mover):

    #: load_current_sql and load_many_sql with a slot for a hint after
    #: SELECT (the join order, say), which a database may fill.
    load_current_template = SQL(
        'SELECT {hint}s.state, s.tid, s.state_size FROM current_object c '
        'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE c.zoid = %s')
    load_many_template = SQL(
        'SELECT {hint}s.zoid, s.state, s.tid, s.state_size '
        'FROM current_object c '
        'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE c.zoid IN %s')
    load_current_sql = load_current_template.format(hint='')
    load_many_sql = load_many_template.format(hint='')
    current_tids_sql = 'SELECT zoid, tid FROM current_object WHERE zoid IN %s'
    # Every revision in the range, from the history: exact whatever view
    # it is read in (a newer revision does not hide an older one).
    changes_sql = ('SELECT zoid, tid FROM object_state '
                   'WHERE tid > %s AND tid <= %s')
    last_tid_sql = 'SELECT COALESCE(MAX(tid), 0) FROM transactions'
    lock_table = 'current_object'

    def __init__(self, adapter):
        super().__init__(adapter)
        #: Copies temp_store's rows into object_state as the tid given.
        self.move_states_sql = SQL(
            'INSERT INTO object_state '
            '(zoid, tid, prev_tid, state_size, state, blob_id) '
            'SELECT zoid, %s, prev_tid, {length}, state, blob_id '
            'FROM temp_store').format(length=self.state_length_clause)
        #: Makes temp_store's objects current as the tid given.
        self.move_current_sql = self.upsert_select(
            'current_object', 'zoid', ('zoid', 'tid'),
            'SELECT zoid, %s AS tid FROM temp_store')
        #: Ends an INSERT of (zoid, tid) rows into current_object.
        self.upsert_current_clause = self.upsert('zoid', ('tid',))
        #: _in_place's INSERTs, by the number of rows.
        self.insert_states = Rows(
            SQL('INSERT INTO object_state (zoid, tid, prev_tid, state_size, '
                'state, blob_id) VALUES {rows}'), '(%s, %s, %s, %s, %s, %s)')
        self.insert_current = Rows(
            SQL('INSERT INTO current_object (zoid, tid) VALUES '
                '{rows}{upsert}'), '(%s, %s)',
            upsert=self.upsert_current_clause)

    def committed_probe(self, tid, oid):
        """A statement counting what proves that *tid* committed (its
        row in transactions)."""
        return 'SELECT COUNT(*) FROM transactions WHERE tid = %s', (tid,)
    current_table = 'current_object'

    def load_before(self, session, oid, tid):
        row = session.fetchone(
            'SELECT state, tid, state_size FROM object_state '
            'WHERE zoid = %s AND tid < %s ORDER BY tid DESC LIMIT 1',
            (oid, tid))
        if row is None:
            return None
        state, start = self.checked(oid, *row)
        end = session.scalar(
            'SELECT MIN(tid) FROM object_state WHERE zoid = %s AND tid > %s',
            (oid, start))
        return state, start, end

    def move_into_place(self, tid, own_tids=False):
        """Statements that make the uploaded rows current as *tid* (a row
        with a NULL state records that the object is gone)."""
        if own_tids:
            raise ValueError('rows keep their own tids only without history')
        return [
            (self.move_states_sql, (tid,)),
            (self.move_current_sql, (tid,)),
        ]

    def _in_place(self, rows, tid):
        states = []
        current = []
        for oid, prev_tid, state, blob_id in rows:
            states += (oid, tid, prev_tid,
                       len(state) if state is not None else 0, state, blob_id)
            current += (oid, tid)
        return [
            (self.insert_states.text(len(rows)), states),
            (self.insert_current.text(len(rows)), current),
        ]

    def add_transaction(self, tid, meta, packed=False, empty=False):
        """Statements that record transaction *tid*."""
        return [
            ('INSERT INTO transactions '
             '(tid, packed, is_empty, username, description, extension) '
             'VALUES (%s, %s, %s, %s, %s, %s)',
             (tid, packed, empty, meta[0], meta[1], meta[2])),
        ]


class HistoryFreeMover(Mover):

    load_current_sql = ('SELECT state, tid, state_size FROM object_state '
                        'WHERE zoid = %s')
    load_many_sql = ('SELECT zoid, state, tid, state_size FROM object_state '
                     'WHERE zoid IN %s')
    current_tids_sql = 'SELECT zoid, tid FROM object_state WHERE zoid IN %s'
    changes_sql = ('SELECT zoid, tid FROM object_state '
                   'WHERE tid > %s AND tid <= %s')
    last_tid_sql = 'SELECT tid FROM last_transaction WHERE id = 0'
    lock_table = 'object_state'

    #: What temp_store's rows become in object_state: {tid} is the tid
    #: given (a parameter) or each row's own (its prev_tid column).
    MOVE = SQL('SELECT zoid, {tid} AS tid, {length} AS state_size, state, '
               'blob_id FROM temp_store')

    def __init__(self, adapter):
        super().__init__(adapter)
        cols = ('zoid', 'tid', 'state_size', 'state', 'blob_id')
        #: move_into_place's statement, by own_tids.
        self.move_sql = {
            own_tids: self.upsert_select('object_state', 'zoid', cols,
                                         self.MOVE.format(
                                             tid=tid,
                                             length=self.state_length_clause))
            for own_tids, tid in ((False, '%s'), (True, 'prev_tid'))}
        #: _in_place's INSERT (of whole rows), by the number of rows.
        self.insert_states = Rows(
            SQL('INSERT INTO object_state ({cols}) VALUES {rows}{upsert}'),
            '(%s, %s, %s, %s, %s)', cols=', '.join(cols),
            upsert=self.upsert('zoid', cols[1:]))

    def committed_probe(self, tid, oid):
        # The only trace of a history-free transaction is its rows; one of
        # them, written as *tid*, proves it committed (None: no row to ask).
        if oid is None:
            return None
        return ('SELECT COUNT(*) FROM object_state WHERE zoid = %s '
                'AND tid = %s', (oid, tid))
    current_table = 'object_state'

    def load_before(self, session, oid, tid):
        row = session.fetchone(
            'SELECT state, tid, state_size FROM object_state '
            'WHERE zoid = %s AND tid < %s', (oid, tid))
        if row is None:
            return None
        state, start = self.checked(oid, *row)
        return state, start, None

    def move_into_place(self, tid, own_tids=False):
        # A deleted object keeps its row, with a NULL state, as a tombstone:
        # polls by other processes see the deletion at its tid and drop
        # their cached state (pack removes tombstones). With *own_tids*
        # (a copy) each row keeps the tid uploaded in its prev_tid column.
        return [(self.move_sql[own_tids], () if own_tids else (tid,))]

    def _in_place(self, rows, tid):
        params = []
        for oid, _, state, blob_id in rows:
            params += (oid, tid, len(state) if state is not None else 0,
                       state, blob_id)
        return [(self.insert_states.text(len(rows)), params)]

    def add_transaction(self, tid, meta, packed=False, empty=False):
        return [('UPDATE last_transaction SET tid = %s WHERE id = 0', (tid,))]
