"""PostgreSQL's mover: the load statement prepared once per connection,
uploads and new rows written with COPY where the driver can (see
``can_copy``), else through the generic statements."""
import re

from ZODB.POSException import ConflictError
from ZODB.utils import p64

from ..mover import HistoryFreeMover
from ..mover import HistoryPreservingMover
from ..sql import SQL
from ..sql import numbered
from . import pooler
from .copyin import binary_copy
from .copyin import copy_in

#: The load statement, prepared once per connection.
PREPARE_LOAD = SQL('PREPARE rs_load_current (bigint) AS {load}')


class PostgreSQLMoverMixin:

    def __init__(self, adapter):
        super().__init__(adapter)
        #: Whether the driver can COPY (psycopg2 refuses it while a wait
        #: callback is installed, under gevent): else rows go through
        #: temp_store by the generic statements.
        self.can_copy = adapter.driver.can_copy
        self.prepare_load_sql = PREPARE_LOAD.format(
            load=numbered(self.load_current_sql))

    def fetch_current(self, session, oid):
        # The most frequent statement, planned once per connection (a
        # prepared statement outlives transactions and their rollbacks).
        try:
            if not session.load_prepared:
                session.execute(self.prepare_load_sql)
                session.load_prepared = True
            return session.fetchone('EXECUTE rs_load_current (%s)', (oid,))
        except self.adapter.driver.session_state_errors as e:
            # Another client's server session, lent by a pooler.
            raise pooler.transaction_pooler_error(
                self.adapter, 'prepared statements come and go: %s'
                % type(e).__name__) from None

    def upload(self, session, rows):
        if not self.can_copy:
            return super().upload(session, rows)
        # COPY in PostgreSQL's binary format: the server neither parses
        # SQL text nor decodes escaped bytes (two round trips: the
        # statement, then the rows).
        copy_in(session, 'COPY temp_store (zoid, prev_tid, state, blob_id) '
              'FROM STDIN WITH (FORMAT binary)', binary_copy(rows))


class PostgreSQLHPMover(PostgreSQLMoverMixin, HistoryPreservingMover):

    # Every row of a commit is a new (zoid, tid): COPY puts them in
    # place at commit, and current_object follows from the new tid's
    # rows, with no pass through temp_store.

    def split_direct(self, rows):
        if not self.can_copy:
            return super().split_direct(rows)
        return rows, ()

    def copy_into_place(self, session, rows, tid):
        copy_in(session, 'COPY object_state (zoid, tid, prev_tid, state_size, '
              'state, blob_id) FROM STDIN WITH (FORMAT binary)',
              binary_copy(rows, tid, with_prev=True))

    def __init__(self, adapter):
        super().__init__(adapter)
        #: after_copy's statement.
        self.current_of_tid_sql = SQL(
            'INSERT INTO current_object (zoid, tid) SELECT zoid, tid '
            'FROM object_state WHERE tid = %s{upsert}').format(
                upsert=self.upsert_current_clause)

    def after_copy(self, tid):
        return [(self.current_of_tid_sql, (tid,))]


class PostgreSQLHFMover(PostgreSQLMoverMixin, HistoryFreeMover):

    # A new object's row is copied into object_state at commit: no pass
    # through temp_store and no upsert (1,000 new rows: 9 ms instead of
    # 15, COMMIT included). The vote found no row for it; only a
    # transaction storing the same oid as new (an oid not from new_oid)
    # can have added one since, and the COPY then fails instead of
    # overwriting it.

    def split_direct(self, rows):
        if not self.can_copy:
            return super().split_direct(rows)
        new = [row for row in rows if not row[1]]
        if not new:
            return (), rows
        return new, [row for row in rows if row[1]]

    def copy_into_place(self, session, rows, tid):
        try:
            copy_in(session, 'COPY object_state (zoid, tid, state_size, '
                  'state, blob_id) FROM STDIN WITH (FORMAT binary)',
                  binary_copy(rows, tid))
        except self.adapter.driver.errors.UniqueViolation as e:
            # Told by its SQLSTATE (23505); the key is in the detail.
            found = re.search(r'\(zoid\)=\((\d+)\)',
                              e.diag.message_detail or '')
            oid = int(found.group(1)) if found else None
            raise ConflictError(
                'object %s was created by another transaction after this '
                'one voted to create it; nothing was committed'
                % ('0x%x' % oid if oid is not None else '(unknown)'),
                oid=p64(oid) if oid is not None else None) from None
