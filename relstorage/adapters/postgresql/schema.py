"""What PostgreSQL's schema has beyond the shared one: the oid sequence,
and the temporary table commits stage their rows in."""
from ..oidallocator import OID_BLOCK
from ..schema import Schema
from ..sql import SQL
from . import pooler
from .errors import sqlstate

TRUNCATE = SQL('TRUNCATE {tables}')
#: The server's lock_not_available.
LOCK_NOT_AVAILABLE = '55P03'


#: No primary key: the rows of an upload are unique already, and nothing
#: looks one up (the index cost 1 ms of a 1,000-row COPY's 4). Emptied at
#: each commit where the session keeps it; dropped there behind a
#: transaction pooler, where each store transaction creates it.
TEMP_STORE_TEMPLATE = SQL("""
CREATE TEMPORARY TABLE IF NOT EXISTS temp_store (
    zoid        BIGINT NOT NULL,
    prev_tid    BIGINT NOT NULL,
    state       BYTEA,
    blob_id     BIGINT
) ON COMMIT {end}
""")
TEMP_STORE_DDL = TEMP_STORE_TEMPLATE.format(end='DELETE ROWS')
POOLED_TEMP_STORE_DDL = TEMP_STORE_TEMPLATE.format(end='DROP')


class PostgreSQLSchema(Schema):
    extra_ddl = (
        'CREATE SEQUENCE zoid_seq INCREMENT BY %d START WITH 1' % OID_BLOCK,
    )
    # (The pack's scratch tables are the database's behind a transaction
    # pooler.)
    drop_extra_ddl = ('DROP SEQUENCE IF EXISTS zoid_seq',
                      pooler.DROP_SCRATCH)
    # RelStorage 4 keeps each blob chunk in a large object.
    rs4_piece_query = ('SELECT lo_get(chunk, %s - 1, %s) FROM blob_chunk '
                     'WHERE zoid = %s AND tid = %s AND chunk_num = %s')

    #: empty() truncates the tables larger than this.
    truncate_above_bytes = 8 << 20

    def empty(self, session):
        # A big table is truncated, not deleted from row by row, unless
        # another session holds it (a reader's snapshot): then deleted.
        big = [name for name, size in session.fetchall(
            'SELECT name, pg_relation_size(name::regclass) '
            'FROM unnest(%s::text[]) AS name',
            (list(self.tables),)) if size > self.truncate_above_bytes]
        if big:
            session.execute("SET LOCAL lock_timeout = '2s'; "
                            'SAVEPOINT rs_zap')
            try:
                session.execute(TRUNCATE.format(tables=', '.join(big)))
            except Exception as e:
                if sqlstate(e) != LOCK_NOT_AVAILABLE:
                    raise
                session.execute('ROLLBACK TO SAVEPOINT rs_zap')
        super().empty(session)
