"""Two configured databases never silently become one: storage sections
of one process that would open the same database through a default
location (an empty ``<relstorage>``, a ``<postgresql>`` without a dsn)
are refused with an error that says how to tell them apart; named ones
get databases of their own, and a real multi-database ZODB keeps them
apart."""
import gc
import os

import pytest
import transaction
import ZODB.config
from persistent.mapping import PersistentMapping

from relstorage.exceptions import ConfigurationError
from relstorage.testing.dbs import PG_HOST
from relstorage.testing.dbs import PG_PASSWORD
from relstorage.testing.dbs import PG_PORT
from relstorage.testing.dbs import PG_USER
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require

TWO_DATABASES = '''
%%import relstorage
<zodb main>
  <relstorage %s>
  </relstorage>
</zodb>
<zodb catalog>
  <relstorage %s>
  </relstorage>
</zodb>
'''


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path))
    return tmp_path


def _open(text):
    """``{name: DB}`` of every database in *text*, as Zope opens them."""
    return ZODB.config.databaseFromString(text).databases


def _refused(text):
    """The error opening *text* raises; the databases opened before it
    are dropped (databaseFromString does not return them)."""
    with pytest.raises(ConfigurationError) as exc:
        ZODB.config.databaseFromString(text)
    message = str(exc.value)
    del exc  # its traceback holds the databases opened before
    gc.collect()
    return message


def _close_all(databases):
    for db in list(databases.values()):
        db.close()


def test_two_unnamed_sections_are_refused(data_home):
    message = _refused(TWO_DATABASES % ('', ''))
    assert 'same database' in message
    assert os.path.join(str(data_home), 'relstorage', 'default') in message
    assert '<relstorage main>' in message and 'name main' in message
    # The first database was opened and holds only its own root.
    assert os.listdir(data_home / 'relstorage') == ['default']


def test_named_sections_are_two_databases(data_home):
    databases = _open(TWO_DATABASES % ('main', 'catalog'))
    try:
        assert set(databases) == {'main', 'catalog'}
        tm = transaction.TransactionManager()
        conn = databases['main'].open(transaction_manager=tm)
        conn.root()['site'] = PersistentMapping(title='main')
        catalog = conn.get_connection('catalog')
        catalog.root()['index'] = PersistentMapping(title='catalog')
        tm.commit()
        conn.close()
        for name, key, title in (('main', 'site', 'main'),
                                 ('catalog', 'index', 'catalog')):
            with databases[name].transaction() as c:
                assert list(c.root().keys()) == [key]
                assert c.root()[key]['title'] == title
    finally:
        _close_all(databases)
    assert sorted(os.listdir(data_home / 'relstorage')) == ['catalog', 'main']


def test_reopening_after_close_is_not_a_second_opener(data_home):
    text = TWO_DATABASES % ('main', 'catalog')
    for _ in range(2):
        _close_all(_open(text))


def test_unnamed_and_named_sections_use_different_databases(data_home):
    databases = _open(TWO_DATABASES % ('', 'catalog'))
    try:
        dirs = {name: db.storage._adapter.data_dir
                for name, db in databases.items()}
    finally:
        _close_all(databases)
    assert dirs['main'] != dirs['catalog']


PG_TWO = '''
%%import relstorage
<zodb main>
  <relstorage>
    <postgresql>
      %s
    </postgresql>
  </relstorage>
</zodb>
<zodb catalog>
  <relstorage>
    <postgresql>
      %s
    </postgresql>
  </relstorage>
</zodb>
'''


def test_postgresql_sections_without_dsn_are_refused(monkeypatch):
    """libpq's defaults (here from the PG* variables) choose the same
    database for both."""
    require('postgresql')
    for var, value in (('PGHOST', PG_HOST), ('PGPORT', PG_PORT),
                       ('PGUSER', PG_USER), ('PGPASSWORD', PG_PASSWORD),
                       ('PGDATABASE', 'relstoragetest_hp')):
        monkeypatch.setenv(var, value)
    message = _refused(PG_TWO % ('', ''))
    assert 'dsn' in message and 'relstoragetest_hp' in message


def test_postgresql_sections_naming_one_database_may_share_it():
    """Both dsns written out: the user chose one database for both."""
    require('postgresql')
    dsn = 'dsn ' + pg_dsn(True)
    databases = _open(PG_TWO % (dsn, dsn))
    try:
        assert (databases['main'].storage._adapter.location()
                == databases['catalog'].storage._adapter.location())
    finally:
        _close_all(databases)
