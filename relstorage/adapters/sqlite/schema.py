"""SQLite's column types, the temporary table commits stage their rows
in, and where RelStorage 4 keeps its tables (a file of its own)."""
import os

from ..schema import Schema
from ..schema import Types
from ..schema import relstorage4_mode
from .files import RS4_FILE
from .files import open_read_only
from .session import SQLiteSession


TEMP_STORE_DDL = """
CREATE TEMP TABLE IF NOT EXISTS temp_store (
    zoid        INTEGER NOT NULL PRIMARY KEY,
    prev_tid    INTEGER NOT NULL,
    state       BLOB,
    blob_id     INTEGER
)
"""


class SQLiteTypes(Types):
    bigint = 'INTEGER'
    blob = 'BLOB'
    bool = 'BOOLEAN'
    true = '1'
    false = '0'


class SQLiteSchema(Schema):

    def relstorage4_mode(self, session):
        # RelStorage 4 keeps its tables in a file of its own, beside ours.
        path = os.path.join(self.adapter.data_dir, RS4_FILE)
        if not os.path.exists(path):
            return None
        conn = open_read_only(path)
        try:
            names = {name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
        return relstorage4_mode(names.__contains__)

    def relstorage4_session(self):
        adapter = self.adapter
        conn = open_read_only(os.path.join(adapter.data_dir, RS4_FILE))
        conn.isolation_level = None     # transactions are explicit
        return SQLiteSession(adapter, conn)
