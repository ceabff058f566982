"""PostgreSQL specifics: zap_all truncates large tables, but never waits
for a reader to do so."""
import time

import pytest
from ZODB.POSException import POSKeyError

from .dbs import DatabaseFactory
from .dbs import admin_query
from .dbs import pg_dsn
from .test_mysql import _first_revision


@pytest.fixture(params=[True, False], ids=['hp', 'hf'])
def factory(request):
    f = DatabaseFactory('postgresql', request.param)
    yield f
    f.cleanup()


def _filenode(keep_history):
    return admin_query('postgresql', keep_history,
                       "SELECT pg_relation_filenode('object_state')")[0][0]


def test_zap_truncates_large_tables(factory):
    storage = factory.storage(zap=True)
    try:
        oid, _ = _first_revision(storage)
        before = _filenode(factory.keep_history)
        storage._adapter.truncate_above_bytes = 0   # every table is large
        storage.zap_all()
        # TRUNCATE gives the table new storage (DELETE keeps the old).
        assert _filenode(factory.keep_history) != before
        with pytest.raises(POSKeyError):
            storage.load(oid)
        assert len(storage) == 0
        _first_revision(storage)
        assert len(storage) == 1
    finally:
        storage.close()


def test_zap_deletes_when_a_reader_holds_the_table(factory):
    import psycopg2
    storage = factory.storage(zap=True, commit_lock_timeout=600)
    reader = psycopg2.connect(pg_dsn(factory.keep_history))
    try:
        oid, _ = _first_revision(storage)
        # A reader in a transaction: TRUNCATE would wait for it to end.
        reader.cursor().execute('SELECT count(*) FROM object_state')
        before = _filenode(factory.keep_history)
        storage._adapter.truncate_above_bytes = 0
        started = time.monotonic()
        storage.zap_all()
        # It gave up on TRUNCATE long before commit-lock-timeout.
        assert time.monotonic() - started < 60
        assert _filenode(factory.keep_history) == before
        reader.rollback()
        assert admin_query('postgresql', factory.keep_history,
                           'SELECT count(*) FROM object_state') == [(0,)]
        with pytest.raises(POSKeyError):
            storage.load(oid)
    finally:
        reader.close()
        storage.close()


def _wait_for(predicate, timeout=10):
    """Whether *predicate()* became true within *timeout* seconds (a
    notification travels on its own, shortly after the COMMIT)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def test_poll_interval_with_commit_announcements(factory):
    """With a poll-interval, every commit is announced (NOTIFY) to the
    load sessions listening: an instance within its interval sees another
    process's commit at once, and polls nothing while nobody commits."""
    import transaction
    import ZODB
    writer = ZODB.DB(factory.storage(zap=True))
    reader = ZODB.DB(factory.storage(poll_interval=3600))
    try:
        wtm = transaction.TransactionManager()
        wconn = writer.open(wtm)
        wconn.root()['x'] = 1
        wtm.commit()
        rtm = transaction.TransactionManager()
        rconn = reader.open(rtm)
        assert rconn.root()['x'] == 1
        rtm.abort()
        inst = rconn._storage
        session = inst._load.session
        assert session.fetchall('SELECT pg_listening_channels()') == [
            ('relstorage_commits',)]

        trips = session.round_trips
        for _ in range(5):          # nobody commits: no query at all
            rtm.begin()
            assert rconn.root()['x'] == 1
            rtm.abort()
        assert session.round_trips == trips

        wconn.root()['x'] = 2
        wtm.commit()

        def sees_it():
            rtm.begin()
            try:
                return rconn.root()['x'] == 2
            finally:
                rtm.abort()
        # Without the announcement the view would stay for an hour.
        assert _wait_for(sees_it)
        assert session.round_trips > trips
    finally:
        writer.close()
        reader.close()


def test_no_listening_without_a_poll_interval(factory):
    """Without an interval every transaction polls; a listening session
    would only pile notifications up in the driver."""
    storage = factory.storage(zap=True)
    try:
        storage._ensure_view()
        session = storage._load.session
        assert session.fetchall('SELECT pg_listening_channels()') == []
        assert storage._load.commits_announced() is None
    finally:
        storage.close()
