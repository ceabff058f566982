"""RelStorage 4's zodburi URIs work unchanged: every query argument
RelStorage 4.3's resolver takes, read from that resolver itself (in a
virtualenv of its own), is taken here with the same meaning; libpq's TLS
keywords on postgres:// and the MySQL TLS keys on mysql:// too."""
import json
import os
import subprocess
import tempfile
import textwrap

import pytest
import ZODB
import zodburi
from ZODB.DemoStorage import DemoStorage

from relstorage.adapters.postgresql.dsn import parse_dsn
from relstorage.storage import RelStorage
from relstorage.testing import dbs
from relstorage.testing.checkout import user_environment
from relstorage.testing.rs4venv import rs4_python
import relstorage.options

#: Reads, in RelStorage 4.3's virtualenv, the argument names of each
#: resolver and of its adapter helper, from every ``_*_args`` tuple.
READ_RS4 = textwrap.dedent('''\
    import json
    from relstorage import zodburi_resolver as r
    def names(obj):
        return sorted(n for a in dir(obj) if a.startswith('_')
                      and a.endswith('_args') for n in getattr(obj, a))
    print(json.dumps({scheme: {
        'storage': names(getattr(r, scheme + '_resolver')),
        'adapter': names(getattr(r, scheme + '_resolver').adapter_helper)}
        for scheme in ('postgresql', 'mysql', 'oracle', 'sqlite')}))
    ''')


@pytest.fixture(scope='module')
def rs4_arguments():
    done = subprocess.run([rs4_python(), '-c', READ_RS4],
                          capture_output=True, text=True, timeout=300,
                          cwd=tempfile.gettempdir(), env=user_environment())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


BASES = {'postgresql': 'postgres://u:p@db.example/app',
         'mysql': 'mysql://u:p@db.example/app',
         'oracle': 'oracle://',
         'sqlite': 'sqlite:///var/app/rs'}

#: RelStorage 4's storage arguments: a value, and the option it sets here
#: with the value it gets (None: an option that has no effect here,
#: which is warned about by name).
STORAGE = {
    'read_only': ('1', 'read_only', True),
    'keep_history': ('false', 'keep_history', False),
    'pack_gc': ('0', 'pack_gc', False),
    'shared_blob_dir': ('false', 'shared_blob_dir', False),
    'blob_cache_size': ('100mb', 'blob_cache_size', 100 << 20),
    'blob_cache_size_check': ('20', 'blob_cache_size_check', 20),
    'blob_cache_chunk_size': ('1mb', 'blob_chunk_size', 1 << 20),
    'cache_local_object_max': ('10kb', 'cache_local_object_max', 10240),
    'replica_timeout': ('60.5', 'replica_timeout', 60.5),
    'pack_batch_timeout': ('2.5', 'pack_batch_timeout', 2.5),
    'cache_local_mb': ('7', 'cache_local_mb', 7),
    'commit_lock_timeout': ('9', 'commit_lock_timeout', 9),
    'commit_lock_id': ('0', 'commit_lock_id', 0),
    'name': ('site', 'name', 'site'),
    'blob_dir': ('/var/app/blobs', 'blob_dir', '/var/app/blobs'),
    'replica_conf': ('/etc/app/replicas', 'replica_conf',
                     '/etc/app/replicas'),
    'cache_module_name': ('relstorage.memcache_wrapper', None, None),
    'cache_servers': ('127.0.0.1:11211', None, None),
    'cache_prefix': ('site', 'cache_prefix', 'site'),
    'cache_delta_size_limit': ('20000', 'cache_delta_size_limit', 20000),
    'cache_local_compression': ('zlib', 'cache_local_compression', 'zlib'),
    'pack_dry_run': ('true', None, None),
    'pack_duty_cycle': ('0.5', None, None),
    'pack_max_delay': ('20', None, None),
}


#: What zodburi gives the database when the query has none of its own
#: arguments (zodburi refuses an argument nobody takes).
PLAIN = zodburi.resolve_uri('sqlite:///x')[1]


def _resolved(scheme, query):
    factory, rest = zodburi.resolve_uri(BASES[scheme] + '?' + query)
    assert rest == PLAIN, (scheme, query, rest)
    return factory, rest


def _dsn(factory):
    return parse_dsn(factory.adapter_factory._get('dsn'))


def _params(factory):
    return factory.adapter_factory.params()


#: RelStorage 4's adapter arguments of each database: a value, and what
#: must hold of the resolved factory.
ADAPTER = {
    'postgresql': {
        'connect_timeout': ('7', lambda f: _dsn(f)['connect_timeout'] == '7'),
        'ssl_mode': ('require', lambda f: _dsn(f)['sslmode'] == 'require'),
    },
    'mysql': {
        'connect_timeout': ('7', lambda f: _params(f)['connect_timeout'] == 7),
        'client_flag': ('2', lambda f: _params(f)['client_flag'] == 2),
        'load_infile': ('1', lambda f: _params(f)['load_infile'] is True),
        'compress': ('1', lambda f: _params(f)['compress'] is True),
        'named_pipe': ('0', lambda f: _params(f)['named_pipe'] is False),
        'unix_socket': ('/run/mysqld.sock',
                        lambda f: _params(f)['unix_socket'] ==
                        '/run/mysqld.sock'),
        'init_command': ('SET @a=1',
                         lambda f: _params(f)['init_command'] == 'SET @a=1'),
        'read_default_file': ('/etc/my.cnf', lambda f: _params(f)[
            'read_default_file'] == '/etc/my.cnf'),
        'read_default_group': ('app', lambda f: _params(f)[
            'read_default_group'] == 'app'),
    },
    'oracle': {
        'user': ('scott', lambda f: _params(f)['user'] == 'scott'),
        'password': ('tiger', lambda f: _params(f)['password'] == 'tiger'),
        'dsn': ('db:1521/XE', lambda f: _params(f)['dsn'] == 'db:1521/XE'),
        'twophase': ('1', lambda f: True),  # warned about, below
    },
    'sqlite': {
        'data_dir': ('/var/app/rs', lambda f: f.adapter_factory._get(
            'data_dir') == '/var/app/rs'),
    },
}


def test_every_storage_argument_of_relstorage4(rs4_arguments, warnings):
    # "demostorage" is a RelStorage 4 resolver argument checked by
    # opening one (below); "driver" is each adapter's.
    for scheme, names in rs4_arguments.items():
        known = set(STORAGE) | {'demostorage', 'driver'}
        assert set(names['storage']) <= known, (
            'RelStorage 4 takes arguments this test does not know: %s'
            % sorted(set(names['storage']) - known))
        for name in names['storage']:
            if name in ('demostorage', 'driver'):
                continue
            text, attr, value = STORAGE[name]
            warnings.clear()
            relstorage.options._warned.clear()
            factory, rest = _resolved(scheme, '%s=%s' % (name, text))
            if attr is None:
                # Said when the resolver reads it, or when the storage
                # opens with it.
                factory.options.check_supported()
                said = ' '.join(r.getMessage() for r in warnings.records)
                assert name.replace('_', '-') in said or name in said, (
                    scheme, name, said)
            else:
                assert getattr(factory.options, attr) == value, (scheme,
                                                                 name)


def test_every_adapter_argument_of_relstorage4(rs4_arguments, warnings):
    for scheme, names in rs4_arguments.items():
        assert set(names['adapter']) == set(ADAPTER[scheme]), scheme
        for name in names['adapter']:
            text, check = ADAPTER[scheme][name]
            factory, rest = _resolved(scheme, '%s=%s' % (name, text))
            assert check(factory), (scheme, name)
    assert 'twophase' in ' '.join(r.getMessage() for r in warnings.records)


def test_the_driver_argument(rs4_arguments):
    for scheme in rs4_arguments:
        factory, rest = _resolved(scheme, 'driver=auto')
        assert factory.adapter_factory.driver == 'auto'


@pytest.mark.parametrize('scheme, query, check', [
    ('postgresql', 'sslmode=verify-full&sslrootcert=/etc/ca.pem'
     '&sslcert=/etc/c.pem&sslkey=/etc/k.pem&sslcrl=/etc/crl.pem',
     lambda f: {k: _dsn(f)[k] for k in ('sslmode', 'sslrootcert', 'sslcert',
                                         'sslkey', 'sslcrl')} == {
        'sslmode': 'verify-full', 'sslrootcert': '/etc/ca.pem',
        'sslcert': '/etc/c.pem', 'sslkey': '/etc/k.pem',
        'sslcrl': '/etc/crl.pem'}),
    ('mysql', 'ssl_mode=VERIFY_IDENTITY&ssl_ca=/etc/ca.pem'
     '&ssl_cert=/etc/c.pem&ssl-key=/etc/k.pem',
     lambda f: {k: _params(f)[k] for k in ('ssl_mode', 'ssl_ca', 'ssl_cert',
                                           'ssl_key')} == {
        'ssl_mode': 'VERIFY_IDENTITY', 'ssl_ca': '/etc/ca.pem',
        'ssl_cert': '/etc/c.pem', 'ssl_key': '/etc/k.pem'}),
])
def test_tls_keys(scheme, query, check):
    factory, _ = _resolved(scheme, query)
    assert check(factory)


def test_sqlite_data_dir_and_demostorage_open(tmp_path):
    where = tmp_path / 'rs'
    factory, rest = zodburi.resolve_uri(
        'sqlite://?data_dir=%s&demostorage=true' % where)
    assert rest == PLAIN
    storage = factory()
    assert isinstance(storage, DemoStorage)
    assert isinstance(storage.base, RelStorage)
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()['a'] = 1
    finally:
        db.close()
    assert (where / 'relstorage.sqlite3').exists()
    # The change stayed in the DemoStorage.
    factory, _ = zodburi.resolve_uri('sqlite://?data_dir=%s' % where)
    db = ZODB.DB(factory())
    try:
        with db.transaction() as conn:
            assert 'a' not in conn.root()
    finally:
        db.close()


def test_sqlite_two_data_dirs_are_refused(tmp_path):
    with pytest.raises(ValueError, match='two data directories'):
        zodburi.resolve_uri('sqlite://%s/a?data_dir=%s/b' % (tmp_path,
                                                             tmp_path))


def test_postgres_ssl_mode_and_connect_timeout_connect():
    dbs.require('postgresql')
    uri = 'postgres://%s:%s@%s:%s/%s_hf?ssl_mode=disable&connect_timeout=5' % (
        dbs.PG_USER, dbs.PG_PASSWORD, dbs.PG_HOST, dbs.PG_PORT,
        dbs.PG_DB_PREFIX)
    factory, rest = zodburi.resolve_uri(uri + '&keep_history=false')
    storage = factory()
    try:
        session = storage.adapter.connect(for_store=False)
        try:
            ssl = session.scalar('SELECT ssl FROM pg_stat_ssl '
                                 'WHERE pid = pg_backend_pid()')
        finally:
            session.close()
    finally:
        storage.close()
    assert ssl is False  # sslmode=disable reached libpq


def test_mysql_init_command_and_option_file_connect(tmp_path):
    dbs.require('mysql')
    p = dbs.mysql_params(False)
    option_file = tmp_path / 'my.cnf'
    # The user and password come from the option file's group only.
    option_file.write_text('[app]\nuser=%s\npassword=%s\n'
                           % (p['user'], p['passwd']))
    os.chmod(str(option_file), 0o600)
    uri = ('mysql://%s:%s/%s?keep_history=false&read_default_file=%s'
           '&read_default_group=app&init_command=SET%%20@rs4_uri%%3D42'
           '&client_flag=0&load_infile=0' % (
               p['host'], p['port'], p['db'], option_file))
    factory, rest = zodburi.resolve_uri(uri)
    assert rest == PLAIN
    storage = factory()
    try:
        session = storage.adapter.connect(for_store=False)
        try:
            assert session.scalar('SELECT @rs4_uri') == 42
            assert session.scalar('SELECT CURRENT_USER()').startswith(
                p['user'] + '@')
        finally:
            session.close()
    finally:
        storage.close()
