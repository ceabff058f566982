"""Oracle's column types and what its schema has beyond the shared one:
the oid sequence, a global temporary table for staged rows, and the
tables locked whole where DBMS_LOCK may not be executed."""
from ..oidallocator import OID_BLOCK
from ..packer import PACK_TABLES
from ..schema import Schema
from ..schema import Types
from ..sql import SQL


CREATE_SEQUENCE = ('CREATE SEQUENCE zoid_seq START WITH 1 INCREMENT BY %d'
                   % OID_BLOCK)

#: Staged rows: every session sees only its own, and COMMIT empties it.
TEMP_STORE_DDL = """
CREATE GLOBAL TEMPORARY TABLE temp_store (
    zoid        NUMBER(20) NOT NULL,
    prev_tid    NUMBER(20) NOT NULL,
    state       BLOB,
    blob_id     NUMBER(20)
) ON COMMIT DELETE ROWS
"""

#: Tables locked whole (LOCK TABLE) when DBMS_LOCK may not be executed.
LOCK_TABLES = ('commit_lock', 'pack_lock')
LOCK_TABLE_DDL = SQL(
    'CREATE TABLE {table} (id NUMBER(1) NOT NULL PRIMARY KEY)')
#: No DROP TABLE IF EXISTS before Oracle 23.
DROP_TABLE_PURGE = SQL('DROP TABLE {table} PURGE')


class OracleTypes(Types):
    bigint = 'NUMBER(20)'
    blob = 'BLOB'
    bool = 'NUMBER(1)'
    text = 'VARCHAR2(4000)'
    true = '1'
    false = '0'
    # Oracle stores a zero-length RAW or BLOB as NULL.
    bytes_not_null = ''


class OracleSchema(Schema):

    extra_ddl = (CREATE_SEQUENCE, TEMP_STORE_DDL) + tuple(
        LOCK_TABLE_DDL.format(table=table) for table in LOCK_TABLES)

    def drop_table(self, session, table):
        # No DROP TABLE IF EXISTS before Oracle 23.
        if session.table_exists(table):
            session.execute(DROP_TABLE_PURGE.format(table=table))

    def drop(self, session):
        super().drop(session)
        for table in ('temp_store',) + LOCK_TABLES + PACK_TABLES:
            self.drop_table(session, table)
        if session.sequence_exists('zoid_seq'):
            session.execute('DROP SEQUENCE zoid_seq')
