"""A configuration written for RelStorage 4 opens unchanged: every key its
``component.xml`` accepts is accepted, those that have no effect here are
named in a warning (once), RelStorage's driver spellings work or are
refused with the list of those that do, and a bad dsn keyword is named
before anything connects."""

import pytest
import transaction
import ZConfig
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.config import storage_from_string
from relstorage.exceptions import ConfigurationError
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require

#: Every <relstorage> key of RelStorage 4.3's component.xml, with the
#: values a site might have, and the <sqlite3> ones.
RELSTORAGE4 = '''
<relstorage>
  name site
  read-only false
  blob-dir %(tmp)s/blobs
  shared-blob-dir false
  blob-cache-size 100mb
  blob-cache-size-check 10
  blob-cache-size-check-external false
  blob-chunk-size 1mb
  keep-history true
  replica-timeout 600.0
  revert_when_stale false
  poll-interval 0
  pack-gc true
  pack-prepack-only false
  pack-skip-prepack false
  pack-batch-timeout 1.0
  pack-commit-busy-delay 5.0
  cache-servers 127.0.0.1:11211
  cache-module-name relstorage.pylibmc_wrapper
  cache-prefix site
  cache-local-mb 20
  cache-local-storage relstorage.cache.local_client.LocalClient
  cache-local-dir-count 20
  cache-local-dir-read-count 10
  cache-local-dir-compress false
  cache-local-dir-write-max-size 10mb
  cache-local-object-max 16384
  cache-local-compression none
  cache-delta-size-limit 100000
  commit-lock-timeout 30
  commit-lock-id 0
  create-schema true
  <sqlite3>
    data-dir %(tmp)s/db
    driver auto
    gevent_yield_interval 100
    <pragmas>
      cache_size 8mb
    </pragmas>
  </sqlite3>
</relstorage>
'''

IGNORED_NAMES = ('cache-local-dir-count', 'cache-local-dir-read-count',
                 'cache-local-dir-compress', 'cache-local-dir-write-max-size',
                 'cache-local-storage', 'cache-servers', 'cache-module-name',
                 'gevent_yield_interval')


def test_a_relstorage4_config_opens_unchanged(tmp_path, warnings):
    # Private, as the storage would make it (one open to others is warned
    # about).
    (tmp_path / 'db').mkdir(mode=0o700)
    storage = storage_from_string(RELSTORAGE4 % {'tmp': tmp_path})
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()['a'] = PersistentMapping(v=1)
        with db.transaction() as conn:
            assert conn.root()['a']['v'] == 1
    finally:
        db.close()
    text = '\n'.join(r.getMessage() for r in warnings.records)
    for name in IGNORED_NAMES:
        assert 'option %s is ignored' % name in text, name
    # One line each, once.
    assert len(warnings.records) == len(IGNORED_NAMES)


def test_revert_when_stale_in_either_spelling(tmp_path):
    for spelling in ('revert_when_stale', 'revert-when-stale'):
        text = ('<relstorage>\n %s true\n <sqlite3>\n  data-dir %s\n'
                ' </sqlite3>\n</relstorage>\n' % (spelling, tmp_path))
        storage = storage_from_string(text)
        try:
            assert storage._options.revert_when_stale is True
        finally:
            storage.close()
    # Found while the file is parsed: ZConfig reports it with the line.
    with pytest.raises(ZConfig.ConfigurationError, match='different values'):
        storage_from_string(
            '<relstorage>\n revert_when_stale true\n revert-when-stale '
            'false\n <sqlite3>\n  data-dir %s\n </sqlite3>\n</relstorage>\n'
            % tmp_path)


def test_poll_interval_without_announced_commits_is_warned(tmp_path,
                                                           warnings):
    """MySQL announces no commits: reads may be stale for the interval.
    (SQLite's data_version and PostgreSQL's NOTIFY do.)"""
    require('mysql')
    keys = '\n'.join('  %s %s' % item for item in mysql_params(True).items())
    storage = storage_from_string(
        '<relstorage>\n poll-interval 60\n <mysql>\n%s\n </mysql>\n'
        '</relstorage>\n' % keys)
    storage.close()
    assert any('poll-interval 60' in r.getMessage()
               and 'up to 60' in r.getMessage() for r in warnings.records)
    warnings.clear()
    storage = storage_from_string(
        '<relstorage>\n poll-interval 60\n <sqlite3>\n  data-dir %s\n'
        ' </sqlite3>\n</relstorage>\n' % tmp_path)
    storage.close()
    assert not warnings.records


@pytest.mark.parametrize('driver', ['pg8000', 'psycopg2cffi', 'nonsense'])
def test_postgresql_driver_not_supported_lists_those_that_are(driver):
    with pytest.raises(ConfigurationError) as exc:
        storage_from_string('<relstorage>\n <postgresql>\n  driver %s\n'
                            ' </postgresql>\n</relstorage>\n' % driver)
    assert 'supported: auto, psycopg2' in str(exc.value)
    assert driver in str(exc.value)


def test_postgresql_driver_in_any_case_and_bad_dsn_keyword():
    require('postgresql')
    text = ('<relstorage>\n <postgresql>\n  driver Psycopg2\n  dsn %s\n'
            ' </postgresql>\n</relstorage>\n')
    storage = storage_from_string(text % pg_dsn(True))
    storage.close()
    with pytest.raises(ConfigurationError) as exc:
        storage_from_string(text % (pg_dsn(True) + ' hots=db.example.org'))
    assert str(exc.value).startswith('dsn: ')
    assert 'hots' in str(exc.value)


@pytest.mark.parametrize('driver', ['mysqlclient', 'MySQLdb', 'PyMySQL',
                                    'pymysql', 'AUTO'])
def test_mysql_driver_spellings(driver):
    require('mysql')
    keys = '\n'.join('  %s %s' % item for item in mysql_params(True).items())
    storage = storage_from_string(
        '<relstorage>\n <mysql>\n  driver %s\n%s\n </mysql>\n</relstorage>\n'
        % (driver, keys))
    try:
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            conn.root()['driver'] = driver
        db.close()
    finally:
        storage.close()
    transaction.abort()


def test_mysql_driver_unknown_lists_those_that_are():
    with pytest.raises(ConfigurationError) as exc:
        storage_from_string('<relstorage>\n <mysql>\n  driver oursql\n'
                            ' </mysql>\n</relstorage>\n')
    assert 'supported: auto, MySQLdb or mysqlclient, PyMySQL' in str(
        exc.value)
