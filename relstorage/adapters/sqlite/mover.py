"""SQLite's mover: the hottest statement run straight on the cursor."""
from ..mover import HistoryFreeMover
from ..mover import HistoryPreservingMover


class SQLiteMoverMixin:
    # SQLite's parser needs a WHERE before ON CONFLICT in INSERT ... SELECT;
    # the history-free statement has one of its own.
    insert_select_where = ' WHERE 1'

    def fetch_current(self, session, oid):
        # The hottest statement, run in-process: straight to the cursor
        # (an embedded database has no connection to lose, and a busy
        # writer does not block readers in WAL mode).
        with session.lock:
            session.count_round_trip()
            return session.cursor.execute(
                session.translate(self.load_current_sql), (oid,)).fetchone()


class SQLiteHPMover(SQLiteMoverMixin, HistoryPreservingMover):
    pass


class SQLiteHFMover(SQLiteMoverMixin, HistoryFreeMover):
    pass
