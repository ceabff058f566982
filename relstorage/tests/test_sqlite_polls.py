"""poll-interval on SQLite: another connection's commit changes PRAGMA
data_version, so an instance within its interval polls as soon as
another process committed, and not at all while nobody does, as on
PostgreSQL with LISTEN/NOTIFY."""
import transaction
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.adapters.sqlite import SQLiteAdapter
from relstorage.options import Options
from relstorage.storage import RelStorage


def _db(path, **options):
    return ZODB.DB(RelStorage(SQLiteAdapter(str(path),
                                            options=Options(**options))))


def test_sqlite_polls_within_the_interval_only_after_a_commit(tmp_path):
    # Two storages on one database: two processes as far as SQLite knows.
    writer = _db(tmp_path)
    reader = _db(tmp_path, poll_interval=3600)
    try:
        with writer.transaction() as conn:
            conn.root()['a'] = PersistentMapping(n=1)
        tm = transaction.TransactionManager()
        conn = reader.open(transaction_manager=tm)
        tm.begin()
        assert conn.root()['a']['n'] == 1
        tm.abort()
        inst = conn._storage
        polled = inst._view.last_poll
        for _ in range(5):
            tm.begin()
            tm.abort()
        # Nobody committed: no poll within the interval.
        assert inst._view.last_poll == polled
        with writer.transaction() as other:
            other.root()['a']['n'] = 2
        tm.begin()
        # Seen at once, not after the hour.
        assert conn.root()['a']['n'] == 2
        assert inst._view.last_poll > polled
        tm.abort()
        conn.close()
    finally:
        writer.close()
        reader.close()
