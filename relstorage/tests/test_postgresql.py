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
