"""The test command never stops, restarts or reconfigures a server it did
not start: ``scripts/testdb.sh``, which it runs before every run, leaves
the configured PostgreSQL and MariaDB servers as it found them (same
process, same settings, configuration not reloaded). On MySQL/MariaDB
the accounts it makes, whose passwords are known, are loopback ones only,
and the same accounts at any host ('%') are dropped."""
import os
import pathlib
import re
import subprocess

import pytest

from relstorage.testing.dbs import admin_query
from relstorage.testing.dbs import require

SCRIPT = pathlib.Path(__file__).parents[2] / 'scripts' / 'testdb.sh'

STATE = {
    'postgresql': ("SELECT pg_postmaster_start_time()::text, "
                   "pg_conf_load_time()::text, "
                   "current_setting('max_connections')"),
    'mysql': ("SELECT @@max_connections, "
              "(SELECT variable_value FROM information_schema.global_status "
              " WHERE variable_name = 'UPTIME')"),
}


def _state(db_name):
    return admin_query(db_name, True, STATE[db_name])[0]


@pytest.mark.parametrize('db_name', ['postgresql', 'mysql'])
def test_testdb_script_leaves_the_server_alone(db_name):
    require(db_name)
    before = _state(db_name)
    flag = '--postgresql' if db_name == 'postgresql' else '--mysql'
    run = subprocess.run(['bash', str(SCRIPT), flag], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    after = _state(db_name)
    if db_name == 'postgresql':
        # Not restarted, not reloaded, max_connections as it was.
        assert after == before
    else:
        max_before, uptime_before = before
        max_after, uptime_after = after
        assert max_after == max_before
        # Not restarted: the uptime went on.
        assert int(uptime_after) >= int(uptime_before)


LOOPBACK = {'localhost', '127.0.0.1', '::1'}
TEST_ACCOUNTS = ('relstoragetest', 'relstoragetest_ro')


def _mysql_sql():
    run = subprocess.run(['bash', str(SCRIPT), '--print-mysql-sql'],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_testdb_script_makes_loopback_mysql_accounts_only():
    """What it would send: every account it creates or grants to is at a
    loopback host; the two test accounts at '%' are dropped."""
    lines = _mysql_sql()
    made = set()
    dropped = set()
    for line in lines:
        for user, host in re.findall(r"'([^']+)'@'([^']*)'", line):
            if line.startswith('DROP USER'):
                dropped.add((user, host))
            else:
                made.add((user, host))
    assert {host for _, host in made} == LOOPBACK
    assert {user for user, _ in made} == set(TEST_ACCOUNTS)
    assert dropped == {(user, '%') for user in TEST_ACCOUNTS}
    assert not any('%' in host for _, host in made)


def test_testdb_script_drops_the_any_host_accounts():
    """Run against a private MariaDB server that has the test accounts at
    '%' as well (as earlier versions of the script made them): after it,
    they are at loopback hosts only, and still log in."""
    import MySQLdb

    from relstorage.testing.dbs import require_private_server
    server = require_private_server('mysql')
    server.admin(*["CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s'"
                   % (user, user) for user in TEST_ACCOUNTS])
    env = dict(os.environ, RELSTORAGE_TEST_MYSQL_HOST=server.host,
               RELSTORAGE_TEST_MYSQL_PORT=str(server.port),
               RELSTORAGE_TEST_MYSQL_ADMIN_USER=server.admin_user,
               RELSTORAGE_TEST_MYSQL_ADMIN_PASSWORD='')
    run = subprocess.run(['bash', str(SCRIPT), '--mysql'], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    accounts = set(server.admin(
        'SELECT User, Host FROM mysql.user WHERE User IN (%s)'
        % ', '.join("'%s'" % user for user in TEST_ACCOUNTS)))
    assert accounts == {(user, host) for user in TEST_ACCOUNTS
                        for host in LOOPBACK}
    MySQLdb.connect(host=server.host, port=server.port, user=server.user,
                    passwd=server.password, db='relstoragetest_hp',
                    connect_timeout=5).close()
