"""Clear errors for the wrong database, the wrong mode, bad configuration
and servers that cannot be reached -- never a raw driver traceback."""
import pytest
import ZODB.config

from relstorage.exceptions import ConfigurationError
from relstorage.exceptions import DatabaseUnavailable
from relstorage.exceptions import HistoryModeMismatch
from relstorage.exceptions import NotSupportedYet
from relstorage.exceptions import SchemaError
from relstorage.options import Options
from relstorage.testing.dbs import DATABASES
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import PG_DB_PREFIX
from relstorage.testing.dbs import PG_HOST
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require


@pytest.fixture(params=DATABASES)
def misc(request):
    """A factory whose 'misc' database starts without any schema."""
    f = DatabaseFactory(request.param, True)
    adapter = f.adapter('misc')
    adapter.drop_all()
    yield f
    f.adapter('misc').drop_all()
    f.cleanup()


def _adapter(factory, keep_history, **kw):
    f = DatabaseFactory(factory.db, keep_history)
    f._dirs = factory._dirs
    return f.adapter('misc', **kw)


def test_history_mode_mismatch_is_refused(misc):
    from relstorage.storage import RelStorage
    RelStorage(_adapter(misc, True)).close()
    with pytest.raises(HistoryModeMismatch) as exc:
        RelStorage(_adapter(misc, False))
    msg = str(exc.value)
    assert 'keep-history true' in msg and 'keep-history false' in msg


def test_history_free_schema_refuses_history_preserving(misc):
    from relstorage.storage import RelStorage
    RelStorage(_adapter(misc, False)).close()
    with pytest.raises(HistoryModeMismatch):
        RelStorage(_adapter(misc, True))


def test_unknown_schema_version_is_refused(misc):
    from relstorage.storage import RelStorage
    adapter = _adapter(misc, True)
    RelStorage(adapter).close()
    session = adapter.connect(for_store=True)
    session.begin()
    session.execute("UPDATE relstorage_meta SET value = %s "
                    "WHERE name = 'schema_version'", ('99',))
    session.commit()
    session.close()
    with pytest.raises(SchemaError) as exc:
        RelStorage(_adapter(misc, True))
    assert "unknown schema version '99'" in str(exc.value)


def test_tables_from_another_tool_are_refused(misc):
    from relstorage.storage import RelStorage
    adapter = _adapter(misc, True)
    session = adapter.connect(for_store=True)
    session.begin()
    session.execute('CREATE TABLE object_state (zoid INTEGER)')
    session.commit()
    session.close()
    with pytest.raises(SchemaError) as exc:
        RelStorage(_adapter(misc, True))
    assert 'another tool' in str(exc.value)


def test_no_schema_and_create_schema_false(misc):
    from relstorage.storage import RelStorage
    with pytest.raises(SchemaError) as exc:
        RelStorage(_adapter(misc, True, create_schema=False))
    assert 'create-schema is false' in str(exc.value)


def test_unreachable_postgresql_names_host_and_port():
    require('postgresql')
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    adapter = PostgreSQLAdapter(
        'dbname=x host=127.0.0.1 port=9 user=x connect_timeout=5',
        options=Options())
    with pytest.raises(DatabaseUnavailable) as exc:
        adapter.prepare()
    assert 'host=127.0.0.1' in str(exc.value)
    assert 'port=9' in str(exc.value)


def test_wrong_postgresql_credentials_and_database():
    require('postgresql')
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    for dsn, word in (
            ('dbname=relstoragetest_hp host=%s user=no_such_role' % PG_HOST,
             'no_such_role'),
            ('dbname=no_such_db host=%s user=relstoragetest' % PG_HOST,
             'no_such_db')):
        with pytest.raises(DatabaseUnavailable) as exc:
            PostgreSQLAdapter(dsn, options=Options()).prepare()
        assert word in str(exc.value)


def test_password_never_shown():
    require('postgresql')
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    adapter = PostgreSQLAdapter(
        'dbname=x host=127.0.0.1 port=9 user=x password=sekrit '
        'connect_timeout=5', options=Options())
    assert 'sekrit' not in adapter.describe()
    with pytest.raises(DatabaseUnavailable) as exc:
        adapter.prepare()
    assert 'sekrit' not in str(exc.value)


def _config(body):
    return '%%import relstorage\n<zodb>\n%s\n</zodb>\n' % body


def test_bad_option_value_names_the_option():
    with pytest.raises(Exception) as exc:
        ZODB.config.databaseFromString(_config(
            '<relstorage>\n keep-history maybe\n</relstorage>'))
    assert 'keep-history' in str(exc.value)


def test_unknown_option_names_the_option():
    with pytest.raises(Exception) as exc:
        ZODB.config.databaseFromString(_config(
            '<relstorage>\n no-such-option 1\n</relstorage>'))
    assert 'no-such-option' in str(exc.value)


def test_option_not_supported_yet_says_so(tmp_path):
    with pytest.raises(NotSupportedYet) as exc:
        ZODB.config.databaseFromString(_config(
            '<relstorage>\n cache-local-compression zlib\n <sqlite3>\n'
            ' data-dir %s\n </sqlite3>\n</relstorage>' % tmp_path))
    assert 'not supported yet: cache-local-compression' in str(exc.value)


def test_replicas_on_sqlite_are_refused_by_name(tmp_path):
    servers = tmp_path / 'servers.conf'
    servers.write_text('db1\n')
    with pytest.raises(ConfigurationError) as exc:
        ZODB.config.databaseFromString(_config(
            '<relstorage>\n replica-conf %s\n <sqlite3>\n data-dir %s\n'
            ' </sqlite3>\n</relstorage>' % (servers, tmp_path)))
    assert 'replica-conf' in str(exc.value)
    assert 'SQLite' in str(exc.value)


def test_bad_sqlite_pragma_is_refused(tmp_path):
    from relstorage.adapters.sqlite import SQLiteAdapter
    with pytest.raises(ConfigurationError) as exc:
        SQLiteAdapter(str(tmp_path), pragmas={'journal_mode': 'wal; DROP'})
    assert 'journal_mode' in str(exc.value)


def test_read_only_storage_on_empty_database(misc):
    from relstorage.storage import RelStorage
    with pytest.raises(SchemaError):
        RelStorage(_adapter(misc, True, read_only=True))


def test_pg_dsn_helper_points_at_mode_databases():
    assert 'dbname=%s_hp ' % PG_DB_PREFIX in pg_dsn(True) + ' '
    assert 'dbname=%s_hf2 ' % PG_DB_PREFIX in pg_dsn(False, 'dst') + ' '



def test_corrupt_record_names_the_object_and_loses_nothing(factory):
    import transaction
    import ZODB
    from persistent.mapping import PersistentMapping
    from ZODB.utils import p64
    from ZODB.utils import u64

    from relstorage.exceptions import CorruptRecord
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            conn.root()['bad'] = PersistentMapping(v=1)
            conn.root()['good'] = PersistentMapping(v=2)
        with db.transaction() as conn:
            oid = u64(conn.root()['bad']._p_oid)
            good = conn.root()['good']._p_oid
        # Something outside the storage truncates one row.
        adapter = factory.adapter()
        session = adapter.connect(for_store=True)
        session.begin()
        session.execute('UPDATE object_state SET state = %s WHERE zoid = %s',
                        (b'\x80\x03cpersistent.mapping\nPersistentMa', oid))
        session.commit()
        session.close()
        adapter.close()
        db.close()
        db = ZODB.DB(factory.storage())
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        root = conn.root()
        with pytest.raises(CorruptRecord) as exc:
            root['bad']['v']
        message = str(exc.value)
        assert '0x%x' % oid in message and 'damaged' in message
        assert factory.adapter().describe() in message
        # Everything else still loads, and the row is unchanged.
        assert root['good']['v'] == 2
        tm.abort()
        conn.close()
        assert db.storage.load(good)[0].endswith(b'.')
        with pytest.raises(CorruptRecord):
            db.storage.load(p64(oid))
        # prefetch is a hint: it reads what it can, and the damaged row
        # fails only its own load.
        fresh = factory.storage()
        try:
            fresh.prefetch([p64(oid), good])
            assert len(fresh._cache) == 1
            with pytest.raises(CorruptRecord):
                fresh.load(p64(oid))
        finally:
            fresh.close()
    finally:
        db.close()


@pytest.mark.parametrize('keep_history', [True, False])
def test_full_sqlite_database_is_a_clear_error_and_loses_nothing(
        tmp_path, keep_history):
    import ZODB
    from persistent.mapping import PersistentMapping

    from relstorage.adapters.sqlite import SQLiteAdapter
    from relstorage.exceptions import DatabaseFull
    from relstorage.storage import RelStorage

    def open_db(**pragmas):
        return ZODB.DB(RelStorage(SQLiteAdapter(
            str(tmp_path), pragmas=pragmas,
            options=Options(keep_history=keep_history))))
    db = open_db()
    with db.transaction() as conn:
        conn.root()['a'] = PersistentMapping(v=1)
    session = db.storage._adapter.connect(for_store=False)
    pages = session.scalar('PRAGMA page_count')
    session.close()
    db.close()
    # The disk "fills up": the database may grow by two pages only.
    db = open_db(max_page_count=pages + 2)
    try:
        with pytest.raises(DatabaseFull) as exc:
            with db.transaction() as conn:
                conn.root()['a']['v'] = 2
                conn.root()['big'] = PersistentMapping(v=b'x' * 1000000)
        assert 'is full' in str(exc.value) and str(tmp_path) in str(exc.value)
        with db.transaction() as conn:
            assert conn.root()['a']['v'] == 1
            assert 'big' not in conn.root()
    finally:
        db.close()
    # With room again, the same commit succeeds.
    db = open_db()
    try:
        with db.transaction() as conn:
            conn.root()['a']['v'] = 2
            conn.root()['big'] = PersistentMapping(v=b'x' * 1000000)
        with db.transaction() as conn:
            assert conn.root()['a']['v'] == 2
            assert len(conn.root()['big']['v']) == 1000000
    finally:
        db.close()


RO_USER = 'relstoragetest_ro'


def _sessions_held_by(tb):
    """The database sessions the frames of traceback *tb* refer to (as
    locals, or as a local's ``session``)."""
    from relstorage.adapters.session import Session
    found = []
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            for candidate in (value, getattr(value, 'session', None)):
                if isinstance(candidate, Session):
                    found.append(candidate)
        tb = tb.tb_next
    return found


@pytest.mark.parametrize('db_name', ['postgresql', 'mysql'])
def test_read_only_database_user(db_name):
    """A user that may only read (made by scripts/testdb.sh) can use the
    storage with read-only true; without it, a commit fails with an error
    that names the database and the option, and changes nothing."""
    import ZODB
    from persistent.mapping import PersistentMapping

    from relstorage.exceptions import PermissionDenied
    from relstorage.storage import RelStorage

    from relstorage.testing.dbs import PG_PASSWORD
    from relstorage.testing.dbs import PG_USER
    from relstorage.testing.dbs import in_ci
    from relstorage.testing.dbs import mysql_params
    from relstorage.testing.dbs import pg_dsn
    from relstorage.testing.dbs import require
    require(db_name)
    factory = DatabaseFactory(db_name, True)
    db = ZODB.DB(factory.storage(zap=True))
    with db.transaction() as conn:
        conn.root()['a'] = PersistentMapping(v=1)
    db.close()

    def ro_storage(read_only):
        options = Options(keep_history=True, read_only=read_only)
        if db_name == 'postgresql':
            from relstorage.adapters.postgresql import PostgreSQLAdapter
            dsn = pg_dsn(True).replace('user=%s' % PG_USER,
                                       'user=%s' % RO_USER).replace(
                'password=%s' % PG_PASSWORD, 'password=%s' % RO_USER)
            adapter = PostgreSQLAdapter(dsn, options=options)
        else:
            from relstorage.adapters.mysql import MySQLAdapter
            adapter = MySQLAdapter(options=options, **mysql_params(
                True, user=RO_USER, passwd=RO_USER))
        return RelStorage(adapter)

    try:
        storage = ro_storage(True)
    except DatabaseUnavailable as e:
        if in_ci():
            raise
        pytest.skip('no read-only test account (scripts/testdb.sh): %s' % e)
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            assert conn.root()['a']['v'] == 1
    finally:
        db.close()

    db = ZODB.DB(ro_storage(False))
    try:
        with pytest.raises(PermissionDenied) as exc:
            with db.transaction() as conn:
                conn.root()['a']['v'] = 2
        message = str(exc.value)
        assert 'read-only true' in message
        assert db.storage._adapter.describe() in message
    finally:
        db.close()
    # The error, kept (as a traceback shown or logged keeps it), holds
    # no connection open: the one refused is closed.
    assert _sessions_held_by(exc.tb)
    assert [s for s in _sessions_held_by(exc.tb) if not s.closed] == []
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            assert conn.root()['a']['v'] == 1
    finally:
        db.close()
        factory.cleanup()


def test_oids_above_the_columns_range(factory):
    """Oids of 2**63 and above fit no database column: reading one is a
    POSKeyError like any missing object, storing one names the problem and
    commits nothing."""
    import transaction as txn_mod
    from ZODB.Connection import TransactionMetaData
    from ZODB.POSException import POSKeyError
    from ZODB.utils import p64
    from ZODB.utils import z64

    from relstorage.exceptions import OidOutOfRange
    storage = factory.storage()
    try:
        db = ZODB.DB(storage)
        with txn_mod.manager:
            db.open().root()['kept'] = 1
        for oid in (p64(1 << 63), p64((1 << 64) - 1)):
            with pytest.raises(POSKeyError):
                storage.load(oid)
            with pytest.raises(POSKeyError):
                storage.loadBefore(oid, p64(1 << 62))
            with pytest.raises(POSKeyError):
                storage.loadSerial(oid, storage.lastTransaction())
            with pytest.raises(POSKeyError):
                storage.history(oid)
            storage.prefetch([oid, z64])     # nothing to read ahead
        # A tid past the largest reads as "the newest".
        state, tid, end = storage.loadBefore(z64, p64((1 << 64) - 1))
        assert tid == storage.lastTransaction() and end is None

        instance = storage.new_instance()
        # The largest oid a column holds is refused too: the oid counter
        # could not be moved past it.
        for too_far in (1 << 63, (1 << 63) - 1):
            meta = TransactionMetaData()
            instance.tpc_begin(meta)
            instance.store(instance.new_oid(), z64, b'fine', '', meta)
            instance.restore(p64(too_far), z64, b'too far', '', None, meta)
            with pytest.raises(OidOutOfRange, match='0x%x' % too_far):
                instance.tpc_vote(meta)
            instance.tpc_abort(meta)
        before = len(storage)
        with txn_mod.manager:
            root = db.open().root()
            assert root['kept'] == 1
            root['after'] = 2
        assert len(storage) == before
        instance.release()
        db.close()
    finally:
        storage.close()
