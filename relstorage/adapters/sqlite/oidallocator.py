"""Oids from a one-row table in a file of their own, so that allocating an
oid never waits for a committing transaction."""
import contextlib
import os
import sqlite3

from ..oidallocator import OID_BLOCK
from ..oidallocator import OIDAllocator
from . import errors
from . import files
from .files import OID_FILE


class SQLiteOIDAllocator(OIDAllocator):
    """Oids come from a one-row table in a file of their own."""

    def __init__(self, adapter):
        super().__init__(adapter)
        self._conn = None

    def _connection(self):
        if self._conn is None:
            conn = files.connect(
                os.path.join(self.adapter.data_dir, OID_FILE),
                self.adapter.options.commit_lock_timeout,
                [('journal_mode', 'wal')])
            conn.execute(
                'CREATE TABLE IF NOT EXISTS next_oid '
                '(id INTEGER PRIMARY KEY, next INTEGER NOT NULL)')
            self._conn = conn
        return self._conn

    def _ensure_row(self, conn, session):
        if conn.execute('SELECT COUNT(*) FROM next_oid').fetchone()[0] == 0:
            # A new (or lost) oid file starts above every stored oid.
            start = (session.scalar('SELECT MAX(zoid) FROM object_state')
                     or 0) + 1
            conn.execute('INSERT OR IGNORE INTO next_oid (id, next) '
                         'VALUES (0, ?)', (start,))

    @contextlib.contextmanager
    def _classified(self):
        """The oid file's errors told like the database's (DatabaseFull
        for no room, CommitLockTimeout for a lock held too long)."""
        try:
            yield
        except sqlite3.Error as e:
            errors.raise_classified(e, self.adapter.describe(),
                                    self.adapter.options.commit_lock_timeout)
            raise

    def new_blocks(self, session, blocks):
        count = blocks * OID_BLOCK
        with self._classified(), self.adapter.oid_lock:
            conn = self._connection()
            self._ensure_row(conn, session)
            first = conn.execute(
                'UPDATE next_oid SET next = next + ? WHERE id = 0 '
                'RETURNING next', (count,)).fetchone()[0] - count
        return [(first, count)]

    def raise_to(self, max_oid):
        # The counter lives in its own file, so it is raised at once rather
        # than in the commit's transaction; raising it early is harmless.
        with self._classified(), self.adapter.oid_lock:
            conn = self._connection()
            if conn.execute('SELECT COUNT(*) FROM next_oid').fetchone()[0]:
                conn.execute('UPDATE next_oid SET next = MAX(next, ?) '
                             'WHERE id = 0', (max_oid + 1,))
            else:
                conn.execute('INSERT INTO next_oid (id, next) VALUES (0, ?)',
                             (max_oid + 1,))
        return []

    def reset(self, session):
        with self._classified(), self.adapter.oid_lock:
            self._connection().execute('DELETE FROM next_oid')

    def reset_after_drop(self):
        self.reset(None)

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
