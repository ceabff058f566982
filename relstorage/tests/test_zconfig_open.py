"""Opening databases through zope.conf sections, as users do."""
import os

import transaction
import ZODB.config

from relstorage.storage import RelStorage
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require


def _roundtrip(db):
    try:
        with db.transaction() as conn:
            conn.root()['x'] = 42
        with db.transaction() as conn:
            assert conn.root()['x'] == 42
        return db.storage
    finally:
        db.close()


def test_sqlite_section(tmp_path):
    db = ZODB.config.databaseFromString('''
        %%import relstorage
        <zodb>
          <relstorage>
            keep-history false
            <sqlite3>
              data-dir %s
              <pragmas>
                cache_size -4000
              </pragmas>
            </sqlite3>
          </relstorage>
        </zodb>
        ''' % tmp_path)
    storage = _roundtrip(db)
    assert isinstance(storage, RelStorage)
    assert storage.adapter.connector.pragmas['cache_size'] == '-4000'
    assert not storage._adapter.keep_history
    assert (tmp_path / 'relstorage.sqlite3').exists()


def test_postgresql_section():
    require('postgresql')
    db = ZODB.config.databaseFromString('''
        %%import relstorage
        <zodb>
          <relstorage>
            keep-history true
            poll-interval 0
            <postgresql>
              dsn %s
            </postgresql>
          </relstorage>
        </zodb>
        ''' % pg_dsn(True))
    storage = db.storage
    storage.zap_all()
    db.close()
    db = ZODB.config.databaseFromString('''
        %%import relstorage
        <zodb>
          <relstorage>
            <postgresql>
              dsn %s
            </postgresql>
          </relstorage>
        </zodb>
        ''' % pg_dsn(True))
    storage = _roundtrip(db)
    assert storage._adapter.keep_history
    assert 'PostgreSQL' in storage.sortKey()


def test_empty_relstorage_section_opens_sqlite_default(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path))
    db = ZODB.config.databaseFromString('''
        %import relstorage
        <zodb>
          <relstorage>
          </relstorage>
        </zodb>
        ''')
    _roundtrip(db)
    path = tmp_path / 'relstorage' / 'default' / 'relstorage.sqlite3'
    assert path.exists()
    # Owner-only permissions on the data directory.
    assert oct(os.stat(path.parent).st_mode & 0o777) == '0o700'


def test_named_section_uses_its_name_for_the_default_dir(tmp_path,
                                                         monkeypatch):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path))
    db = ZODB.config.databaseFromString('''
        %import relstorage
        <zodb>
          <relstorage>
            name app
          </relstorage>
        </zodb>
        ''')
    storage = _roundtrip(db)
    assert storage.getName() == 'app (%s)' % storage.describe()
    assert (tmp_path / 'relstorage' / 'app' / 'relstorage.sqlite3').exists()


def test_storage_from_python(tmp_path):
    from relstorage.adapters.sqlite import SQLiteAdapter
    from relstorage.options import Options
    storage = RelStorage(SQLiteAdapter(str(tmp_path),
                                       options=Options(keep_history=True)))
    db = ZODB.DB(storage)
    conn = db.open()
    conn.root()['y'] = 'z'
    transaction.commit()
    conn.close()
    db.close()
