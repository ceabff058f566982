"""The test command never stops, restarts or reconfigures a server it did
not start: ``scripts/testdb.sh``, which it runs before every run, leaves
the configured PostgreSQL and MariaDB servers as it found them (same
process, same settings, configuration not reloaded)."""
import pathlib
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
