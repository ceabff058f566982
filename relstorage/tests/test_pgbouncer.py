"""PostgreSQL through a private pgbouncer (pool_mode = transaction, in
front of a private PostgreSQL server; see testing.pgbouncer_server): the
bank workload with many more clients than server connections, the
console scripts, the pack lock, and what happens when the storage is not
told of the pooler. (ZODB's conformance suites through it are in
test_conformance_pgbouncer.)"""
import io
import json
import textwrap
import time

import pytest
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf

from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.exceptions import ConfigurationError
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.dbs import require_pooler

from . import pooled_bank

HP_DB, HF_DB = 'relstoragetest_hp', 'relstoragetest_hf'


def _storage(pooler, database=HP_DB, keep_history=True, told='transaction',
             driver='auto', **options):
    return RelStorage(PostgreSQLAdapter(
        pooler.dsn(database), pooler=told, driver=driver,
        options=Options(keep_history=keep_history, **options)))


#: Both drivers (a script of statements comes back differently).
DRIVERS = pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])


def _backend_rows(pooler, sql, params=(), database='postgres'):
    conn = pooler.backend._admin_connect(database)
    try:
        cur = conn.cursor()
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def _commit_some(storage, count=5):
    db = ZODB.DB(storage)
    try:
        for i in range(count):
            with db.transaction() as conn:
                conn.root()['m%d' % (i % 3)] = PersistentMapping(n=i)
    finally:
        db.close()


# -- what the storage is told ------------------------------------------------

def test_the_pooler_option_is_checked():
    with pytest.raises(ConfigurationError, match='pooler: .statement.'):
        PostgreSQLAdapter('dbname=x', pooler='statement')
    assert PostgreSQLAdapter('dbname=x', pooler='Transaction').pooler == \
        'transaction'
    assert PostgreSQLAdapter('dbname=x').pooler == 'none'


def test_the_pooler_option_in_a_config_and_a_uri():
    import ZConfig
    from relstorage.uriresolver import postgresql
    pooler = require_pooler('transaction')
    factory, _ = postgresql(
        'postgresql://relstoragetest:relstoragetest@%s:%s/%s'
        '?pooler=transaction&keep-history=true'
        % (pooler.host, pooler.port, HP_DB))
    storage = factory()
    try:
        assert storage.adapter.pooler == 'transaction'
    finally:
        storage.close()
    schema = ZConfig.loadSchemaFile(io.StringIO(
        '<schema><import package="ZODB"/><import package="relstorage"/>'
        '<section type="ZODB.storage" name="*" attribute="storage"/>'
        '</schema>'))
    config, _ = ZConfig.loadConfigFile(schema, io.StringIO(textwrap.dedent(
        '''\
        <relstorage>
          <postgresql>
            dsn %s
            pooler transaction
          </postgresql>
        </relstorage>
        ''' % pooler.dsn(HP_DB))))
    storage = config.storage.open()
    try:
        assert storage.adapter.pooler == 'transaction'
        _commit_some(storage, 2)
    finally:
        storage.close()


@DRIVERS
def test_not_told_of_a_transaction_pooler_is_refused_at_open(driver):
    pooler = require_pooler('transaction')
    with pytest.raises(ConfigurationError) as raised:
        _storage(pooler, told='none', driver=driver)
    message = str(raised.value)
    assert 'transaction mode' in message and 'pooler transaction' in message
    assert 'password' not in message
    assert 'DuplicatePreparedStatement' not in message


def test_a_session_pooler_passes_the_check_made_at_open():
    pooler = require_pooler('session')
    storage = _storage(pooler, told='none')
    try:
        _commit_some(storage)
    finally:
        storage.close()


def test_prepared_statements_met_in_a_lent_session_name_the_pooler():
    # Told "session" (no check at open) while the pooler lends its one
    # server session to each client in turn: the second client's prepare
    # meets the first one's statement. The error names the mode, not the
    # driver's DuplicatePreparedStatement.
    pooler = require_pooler('transaction', pool_size=1)
    _storage(pooler).close()   # the schema
    adapters = [PostgreSQLAdapter(pooler.dsn(HP_DB), pooler='session')
                for _ in range(2)]
    sessions = []
    with pytest.raises(ConfigurationError,
                       match='transaction mode.*pooler transaction'):
        for adapter in adapters:
            sessions.append(adapter.open_load_session())
            sessions[-1].load_current(0)
            sessions[-1].end_snapshot()
    assert len(sessions) == 2
    for session in sessions:
        session.close()


# -- nothing outlives a transaction -------------------------------------------

@DRIVERS
def test_no_temporary_table_or_session_setting_outlives_a_transaction(
        driver):
    pooler = require_pooler('transaction', pool_size=2)
    storage = _storage(pooler, HF_DB, keep_history=False, poll_interval=5,
                       driver=driver)
    try:
        storage.zap_all()
        _commit_some(storage, 10)
        storage.pack(time.time() + 1, referencesf)
        # Loads by clients of their own, each from the database.
        for _ in range(3):
            other = _storage(pooler, HF_DB, keep_history=False,
                             driver=driver)
            try:
                assert other.load(b'\0' * 8)[1]
            finally:
                other.close()
        # Every server session of the pool, each held by a transaction of
        # its own: no temporary table (pg_class of the whole database),
        # no prepared statement, no LISTEN, and the server's default lock
        # timeout in each.
        temps = _backend_rows(
            pooler, "SELECT count(*) FROM pg_class WHERE relpersistence "
            "= 't'", database=HF_DB)[0][0]
        assert temps == 0
        held = [pooler.connect(HF_DB) for _ in range(pooler.pool_size)]
        try:
            pids = set()
            for conn in held:
                cur = conn.cursor()   # (psycopg2 begins a transaction)
                cur.execute(
                    'SELECT pg_backend_pid(), (SELECT count(*) FROM '
                    'pg_prepared_statements), (SELECT count(*) FROM '
                    "pg_listening_channels()), current_setting("
                    "'lock_timeout')")
                pid, prepared, channels, timeout = cur.fetchone()
                pids.add(pid)
                assert (prepared, channels, timeout) == (0, 0, '0')
            assert len(pids) == pooler.pool_size
        finally:
            for conn in held:
                conn.close()
    finally:
        storage.close()


# -- the pack lock -------------------------------------------------------------

def test_one_pack_at_a_time_through_the_pooler():
    from relstorage.adapters.postgresql import pooler as pooled
    pooler = require_pooler('transaction')
    first, second = _storage(pooler), _storage(pooler)
    try:
        _commit_some(first, 2)
        one = first.adapter.open_pack_writer()
        other = second.adapter.open_pack_writer()
        try:
            assert one.lock_pack()
            assert not other.lock_pack()
            # Held across transactions and server sessions.
            one.begin_scratch()
            one.commit()
            assert not other.lock_pack()
        finally:
            one.close()
        assert other.lock_pack()
        # A holder that stops renewing (a killed process) loses it once
        # the lease lapses.
        other.session.pack_lease.stop()
        other.session.pack_lease = None
        third = first.adapter.open_pack_writer()
        try:
            assert not third.lock_pack()
            _backend_rows(pooler, "UPDATE relstorage_meta SET value = "
                          "split_part(value, ' ', 1) || ' 0' WHERE name = %s",
                          (pooled.LEASE_NAME,), database=HP_DB)
            assert third.lock_pack()
        finally:
            third.close()
        other.close()
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_a_pack_with_its_graph_in_the_database(keep_history):
    # The scratch tables are unlogged tables of the database, filled in
    # one transaction and read in the batches' others (each perhaps on
    # another server session), and emptied when the pack ends. While it
    # reads, the pack holds three server sessions at once (its snapshot,
    # the scratch fill, the kept references' short transactions): with
    # fewer in the pool the third would queue until the pooler's
    # query_wait_timeout, and the references would not be kept.
    pooler = require_pooler('transaction', pool_size=4)
    database = HP_DB if keep_history else HF_DB
    storage = _storage(pooler, database, keep_history, pack_graph_mb=0,
                       pack_batch_timeout=0.0001)
    try:
        storage.zap_all()
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            for i in range(30):
                conn.root()['o%d' % i] = PersistentMapping(i=i)
        with db.transaction() as conn:
            for i in range(0, 30, 2):
                del conn.root()['o%d' % i]
        result = storage.pack_with_result(time.time() + 1, referencesf)
        assert result['prepack_graph'] == 'database'
        assert result['objects_removed'] == 15
        assert result['batches'] > 1
        with db.transaction() as conn:
            assert sorted(conn.root().keys()) == sorted(
                'o%d' % i for i in range(1, 30, 2))
        db.close()
        rows = _backend_rows(
            pooler, "SELECT c.relname, c.relpersistence, (SELECT count(*) "
            "FROM pack_gc) FROM pg_class c WHERE c.relname = 'pack_gc'",
            database=database)
        assert rows == [('pack_gc', 'u', 0)]
        # The references the pre-pack read were kept, for the next pack.
        kept = _backend_rows(pooler, 'SELECT count(*) FROM state_refs',
                             database=database)
        assert kept[0][0] >= 16, kept
        assert _backend_rows(pooler, "SELECT count(*) FROM relstorage_meta "
                             "WHERE name = 'pack_lock'",
                             database=database) == [(0,)]
    finally:
        storage.close()


# -- the bank workload --------------------------------------------------------

POOL = 4


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_bank_through_a_transaction_pooler(keep_history, tmp_path):
    """8 processes of 3 ZODB connections each, through default_pool_size
    4: the total is conserved, each acknowledged transfer is there once,
    and the database never has more than 4 server backends."""
    pooler = require_pooler('transaction', pool_size=POOL)
    # A database of its own: the server connections other pools of the
    # run keep to the test databases do not count.
    database = 'relstoragetest_bank_%s' % ('hp' if keep_history else 'hf')
    conn = pooler.backend._admin_connect()
    try:
        cur = conn.cursor()
        cur.execute('DROP DATABASE IF EXISTS %s' % database)
        cur.execute('CREATE DATABASE %s OWNER relstoragetest' % database)
    finally:
        conn.close()
    result = pooled_bank.run_bank(pooler, database, keep_history,
                                  str(tmp_path), processes=8, threads=3,
                                  seconds=12)
    assert pooled_bank.check_bank(result) == []
    committed = sum(1 for line in result['lines'] if line.startswith('C '))
    backends = result['backends']
    print('\n%s: %d transfers committed; server backends for the '
          'database: max %d over %d samples; clients at the pooler: max %d'
          % ('HP' if keep_history else 'HF', committed, max(backends),
             len(backends), max(result['clients'] or [0])))
    assert len(backends) > 50
    assert 0 < max(backends) <= POOL
    # More clients than server connections: the pool was shared.
    assert max(result['clients']) > POOL


# -- the console scripts ------------------------------------------------------

def _config(tmp_path, pooler, database, name='site.conf', extra=''):
    path = tmp_path / name
    path.write_text(textwrap.dedent('''\
        %%import relstorage
        <relstorage>
          keep-history true
          blob-dir %s
          %s
          <postgresql>
            dsn %s
            pooler transaction
          </postgresql>
        </relstorage>
        ''') % (tmp_path / ('blobs-' + name), extra, pooler.dsn(database)))
    return path


def test_console_scripts_through_the_pooler(tmp_path):
    from relstorage import zodbcheck, zodbconvert, zodbinfo, zodbpack
    from ZODB.FileStorage import FileStorage
    pooler = require_pooler('transaction')
    source = FileStorage(str(tmp_path / 'Data.fs'))
    db = ZODB.DB(source)
    for i in range(6):
        with db.transaction() as conn:
            conn.root()['k%d' % (i % 2)] = PersistentMapping(i=i)
    db.close()
    target = _config(tmp_path, pooler, HP_DB)
    convert = tmp_path / 'convert.conf'
    convert.write_text(textwrap.dedent('''\
        %%import relstorage
        <filestorage source>
          path %s
        </filestorage>
        <relstorage destination>
          keep-history true
          <postgresql>
            dsn %s
            pooler transaction
          </postgresql>
        </relstorage>
        ''') % (tmp_path / 'Data.fs', pooler.dsn(HP_DB)))
    out = io.StringIO()
    assert zodbconvert.main(['--clear', str(convert)], out=out) == 0
    assert zodbinfo.main([str(target)], out=out) == 0
    assert zodbcheck.main([str(target)], out=out, err=out) == 0
    assert zodbpack.main(['-d', '0', str(target)], out=out) == 0
    storage = RelStorage(PostgreSQLAdapter(pooler.dsn(HP_DB),
                                           pooler='transaction'))
    try:
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            assert conn.root()['k0']['i'] == 4
            assert conn.root()['k1']['i'] == 5
        # Packed to now: one revision left of each object.
        history = storage.history(b'\0' * 8, size=100)
        assert len(history) == 1
        db.close()
    finally:
        storage.close()
    text = out.getvalue()
    assert 'password=relstoragetest' not in text


def test_relstorage_upgrade_through_the_pooler(tmp_path, capsys):
    from .test_relstorage4_upgrade import build_rs4
    from relstorage import upgrade
    from relstorage.testing import rs4_workload
    pooler = require_pooler('transaction')
    database = 'relstoragetest_misc'
    conn = pooler.backend._admin_connect(database)
    try:
        conn.cursor().execute('DROP SCHEMA public CASCADE; CREATE SCHEMA '
                              'public AUTHORIZATION relstoragetest')
    finally:
        conn.close()
    # Built by RelStorage 4 straight on the server; upgraded and read
    # through the pooler.
    direct = 'dbname=%s host=%s port=%s user=relstoragetest' % (
        database, pooler.backend.host, pooler.backend.port)
    expected = build_rs4('postgresql', True, direct,
                         str(tmp_path / 'rs4.json'))
    config = _config(tmp_path, pooler, database,
                     extra='blob-chunk-size 1024')
    assert upgrade.main([str(config)]) == 0
    assert 'upgraded from RelStorage 4' in capsys.readouterr().out
    from ZODB.config import storageFromFile
    with open(config) as f:
        storage = storageFromFile(f)
    try:
        assert json.loads(json.dumps(rs4_workload.dump(storage),
                                     sort_keys=True)) == expected
    finally:
        storage.close()

