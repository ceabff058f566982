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

from .dbs import DATABASES
from .dbs import DatabaseFactory
from .dbs import PG_HOST
from .dbs import pg_dsn
from .dbs import require


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
            '<relstorage>\n cache-local-dir %s\n <sqlite3>\n data-dir %s\n'
            ' </sqlite3>\n</relstorage>' % (tmp_path / 'b', tmp_path)))
    assert 'not supported yet: cache-local-dir' in str(exc.value)


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
    assert 'relstoragetest_hp ' in pg_dsn(True) + ' '
    assert 'relstoragetest_hf2' in pg_dsn(False, 'dst')
