"""SQLite's vote claims: the commit transaction is the database's only
writer from its vote to its end (BEGIN IMMEDIATE), which is claim enough;
another session asks by trying to become the writer without waiting (a
writer that is not a voted commit is waited for too: it ends soon)."""
from ..votes import VoteClaims


class SQLiteVoteClaims(VoteClaims):

    def pending(self, session):
        adapter = self.adapter
        locker = adapter.locker
        last = locker.begin_with_commit_lock(
            session, adapter.mover.last_tid_sql, 0)
        if last is locker.BUSY:
            return True
        session.rollback()
        return False
