"""MySQL's mover: uploads as multi-row INSERTs with states as hex
literals, ON DUPLICATE KEY upserts, and loads that read current_object
first."""
from ..mover import HistoryFreeMover
from ..mover import HistoryPreservingMover
from ..sql import SQL


#: temp_store's multi-row INSERT, by (with a previous tid, with a blob
#: id): the columns holding only their default in a chunk are left out;
#: the rows fill {rows} per chunk.
TEMP_STORE_INSERT = SQL('INSERT INTO temp_store ({cols}) VALUES {rows}')
TEMP_STORE_INSERTS = {
    (prev, blob): TEMP_STORE_INSERT.fill(cols=', '.join(
        ['zoid'] + ['prev_tid'] * prev + ['state'] + ['blob_id'] * blob))
    for prev in (False, True) for blob in (False, True)}


class MySQLMoverMixin:
    upsert_suffix = SQL(' ON DUPLICATE KEY UPDATE {sets}')
    # MySQL 8.0.20 deprecated VALUES(col) here (with a warning) in favour
    # of row aliases, which MariaDB lacks; VALUES() works on both.
    upsert_set = SQL('{col} = VALUES({col})')
    insert_select_where = ''

    #: Bytes of SQL per multi-row INSERT: a quarter of the server's
    #: default max_allowed_packet (16 MB).
    upload_bytes = 4000000
    #: States up to this size go into the statement as hex literals;
    #: larger ones as parameters, which the driver escapes (about 1.03
    #: times their size instead of 2).
    inline_state_bytes = 1 << 20

    def upload(self, session, rows):
        chunk, size = [], 0
        for row in rows:
            chunk.append(row)
            size += 2 * len(row[2] or b'') + 48
            if size >= self.upload_bytes or len(chunk) >= 1000:
                self._insert(session, chunk)
                chunk, size = [], 0
        if chunk:
            self._insert(session, chunk)

    def _insert(self, session, chunk):
        # Columns that hold only their default in this chunk (no previous
        # tid: new objects; no blob) are left out.
        with_prev = any(row[1] for row in chunk)
        with_blob = any(row[3] is not None for row in chunk)
        rows_sql, params = row_literals(chunk, with_prev, with_blob,
                                        self.inline_state_bytes)
        session.execute(TEMP_STORE_INSERTS[with_prev, with_blob].format(
            rows=', '.join(rows_sql)), params or None)


def row_literals(chunk, with_prev, with_blob, inline):
    """The ``(zoid[, prev_tid], state[, blob_id])`` tuples of *chunk*
    written as SQL, and the parameters they leave to the driver.

    The drivers quote every parameter in Python (about 4 ms per 1,000
    rows), and the server reads a hex literal faster than an escaped
    string (1,000 rows of 200 bytes: 4 ms against 7), so states up to
    *inline* bytes go in as ``X'...'``; larger ones, where doubling the
    size would matter, stay ``%s`` parameters. Nothing but integers,
    ``NULL`` and hex digits is formatted in."""
    rows_sql = []
    params = []
    for oid, prev_tid, state, blob_id in chunk:
        if state is None:
            state_sql = 'NULL'
        elif len(state) <= inline:
            state_sql = "X'%s'" % state.hex()
        else:
            params.append(state)
            state_sql = '%s'
        row = ['%d' % oid]
        if with_prev:
            row.append('%d' % prev_tid)
        row.append(state_sql)
        if with_blob:
            row.append('NULL' if blob_id is None else '%d' % blob_id)
        rows_sql.append('(%s)' % ', '.join(row))
    return rows_sql, params


#: Fills the hint slot of a statement joining current_object to
#: object_state: read in that order, each object's current row, then its
#: revision by the whole primary key. Left to itself, MariaDB read
#: object_state first, every revision of each oid, once its statistics
#: said the table was empty: after a DELETE of the database's 1,000,000
#: revisions (zap_all), reading 1,000 objects stored since took 2.5 s
#: instead of 0.02 s until InnoDB had purged the deleted rows (they are
#: read too).
CURRENT_FIRST = 'STRAIGHT_JOIN '


class MySQLHPMover(MySQLMoverMixin, HistoryPreservingMover):
    load_current_sql = HistoryPreservingMover.load_current_template.format(
        hint=CURRENT_FIRST)
    load_many_sql = HistoryPreservingMover.load_many_template.format(
        hint=CURRENT_FIRST)


class MySQLHFMover(MySQLMoverMixin, HistoryFreeMover):
    pass
