"""Oids from an AUTO_INCREMENT table: each row inserted reserves a block."""
from ..oidallocator import OID_BLOCK
from ..oidallocator import OIDAllocator
from ..sql import SQL
from ..sql import Rows


#: Rows of new_oid, each reserving a block of oids.
NEW_OID_ROWS = Rows(SQL('INSERT INTO new_oid VALUES {rows}'), '()')


class MySQLOIDAllocator(OIDAllocator):
    """Each row inserted into ``new_oid`` reserves OID_BLOCK oids; the
    AUTO_INCREMENT counter is the only shared state, and InnoDB hands out
    its values without waiting for other transactions."""

    #: Whether one multi-row INSERT gets consecutive AUTO_INCREMENT
    #: values (not with innodb_autoinc_lock_mode 2); None: not asked yet.
    consecutive = None
    def __init__(self, adapter):
        super().__init__(adapter)
        #: Deletes the rows below the one just inserted (the server
        #: kind's: on a cluster only that row, see galera).
        self.delete_sql = adapter.kind.oid_delete_sql

    def new_blocks(self, session, blocks):
        with session.lock:
            if self.consecutive is None:
                self.consecutive = session.scalar(
                    'SELECT @@innodb_autoinc_lock_mode') != 2
            if not self.consecutive:
                blocks = 1
            # One statement, one commit: the rows get consecutive values,
            # LAST_INSERT_ID() being the first.
            session.execute(NEW_OID_ROWS.text(blocks))
            n = session.scalar('SELECT LAST_INSERT_ID()')
            session.execute(self.delete_sql, (n,))
        return [((n - 1) * OID_BLOCK + 1, blocks * OID_BLOCK)]

    def raise_to(self, max_oid):
        # The next block must start above max_oid.
        n = max_oid // OID_BLOCK + 1
        return [('INSERT IGNORE INTO new_oid (zoid) VALUES (%s)', (n,))]

    def reset(self, session):
        session.execute('DELETE FROM new_oid')
        session.execute('ALTER TABLE new_oid AUTO_INCREMENT = 1')
