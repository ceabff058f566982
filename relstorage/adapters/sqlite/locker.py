"""SQLite's locks: the single writer is the commit lock (taken by BEGIN
IMMEDIATE at vote), and the pack lock a file lock beside the database."""
import fcntl
import os

from ...exceptions import CommitLockTimeout
from ..locker import Locker
from . import files


class SQLiteLocker(Locker):
    # BEGIN IMMEDIATE at vote already made this connection the only writer.
    exclusive_clause = ''
    shared_clause = ''

    def hold_commit_lock(self, session, last_tid_sql):
        return session.scalar(last_tid_sql)

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        # BEGIN IMMEDIATE already made this the writer, or raised when the
        # slot was taken (see begin_with_commit_lock).
        return session.scalar(last_tid_sql)

    def begin_with_commit_lock(self, session, last_tid_sql, wait=0):
        # The pack writer waits for the writer slot only when asked to.
        session.writer_wait = wait
        try:
            session.begin(self.adapter.store_begin_sql)
        except CommitLockTimeout:
            return self.BUSY
        finally:
            session.writer_wait = 0
        return session.scalar(last_tid_sql)

    def try_pack_lock(self, session):
        # An exclusive lock on a file beside the database, held by an open
        # descriptor that is closed with the session (or by the kernel
        # when the process dies).
        path = os.path.join(self.adapter.data_dir, 'pack.lock')
        fd = files.open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        session.on_close.append(lambda: os.close(fd))
        return True
