import io
import os
import types

import pytest
import ZConfig
import ZODB.config

from relstorage import config as rsconfig
from relstorage.adapters.mysql import MySQLAdapter
from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.adapters.sqlite import SQLiteAdapter
from relstorage.adapters.sqlite.session import DEFAULT_PRAGMAS as \
    SQLITE_DEFAULT_PRAGMAS
from relstorage.adapters.sqlite.files import MAIN_FILE as SQLITE_MAIN_FILE
from relstorage.config import MySQLAdapterFactory
from relstorage.config import OracleAdapterFactory
from relstorage.config import PostgreSQLAdapterFactory
from relstorage.config import RelStorageFactory
from relstorage.config import SQLite3AdapterFactory
from relstorage.config import default_sqlite_data_dir
from relstorage.config import options_from_section
from relstorage.exceptions import ConfigurationError
from relstorage.exceptions import NotSupportedYet
from relstorage.options import NOT_YET_SUPPORTED
from relstorage.options import OPTIONS
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing import dbs

# Every <relstorage> key of DESIGN.md section 4, as written in zope.conf,
# with the value it must become.
KEY_SAMPLES = {
    'name': ('main', 'main'),
    'read-only': ('true', True),
    'keep-history': ('false', False),
    'create-schema': ('off', False),
    'commit-lock-timeout': ('45', 45),
    'network-timeout': ('7.5', 7.5),
    'commit-lock-id': ('3', 3),
    'blob-dir': ('/tmp/blobs', '/tmp/blobs'),
    'shared-blob-dir': ('yes', True),
    'blob-cache-size': ('1gb', 1 << 30),
    'blob-cache-size-check': ('25', 25),
    'blob-cache-size-check-external': ('true', True),
    'blob-chunk-size': ('2mb', 2 << 20),
    'replica-conf': ('/etc/replicas.conf', '/etc/replicas.conf'),
    'ro-replica-conf': ('/etc/ro.conf', '/etc/ro.conf'),
    'replica-timeout': ('120', 120.0),
    'replica-max-lag': ('0.25', 0.25),
    'revert_when_stale': ('true', True),
    'poll-interval': ('2.5', 2.5),
    'pack-gc': ('false', False),
    'pack-prepack-only': ('true', True),
    'pack-skip-prepack': ('true', True),
    'pack-batch-timeout': ('0.75', 0.75),
    'pack-commit-busy-delay': ('2', 2.0),
    'pack-graph-mb': ('64', 64),
    'pack-workers': ('2', 2),
    'cache-servers': ('10.0.0.1:11211 10.0.0.2:11211',
                      ['10.0.0.1:11211', '10.0.0.2:11211']),
    'cache-module-name': ('some.cache.module', 'some.cache.module'),
    'cache-prefix': ('app', 'app'),
    'cache-local-mb': ('200', 200),
    'cache-local-object-max': ('64kb', 65536),
    'cache-local-compression': ('zlib', 'zlib'),
    'cache-local-dir': ('/var/cache/rs', '/var/cache/rs'),
    'cache-delta-size-limit': ('5000', 5000),
    'metrics': ('true', True),
}


def attr(name):
    return name.replace('-', '_')


def load(text, schema=None):
    """Parse *text* (without opening anything); return the config root."""
    if schema is None:
        schema = ZODB.config.getDbSchema()
    conf, _ = ZConfig.loadConfigFile(schema, io.StringIO(text))
    return conf


def parse_relstorage(body, section='<relstorage>'):
    """The RelStorageFactory of a <relstorage> inside <zodb>."""
    text = '%%import relstorage\n<zodb>\n%s\n%s\n</relstorage>\n</zodb>\n' % (
        section, body)
    return load(text).database[0].config.storage


def parse_adapter(section_text):
    return parse_relstorage(section_text).config.adapter


# -- the <relstorage> keys ----------------------------------------------------

def test_samples_cover_every_option():
    assert set(KEY_SAMPLES) == {spec.name for spec in OPTIONS}


@pytest.mark.parametrize('name', list(KEY_SAMPLES))
def test_each_key_parses(name):
    text, expected = KEY_SAMPLES[name]
    factory = parse_relstorage('%s %s' % (name, text))
    assert isinstance(factory, RelStorageFactory)
    assert getattr(factory.config, attr(name)) == expected
    opts = options_from_section(factory.config)
    assert getattr(opts, attr(name)) == expected
    # Nothing else moved off its default.
    assert set(opts.changed()) == {attr(name)}


def test_all_keys_together():
    body = '\n'.join('%s %s' % (n, t) for n, (t, _) in KEY_SAMPLES.items())
    factory = parse_relstorage(body)
    opts = options_from_section(factory)
    for name, (_, expected) in KEY_SAMPLES.items():
        assert getattr(factory.config, attr(name)) == expected
        assert getattr(opts, attr(name)) == expected
    assert factory.options == opts


def test_missing_keys_stay_none_and_options_has_defaults():
    factory = parse_relstorage('')
    for spec in OPTIONS:
        assert getattr(factory.config, spec.attr) is None, spec.name
    assert factory.config.adapter is None
    assert options_from_section(factory.config) == Options()


def test_number_keys_keep_their_type():
    opts = options_from_section(parse_relstorage(
        'commit-lock-timeout 2.5\ncache-local-mb 0.5\npoll-interval 3'))
    assert opts.commit_lock_timeout == 2.5
    assert opts.cache_local_mb == 0.5
    assert opts.poll_interval == 3.0
    assert isinstance(opts.poll_interval, float)


@pytest.mark.parametrize('text, size', [
    ('1gb', 1 << 30), ('512MB', 512 << 20), ('100kb', 102400),
    ('1000', 1000)])
def test_blob_cache_size_accepts_byte_sizes(text, size):
    factory = parse_relstorage('blob-cache-size %s' % text)
    assert options_from_section(factory).blob_cache_size == size


def test_compression_none_is_accepted():
    opts = options_from_section(parse_relstorage(
        'cache-local-compression none'))
    assert opts.cache_local_compression == 'none'
    opts.check_supported()


def test_name_comes_from_key_or_section_name():
    assert parse_relstorage('').options.name is None
    assert parse_relstorage('', '<relstorage main>').options.name == 'main'
    assert parse_relstorage('name other',
                            '<relstorage main>').options.name == 'other'


def test_top_level_storage_section():
    text = ('%import relstorage\n<relstorage>\nkeep-history false\n'
            '<postgresql>\ndsn dbname=app\n</postgresql>\n</relstorage>\n')
    conf = load(text, ZODB.config.getStorageSchema())
    assert isinstance(conf.storage, RelStorageFactory)
    assert conf.storage.options.keep_history is False
    assert isinstance(conf.storage.config.adapter, PostgreSQLAdapterFactory)


def test_design_example_parses():
    text = '''%import relstorage
<zodb>
  <relstorage>
    keep-history false
    <postgresql>
      dsn dbname=app host=127.0.0.1 user=app
    </postgresql>
  </relstorage>
</zodb>
'''
    factory = load(text).database[0].config.storage
    assert factory.options.keep_history is False
    adapter = factory.config.adapter
    assert isinstance(adapter, PostgreSQLAdapterFactory)
    assert adapter.config.dsn == 'dbname=app host=127.0.0.1 user=app'


# -- errors -------------------------------------------------------------------

@pytest.mark.parametrize('body, key', [
    ('keep-histroy false', 'keep-histroy'),
    ('pack-gcc true', 'pack-gcc'),
    ('cache-local-gb 1', 'cache-local-gb'),
])
def test_unknown_relstorage_key_is_named(body, key):
    with pytest.raises(ZConfig.ConfigurationError) as exc:
        parse_relstorage(body)
    assert key in str(exc.value)


@pytest.mark.parametrize('section, key', [
    ('<postgresql>\nhost x\n</postgresql>', 'host'),
    ('<mysql>\npassword x\n</mysql>', 'password'),
    ('<oracle>\npasswd x\n</oracle>', 'passwd'),
    ('<sqlite3>\npath /tmp\n</sqlite3>', 'path'),
])
def test_unknown_adapter_key_is_named(section, key):
    with pytest.raises(ZConfig.ConfigurationError) as exc:
        parse_adapter(section)
    assert repr(key) in str(exc.value)


def test_two_adapter_sections_are_refused():
    with pytest.raises(ZConfig.ConfigurationError):
        parse_adapter('<postgresql>\n</postgresql>\n<sqlite3>\n</sqlite3>')


@pytest.mark.parametrize('body, name', [
    ('keep-history maybe', 'keep-history'),
    ('read-only 2', 'read-only'),
    ('poll-interval -1', 'poll-interval'),
    ('poll-interval soon', 'poll-interval'),
    ('cache-local-mb -5', 'cache-local-mb'),
    ('cache-local-mb lots', 'cache-local-mb'),
    ('commit-lock-timeout -1', 'commit-lock-timeout'),
    ('commit-lock-timeout forever', 'commit-lock-timeout'),
    ('blob-cache-size huge', 'blob-cache-size'),
    ('blob-cache-size-check 200', 'blob-cache-size-check'),
    ('blob-chunk-size 0', 'blob-chunk-size'),
    ('cache-local-object-max 1.5', 'cache-local-object-max'),
    ('cache-local-compression lz4', 'cache-local-compression'),
    ('cache-delta-size-limit -1', 'cache-delta-size-limit'),
    ('pack-batch-timeout -0.5', 'pack-batch-timeout'),
    ('pack-commit-busy-delay x', 'pack-commit-busy-delay'),
    ('pack-graph-mb -1', 'pack-graph-mb'),
    ('pack-workers -1', 'pack-workers'),
    ('pack-workers 65', 'pack-workers'),
    ('pack-workers many', 'pack-workers'),
    ('replica-timeout never', 'replica-timeout'),
    ('commit-lock-id one', 'commit-lock-id'),
])
def test_bad_value_names_option(body, name):
    with pytest.raises(ZConfig.DataConversionError) as exc:
        parse_relstorage(body)
    assert name in str(exc.value)
    assert 'line' in str(exc.value)
    assert isinstance(exc.value.exception, ConfigurationError)


@pytest.mark.parametrize('line, name', [
    ('port http', 'port'),
    ('port 70000', 'port'),
    ('connect_timeout soon', 'connect_timeout'),
    ('compress maybe', 'compress'),
    ('named_pipe 7', 'named_pipe'),
])
def test_bad_mysql_value_names_key(line, name):
    with pytest.raises(ZConfig.DataConversionError) as exc:
        parse_adapter('<mysql>\n%s\n</mysql>' % line)
    assert name in str(exc.value)


def test_options_errors_propagate_from_options_from_section():
    section = types.SimpleNamespace(
        poll_interval=-2.0, getSectionName=lambda: None)
    with pytest.raises(ConfigurationError, match='poll-interval'):
        options_from_section(section)


def test_checked_datatypes_reject_unknown_names():
    with pytest.raises(AttributeError):
        rsconfig.checked.no_such_option
    with pytest.raises(AttributeError):
        rsconfig.checked._private
    assert rsconfig.checked.keep_history('on') is True
    assert rsconfig.checked.port('5432') == 5432


# -- adapter sections ---------------------------------------------------------

def test_postgresql_section():
    adapter = parse_adapter(
        '<postgresql>\ndsn dbname=app user=app\ndriver psycopg2\n'
        '</postgresql>')
    assert isinstance(adapter, PostgreSQLAdapterFactory)
    assert adapter.config.dsn == 'dbname=app user=app'
    assert adapter.config.driver == 'psycopg2'
    assert adapter.driver == 'psycopg2'
    assert adapter.params() == {'dsn': 'dbname=app user=app'}


def test_postgresql_section_empty():
    adapter = parse_adapter('<postgresql>\n</postgresql>')
    assert adapter.config.dsn is None
    assert adapter.config.driver is None
    assert adapter.driver == 'auto'
    assert adapter.params() == {}


MYSQL_KEYS = {
    'host': ('db.example.com', 'db.example.com'),
    'user': ('app', 'app'),
    'passwd': ('secret', 'secret'),
    'db': ('appdb', 'appdb'),
    'port': ('3307', 3307),
    'unix_socket': ('/run/mysqld/mysqld.sock', '/run/mysqld/mysqld.sock'),
    'connect_timeout': ('15', 15),
    'read_timeout': ('300', 300),
    'write_timeout': ('60', 60),
    'compress': ('true', True),
    'named_pipe': ('false', False),
    'read_default_file': ('~/.my.cnf', '~/.my.cnf'),
    'read_default_group': ('client', 'client'),
}


def test_mysql_section():
    body = '\n'.join('%s %s' % (k, t) for k, (t, _) in MYSQL_KEYS.items())
    adapter = parse_adapter('<mysql>\n%s\ndriver MySQLdb\n</mysql>' % body)
    assert isinstance(adapter, MySQLAdapterFactory)
    expected = {k: v for k, (_, v) in MYSQL_KEYS.items()}
    for key, value in expected.items():
        assert getattr(adapter.config, key) == value
    assert adapter.params() == expected
    assert adapter.driver == 'MySQLdb'


def test_mysql_params_only_holds_what_was_set():
    adapter = parse_adapter('<mysql>\nhost localhost\ndb app\n</mysql>')
    assert adapter.params() == {'host': 'localhost', 'db': 'app'}
    assert adapter.driver == 'auto'


def test_oracle_section():
    adapter = parse_adapter(
        '<oracle>\nuser app\npassword pw\ndsn db.example.com/XEPDB1\n'
        'driver oracledb\n</oracle>')
    assert isinstance(adapter, OracleAdapterFactory)
    assert adapter.params() == {
        'user': 'app', 'password': 'pw', 'dsn': 'db.example.com/XEPDB1'}
    assert adapter.driver == 'oracledb'


def test_sqlite3_section_with_pragmas():
    adapter = parse_adapter('''<sqlite3>
  data-dir /srv/app/data
  driver sqlite3
  <pragmas>
    journal_mode wal
    synchronous OFF
    Cache_Size -20000
    mmap_size 268435456
    some_future_pragma 1
  </pragmas>
</sqlite3>''')
    assert isinstance(adapter, SQLite3AdapterFactory)
    assert adapter.config.data_dir == '/srv/app/data'
    assert adapter.config.driver == 'sqlite3'
    assert adapter.pragmas() == {
        'journal_mode': 'wal',
        'synchronous': 'OFF',
        'cache_size': '-20000',
        'mmap_size': '268435456',
        'some_future_pragma': '1',
    }
    assert adapter.params() == {'data_dir': '/srv/app/data',
                                'pragmas': adapter.pragmas()}


def test_sqlite3_section_without_pragmas():
    adapter = parse_adapter('<sqlite3>\n</sqlite3>')
    assert adapter.config.data_dir is None
    assert adapter.config.pragmas is None
    assert adapter.pragmas() == {}
    assert adapter.driver == 'auto'


def test_sqlite3_empty_pragmas_section():
    adapter = parse_adapter('<sqlite3>\n<pragmas>\n</pragmas>\n</sqlite3>')
    assert adapter.pragmas() == {}


# -- default_sqlite_data_dir --------------------------------------------------

def test_default_dir_uses_xdg_data_home(monkeypatch, tmp_path):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path))
    assert default_sqlite_data_dir('main') == os.path.join(
        str(tmp_path), 'relstorage', 'main')
    assert default_sqlite_data_dir(None) == os.path.join(
        str(tmp_path), 'relstorage', 'default')
    assert default_sqlite_data_dir('') == os.path.join(
        str(tmp_path), 'relstorage', 'default')


@pytest.mark.parametrize('value', [None, ''])
def test_default_dir_without_xdg(monkeypatch, tmp_path, value):
    if value is None:
        monkeypatch.delenv('XDG_DATA_HOME', raising=False)
    else:
        monkeypatch.setenv('XDG_DATA_HOME', value)
    monkeypatch.setenv('HOME', str(tmp_path))
    assert default_sqlite_data_dir('main') == os.path.join(
        str(tmp_path), '.local', 'share', 'relstorage', 'main')


def test_default_dir_keeps_name_inside(monkeypatch, tmp_path):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path))
    base = os.path.join(str(tmp_path), 'relstorage')
    assert default_sqlite_data_dir('../etc') == os.path.join(base, '.._etc')
    assert default_sqlite_data_dir('..') == os.path.join(base, 'default')
    assert os.path.dirname(default_sqlite_data_dir('a/b')) == base


# -- open(), on real storages ------------------------------------------------

@pytest.fixture
def closing():
    """Close, after the test, every storage handed to the returned
    function (which gives the storage back)."""
    storages = []

    def keep(storage):
        storages.append(storage)
        return storage

    yield keep
    for storage in reversed(storages):
        storage.close()


def sqlite_section(data_dir, extra=''):
    return '<sqlite3>\ndata-dir %s\n%s</sqlite3>' % (data_dir, extra)


def assert_sqlite_files(adapter):
    assert os.path.isfile(os.path.join(adapter.data_dir, SQLITE_MAIN_FILE))


def test_open_postgresql(closing):
    dbs.require('postgresql')
    dsn = dbs.pg_dsn(True)
    factory = parse_relstorage(
        'poll-interval 2\n<postgresql>\ndsn %s\n</postgresql>' % dsn,
        '<relstorage main>')
    storage = closing(factory.open())
    assert isinstance(storage, RelStorage)
    assert storage.getName() == 'main (%s)' % storage.describe()
    adapter = storage._adapter
    assert isinstance(adapter, PostgreSQLAdapter)
    options = storage._options
    assert adapter.options is options
    assert options.name == 'main'
    assert options.keep_history is True
    assert adapter.keep_history is True
    assert options.poll_interval == 2.0
    assert options == Options(name='main', poll_interval=2.0)
    assert adapter.connector.dsn == dsn
    # driver "auto" picks psycopg2.
    assert adapter.driver.name == 'psycopg2'
    assert 'dbname=%s_hp ' % dbs.PG_DB_PREFIX in adapter.describe()


@pytest.mark.parametrize('spelling, name, module', [
    ('psycopg2', 'psycopg2', 'psycopg2'), ('PSYCOPG', 'psycopg', 'psycopg')])
def test_open_postgresql_explicit_driver(closing, spelling, name, module):
    dbs.require('postgresql')
    factory = parse_relstorage(
        '<postgresql>\ndsn %s\ndriver %s\n</postgresql>'
        % (dbs.pg_dsn(True), spelling))
    storage = closing(factory.open())
    adapter = storage._adapter
    assert isinstance(adapter, PostgreSQLAdapter)
    assert adapter.driver.name == name
    assert type(adapter.connect(False).conn).__module__.startswith(module)
    # Without a name the storage is named after its database.
    assert storage.getName() == adapter.describe()
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        conn.root()['through'] = name
    with db.transaction() as conn:
        assert conn.root()['through'] == name


def test_open_postgresql_empty_dsn(monkeypatch):
    # libpq's defaults cannot be relied on here, so the adapter the
    # section builds is checked without connecting (its constructor does
    # not connect).
    for var in ('PGHOST', 'PGHOSTADDR', 'PGPORT', 'PGUSER'):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv('PGDATABASE', 'site')
    factory = parse_relstorage('<postgresql>\n</postgresql>')
    assert factory.options.name is None
    adapter = factory.adapter_factory().create(factory.options)
    assert isinstance(adapter, PostgreSQLAdapter)
    assert adapter.connector.dsn == ''
    assert adapter.options is factory.options
    assert adapter.driver.name == 'psycopg2'
    assert adapter.describe() == (
        'PostgreSQL database (dbname=site host=<local socket> port=5432 '
        "(not in the DSN: dbname from PGDATABASE; host, port are libpq's "
        'defaults))')


@pytest.mark.parametrize('dsn, said', [
    # What the DSN gives is not remarked on, in any of its spellings.
    ('dbname=app host=db port=5432 user=app',
     'dbname=app host=db port=5432 user=app'),
    ("dbname='app' host='db' port='5433'", 'dbname=app host=db port=5433'),
    ('postgresql://app@db:5432/app', 'dbname=app host=db port=5432 user=app'),
    ('dbname=app hostaddr=10.0.0.1 port=5432',
     'dbname=app host=10.0.0.1 port=5432'),
    # What it leaves out is named, with where its value came from.
    ('dbname=app host=db', "dbname=app host=db port=5432 (not in the DSN: "
     "port is libpq's default)"),
    ('postgresql://app@db/app', 'dbname=app host=db port=5432 user=app '
     "(not in the DSN: port is libpq's default)"),
])
def test_a_dsn_is_described_with_where_its_values_came_from(
        monkeypatch, dsn, said):
    from relstorage.adapters.postgresql.dsn import describe_dsn
    for var in ('PGHOST', 'PGHOSTADDR', 'PGPORT', 'PGUSER', 'PGDATABASE'):
        monkeypatch.delenv(var, raising=False)
    assert describe_dsn(dsn) == said
    monkeypatch.setenv('PGPORT', '6432')
    if 'port=' in dsn or ':5432/' in dsn:
        assert describe_dsn(dsn) == said  # the DSN's port wins
    else:
        assert describe_dsn(dsn) == said.replace(
            "port=5432", 'port=6432').replace(
            "port is libpq's default", 'port from PGPORT')


def test_open_without_adapter_uses_embedded_sqlite(closing, monkeypatch,
                                                   tmp_path):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path))
    storage = closing(parse_relstorage('', '<relstorage>').open())
    assert isinstance(storage, RelStorage)
    adapter = storage._adapter
    assert isinstance(adapter, SQLiteAdapter)
    assert adapter.data_dir == os.path.join(
        str(tmp_path), 'relstorage', 'default')
    assert adapter.connector.pragmas == SQLITE_DEFAULT_PRAGMAS
    assert adapter.options == Options()
    assert adapter.options is storage._options
    assert storage.getName() == adapter.describe()
    assert_sqlite_files(adapter)

    storage = closing(parse_relstorage('', '<relstorage site>').open())
    assert isinstance(storage._adapter, SQLiteAdapter)
    assert storage._adapter.data_dir == default_sqlite_data_dir('site')
    assert storage._adapter.data_dir == os.path.join(
        str(tmp_path), 'relstorage', 'site')
    assert storage.getName() == 'site (%s)' % storage.describe()
    assert_sqlite_files(storage._adapter)


def test_open_sqlite3_section(closing, monkeypatch, tmp_path):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path / 'xdg'))
    data_dir = tmp_path / 'data'
    storage = closing(parse_relstorage(
        'keep-history false\n' + sqlite_section(
            data_dir,
            '<pragmas>\njournal_mode wal\nsynchronous FULL\n</pragmas>\n'),
        '<relstorage main>').open())
    assert isinstance(storage, RelStorage)
    assert storage.getName() == 'main (%s)' % storage.describe()
    adapter = storage._adapter
    assert isinstance(adapter, SQLiteAdapter)
    assert adapter.data_dir == str(data_dir)
    assert adapter.connector.pragmas == dict(SQLITE_DEFAULT_PRAGMAS,
                                   journal_mode='wal', synchronous='FULL')
    assert adapter.options is storage._options
    assert adapter.options.keep_history is False
    assert adapter.keep_history is False
    assert_sqlite_files(adapter)
    # The pragmas reach the database connections.
    session = adapter.connect(for_store=False)
    try:
        assert session.scalar('PRAGMA synchronous') == 2  # FULL
        assert session.scalar('PRAGMA journal_mode') == 'wal'
    finally:
        session.close()
    # <sqlite3> without data-dir falls back to the default location.
    storage = closing(parse_relstorage('name x\n<sqlite3>\n</sqlite3>')
                      .open())
    assert storage._adapter.data_dir == default_sqlite_data_dir('x')
    assert storage._adapter.data_dir == os.path.join(
        str(tmp_path), 'xdg', 'relstorage', 'x')
    assert storage.adapter.connector.pragmas == SQLITE_DEFAULT_PRAGMAS
    assert_sqlite_files(storage._adapter)


@pytest.mark.parametrize('name', sorted(NOT_YET_SUPPORTED))
def test_open_refuses_unsupported_options(closing, tmp_path, name):
    text, _ = KEY_SAMPLES[name]
    factory = parse_relstorage('%s %s\n%s' % (name, text,
                                               sqlite_section(tmp_path)))
    with pytest.raises(NotSupportedYet) as exc:
        closing(factory.open())
    assert exc.value.option == name
    assert name in str(exc.value)
    # Refused before the database was touched.
    assert os.listdir(str(tmp_path)) == []


def test_oracle_without_dsn_is_refused_by_name():
    # Refused before any connection is attempted.
    with pytest.raises(ConfigurationError) as exc:
        parse_relstorage('<oracle>\nuser app\n</oracle>').open()
    assert str(exc.value).startswith('dsn: required for <oracle>')
    assert not isinstance(exc.value, NotSupportedYet)


@pytest.mark.parametrize('driver_line, driver_name', [
    ('', 'MySQLdb'),
    ('driver MySQLdb\n', 'MySQLdb'),
    ('driver PyMySQL\n', 'PyMySQL'),
])
def test_open_mysql(closing, driver_line, driver_name):
    if driver_name == 'PyMySQL':
        pytest.importorskip('pymysql')
    dbs.require('mysql')
    params = dbs.mysql_params(True)
    body = ''.join('%s %s\n' % item for item in sorted(params.items()))
    factory = parse_relstorage(
        'poll-interval 1\n<mysql>\n%s%s</mysql>' % (body, driver_line),
        '<relstorage main>')
    storage = closing(factory.open())
    assert isinstance(storage, RelStorage)
    assert storage.getName() == 'main (%s)' % storage.describe()
    adapter = storage._adapter
    assert isinstance(adapter, MySQLAdapter)
    assert adapter.connector.params == params
    assert adapter.driver.name == driver_name
    assert adapter.options is storage._options
    assert adapter.options == Options(name='main', poll_interval=1.0)
    assert adapter.keep_history is True
    assert 'db=%s' % params['db'] in adapter.describe()


def test_storage_from_string(closing, tmp_path):
    text = ('<relstorage main>\n%s\n</relstorage>\n'
            % sqlite_section(tmp_path / 'one'))
    storage = closing(rsconfig.storage_from_string(text))
    assert isinstance(storage, RelStorage)
    assert storage.getName() == 'main (%s)' % storage.describe()
    assert isinstance(storage._adapter, SQLiteAdapter)
    assert storage._adapter.data_dir == str(tmp_path / 'one')
    assert_sqlite_files(storage._adapter)
    # An explicit %import is fine too.
    text = text.replace(str(tmp_path / 'one'), str(tmp_path / 'two'))
    storage = closing(rsconfig.storage_from_string(
        '%import relstorage\n' + text))
    assert storage.getName() == 'main (%s)' % storage.describe()
    assert storage._adapter.data_dir == str(tmp_path / 'two')


def test_storage_from_file(closing, tmp_path):
    data_dir = tmp_path / 'data'
    (tmp_path / 'adapter.conf').write_text(sqlite_section(data_dir) + '\n')
    path = tmp_path / 'storage.conf'
    path.write_text('%import relstorage\n<relstorage>\n'
                    'keep-history false\n%include adapter.conf\n'
                    '</relstorage>\n')
    storage = closing(rsconfig.storage_from_file(str(path)))
    assert isinstance(storage, RelStorage)
    assert isinstance(storage._adapter, SQLiteAdapter)
    assert storage._adapter.data_dir == str(data_dir)
    assert storage._options.keep_history is False
    assert storage._adapter.keep_history is False
    assert_sqlite_files(storage._adapter)


def test_storage_from_file_postgresql(closing, tmp_path):
    dbs.require('postgresql')
    dsn = dbs.pg_dsn(True)
    (tmp_path / 'adapter.conf').write_text(
        '<postgresql>\ndsn %s\n</postgresql>\n' % dsn)
    path = tmp_path / 'storage.conf'
    path.write_text('%import relstorage\n<relstorage>\n'
                    'keep-history true\n%include adapter.conf\n'
                    '</relstorage>\n')
    storage = closing(rsconfig.storage_from_file(str(path)))
    assert isinstance(storage._adapter, PostgreSQLAdapter)
    assert storage.adapter.connector.dsn == dsn
    assert storage._options.keep_history is True


def test_storage_from_string_reports_bad_values():
    with pytest.raises(ZConfig.DataConversionError, match='poll-interval'):
        rsconfig.storage_from_string(
            '<relstorage>\npoll-interval -1\n</relstorage>\n')


def test_package_import_is_light():
    import relstorage
    assert isinstance(relstorage.__version__, str)
    with pytest.raises(AttributeError):
        relstorage.no_such_thing
