"""Upgrading a RelStorage 4 database on SQLite (see ..upgrade).

RelStorage 4 keeps its tables in ``main.sqlite3`` in the data-dir, and
this storage in ``relstorage.sqlite3`` beside it, so nothing needs
renaming: the old file is attached to the upgrade's connection and read,
and stays as it was until ``--drop-old`` removes it. While the upgrade
runs it holds the old file's write lock, so a RelStorage 4 process still
running cannot commit into a database being copied.
"""
import os
import sqlite3
import urllib.parse

from ..upgrade import Upgrade
from ...exceptions import UpgradeRefused
from . import errors
from . import files
from .files import MAIN_FILE
from .files import OID_FILE
from .files import RS4_FILE
from .session import SQLiteSession


def _existing(path):
    """The URI that opens the SQLite file at *path* without creating
    it."""
    return 'file:%s?mode=rw' % urllib.parse.quote(path)


class SQLiteUpgrade(Upgrade):

    old_tables = {'transaction': 'rs4."transaction"',
           'object_state': 'rs4.object_state',
           'current_object': 'rs4.current_object',
           'blob_chunk': 'rs4.blob_chunk'}

    _guard = None

    def _path(self):
        return os.path.join(self.adapter.data_dir, RS4_FILE)

    @staticmethod
    def _attached(session):
        return session.scalar(
            "SELECT COUNT(*) FROM pragma_database_list WHERE name = 'rs4'")

    def begin(self, session):
        # ATTACH cannot run inside a transaction.
        if not self._attached(session):
            if os.path.exists(self._path()):
                path = self._path()
                if getattr(session, 'reading', False):
                    path = _existing(path)
                session.execute('ATTACH DATABASE %s AS rs4', (path,))
        super().begin(session)

    def refuse_missing(self):
        # Connecting creates the directory and our file: not for nothing.
        if not any(os.path.exists(os.path.join(self.adapter.data_dir, name))
                   for name in (MAIN_FILE, RS4_FILE)):
            raise UpgradeRefused(
                '%s holds no RelStorage 4 database: nothing to upgrade (no '
                '%s there)' % (self.adapter.describe(), RS4_FILE))

    def reading_session(self):
        # Only files that exist are opened: ours when there is one, else
        # (the upgrade has not begun) RelStorage 4's alone, attached by
        # begin. Not with mode=ro: a reader of a WAL database that cannot
        # write leaves its -wal and -shm files behind.
        self.refuse_missing()
        main = self.adapter.main_path
        conn = sqlite3.connect(_existing(main) if os.path.exists(main)
                               else ':memory:', uri=True)
        conn.isolation_level = None     # transactions are explicit
        session = SQLiteSession(self.adapter, conn)
        session.reading = True
        return session

    def original_names(self):
        return self.old_tables

    def keep_out(self):
        guard = sqlite3.connect(self._path(), timeout=0,
                                isolation_level=None)
        try:
            guard.execute('BEGIN IMMEDIATE')
        except sqlite3.Error as e:
            guard.close()
            if errors.kind(e) != errors.BUSY:
                raise
            raise UpgradeRefused(
                '%s is in use: another process is writing to RelStorage 4\'s '
                '%s (%s); stop every RelStorage 4 process and run the upgrade '
                'again' % (self.adapter.describe(), RS4_FILE, e)) from None
        self._guard = guard

    def release(self):
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.rollback()
            guard.close()

    def rename_old(self, session):
        """Nothing clashes: the old tables are in a file of their own."""

    def renamed(self, session):
        # Where old_tables says whenever RelStorage 4's file is attached.
        return bool(self._attached(session)) and bool(session.scalar(
            "SELECT COUNT(*) FROM rs4.sqlite_master WHERE type = 'table' "
            "AND name = 'object_state'"))

    def cut_blobs(self, session, lo, hi):
        """RelStorage 4 keeps a blob whole in one row here: cut those into
        chunks of blob-chunk-size, the last shorter (empty when the size
        is a multiple)."""
        session.execute(
            'WITH RECURSIVE whole AS ('
            ' SELECT m.blob_id, c.chunk FROM rs4.blob_chunk c'
            ' JOIN upgrade_blob_map m ON m.zoid = c.zoid AND m.tid = c.tid'
            ' WHERE c.zoid > %s AND c.zoid <= %s AND NOT EXISTS (SELECT 1'
            ' FROM rs4.blob_chunk o WHERE o.zoid = c.zoid AND o.tid = c.tid'
            ' AND o.chunk_num <> c.chunk_num)),'
            ' pieces(blob_id, num) AS (SELECT blob_id, 0 FROM whole'
            ' UNION ALL SELECT p.blob_id, p.num + 1 FROM pieces p'
            ' JOIN whole w ON w.blob_id = p.blob_id'
            ' WHERE (p.num + 1) * %s <= LENGTH(w.chunk)) '
            'INSERT INTO blob_chunk (blob_id, chunk_num, chunk) '
            'SELECT p.blob_id, p.num, SUBSTR(w.chunk, p.num * %s + 1, %s) '
            'FROM pieces p JOIN whole w ON w.blob_id = p.blob_id',
            (lo, hi, self.chunk_size, self.chunk_size, self.chunk_size))

    def drop_old(self):
        # Files, not tables: checked in a session, removed after it.
        self.refuse_missing()
        session = self.adapter.connect(for_store=True)
        try:
            session.begin()
            self.refuse_unfinished(session)
        finally:
            session.rollback_quietly()
            session.close()
        for suffix in ('', '-wal', '-shm', '-journal'):
            try:
                os.remove(self._path() + suffix)
            except FileNotFoundError:
                pass
        # RelStorage 4's oid counter shares the oid file with ours.
        conn = files.connect(os.path.join(self.adapter.data_dir, OID_FILE),
                             self.adapter.options.commit_lock_timeout)
        try:
            conn.execute('DROP TABLE IF EXISTS new_oid')
        finally:
            conn.close()
