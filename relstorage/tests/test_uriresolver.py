"""zodburi URIs: ``postgres://``, ``postgresql://``, ``mysql://`` and
``sqlite://`` resolve through ``zodburi.resolve_uri`` to a storage on the
real database, with options and database arguments from the query
string, and a commit on each."""
import pytest
import ZODB
import zodburi
from persistent.mapping import PersistentMapping

from relstorage.exceptions import ConfigurationError
from relstorage.storage import RelStorage
from relstorage.testing import dbs


def _commit_and_read(uri):
    factory, dbkw = zodburi.resolve_uri(uri)
    storage = factory()
    assert isinstance(storage, RelStorage)
    db = ZODB.DB(storage, **dbkw)
    try:
        with db.transaction() as conn:
            conn.root()['uri'] = PersistentMapping(uri=uri)
        with db.transaction() as conn:
            assert conn.root()['uri']['uri'] == uri
        return storage, dbkw
    finally:
        db.close()


def _server_uri(scheme, keep_history):
    if scheme == 'mysql':
        p = dbs.mysql_params(keep_history)
        return 'mysql://%s:%s@%s:%s/%s' % (p['user'], p['passwd'], p['host'],
                                          p['port'], p['db'])
    db = '%s_%s' % (dbs.PG_DB_PREFIX, 'hp' if keep_history else 'hf')
    return '%s://%s:%s@%s:%s/%s' % (scheme, dbs.PG_USER, dbs.PG_PASSWORD,
                                    dbs.PG_HOST, dbs.PG_PORT, db)


@pytest.mark.parametrize('scheme', ['postgres', 'postgresql', 'mysql'])
def test_server_uris_resolve_with_options_and_database_arguments(scheme):
    require_db = 'mysql' if scheme == 'mysql' else 'postgresql'
    dbs.require(require_db)
    dbs.DatabaseFactory(require_db, False).storage(zap=True).close()
    uri = (_server_uri(scheme, False) + '?keep_history=false'
           '&cache-local-mb=7&database_name=site'
           '&connection_cache_size=1234&connection_pool_size=3')
    storage, dbkw = _commit_and_read(uri)
    assert storage._options.keep_history is False
    assert storage._options.cache_local_mb == 7
    assert dbkw['database_name'] == 'site'
    assert dbkw['cache_size'] == 1234 and dbkw['pool_size'] == 3
    assert 'host=%s' % (dbs.PG_HOST if scheme != 'mysql'
                        else dbs.MYSQL_HOST) in storage.describe()


def test_sqlite_uri_with_a_path_and_without(tmp_path, monkeypatch):
    storage, dbkw = _commit_and_read(
        'sqlite://%s/db?blob_dir=%s/blobs' % (tmp_path, tmp_path))
    assert storage._adapter.data_dir == str(tmp_path / 'db')
    assert storage._options.blob_dir == str(tmp_path / 'blobs')
    assert dbkw['database_name'] == 'unnamed'
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path / 'home'))
    storage, _ = _commit_and_read('sqlite://?name=site')
    assert storage._adapter.data_dir == str(
        tmp_path / 'home' / 'relstorage' / 'site')


def test_unknown_argument_is_named(tmp_path):
    with pytest.raises(zodburi.UnknownDatabaseKeywords, match='colour'):
        zodburi.resolve_uri('sqlite://%s?colour=blue' % tmp_path)


def test_bad_option_value_is_named(tmp_path):
    with pytest.raises(ConfigurationError, match='cache-local-mb'):
        zodburi.resolve_uri('sqlite://%s?cache_local_mb=lots' % tmp_path)


def test_password_with_special_characters_reaches_the_dsn():
    from relstorage.uriresolver import postgresql
    factory, _ = postgresql(
        "postgres://app:p%40ss%20w'rd@db.example.org:6432/site")
    # The adapter section the URI describes, without connecting.
    assert factory.adapter_factory.config.dsn == ("dbname='site' host='db.example.org' port='6432' "
                   "user='app' password='p@ss w\\'rd'")


def test_oracle_uri_opens_through_the_real_driver():
    import socket

    from relstorage.exceptions import DatabaseUnavailable
    from relstorage.uriresolver import oracle
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    factory, dbkw = oracle(
        'oracle://app:p%%40ss@127.0.0.1:%d/RSTEST?keep_history=false'
        '&network_timeout=3&driver=oracledb&database_name=site' % port)
    config = factory.adapter_factory.config
    assert (config.user, config.password, config.dsn, config.driver) == (
        'app', 'p@ss', '127.0.0.1:%d/RSTEST' % port, 'oracledb')
    assert factory.options.keep_history is False
    assert dbkw == {'database_name': 'site'}
    with pytest.raises(DatabaseUnavailable) as exc:
        factory()
    assert 'host=127.0.0.1 port=%d service=RSTEST' % port in str(exc.value)
    assert 'p@ss' not in str(exc.value)
