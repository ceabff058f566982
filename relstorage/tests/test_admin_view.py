"""What Zope's Database page shows of a storage: getSize() is the
database's size on disk, as the server tells it without reading the
tables; getName() names the server and database (never a password)."""
import os
import sqlite3

import ZODB
from persistent.mapping import PersistentMapping

from relstorage.testing.dbs import admin_query


def _server_bytes(factory):
    """The database's size on disk, asked as an administrator would."""
    if factory.db == 'sqlite':
        path = os.path.join(factory.data_dir(), 'relstorage.sqlite3')
        conn = sqlite3.connect(path)
        try:
            return (conn.execute('PRAGMA page_count').fetchone()[0]
                    * conn.execute('PRAGMA page_size').fetchone()[0])
        finally:
            conn.close()
    if factory.db == 'postgresql':
        sql = 'SELECT pg_database_size(current_database())'
    else:
        sql = ('SELECT SUM(DATA_LENGTH + INDEX_LENGTH) FROM '
               'information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()')
    return int(admin_query(factory.db, factory.keep_history, sql)[0][0])


def test_get_size_is_the_size_on_disk(factory):
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            for i in range(50):
                conn.root()[i] = PersistentMapping(text='x' * 1000)
        storage = db.storage
        pickles = sum(len(storage.load(conn_oid)[0]) for conn_oid in
                      _oids(db))
        size = storage.getSize()
        assert size == _server_bytes(factory)
        # Not the sum of the pickles (what a scan of the states gave).
        assert size > pickles
    finally:
        db.close()


def _oids(db):
    with db.transaction() as conn:
        root = conn.root()
        return [root._p_oid] + [root[i]._p_oid for i in range(50)]


def test_get_name_names_server_and_database(factory):
    storage = factory.storage(name='main')
    try:
        name = storage.getName()
    finally:
        storage.close()
    assert name.startswith('main (')
    described = storage.adapter.describe()
    assert name == 'main (%s)' % described
    if factory.db == 'sqlite':
        assert factory.data_dir() in name
    else:
        assert 'host=' in name and 'relstoragetest' in name
    assert 'password' not in name and 'passwd' not in name
    unnamed = factory.storage()
    try:
        assert unnamed.getName() == unnamed.adapter.describe()
    finally:
        unnamed.close()
