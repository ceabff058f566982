"""PostgreSQL with its tables on a full disk: the commit fails with
DatabaseFull (not the driver's DiskFull), at its vote or at its finish,
nothing of it is committed, and the same instance commits once there is
room again.

Unlike SQLite's, PostgreSQL's finish still writes (the rows are copied
into place under the short commit lock), so there the failure comes at
tpc_finish: README says so. The tables live in a tablespace on a small
tmpfs of a private server (the shared one is never reconfigured)."""
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.exceptions import DatabaseFull
from relstorage.options import Options
from relstorage.storage import RelStorage

from .dbs import in_ci
from .private_servers import NotInstalled
from .private_servers import ServerError
from .private_servers import private_server
from .test_sqlite_full_disk import fill
from .test_sqlite_full_disk import small_disk
from .test_sqlite_full_disk import store_all

DATABASE = 'relstorage_full_disk'


def _server():
    try:
        return private_server('postgresql')
    except (NotInstalled, ServerError) as e:
        if in_ci():
            pytest.fail('CI=true and %s' % e)
        pytest.skip(str(e))


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_postgresql_full_disk_raises_database_full(keep_history):
    server = _server()
    # Under /tmp: the server's own account must reach the mount.
    parent = Path(tempfile.mkdtemp(dir='/tmp'))
    os.chmod(parent, 0o755)
    try:
        _fill_and_commit(server, parent, keep_history)
    finally:
        shutil.rmtree(parent)


def _fill_and_commit(server, parent, keep_history):
    with small_disk(parent) as mount:
        owner = pwd.getpwnam(server.system_user)
        os.chown(mount, owner.pw_uid, owner.pw_gid)
        admin = server._admin_connect()
        cursor = admin.cursor()
        cursor.execute("CREATE TABLESPACE relstorage_full LOCATION '%s'"
                       % mount)
        storage = None
        try:
            cursor.execute('CREATE DATABASE %s TABLESPACE relstorage_full '
                           'OWNER %s' % (DATABASE, server.user))
            storage = RelStorage(PostgreSQLAdapter(
                dsn='dbname=%s host=%s port=%d user=%s password=%s' % (
                    DATABASE, server.host, server.port, server.user,
                    server.password),
                options=Options(keep_history=keep_history)))
            serials = {}
            base = [storage.new_oid() for _ in range(5)]
            assert store_all(storage, base, 'base', serials) == 'committed'
            new = [storage.new_oid() for _ in range(300)]
            before = dict(serials)
            fill(mount, 0)
            # Not compressible: PostgreSQL compresses large values.
            value = os.urandom(3000)
            try:
                outcome = store_all(storage, base[:2] + new, value, serials)
            except DatabaseFull as e:
                # At finish: the gap README describes.
                assert 'PostgreSQL' in str(e)
                outcome = 'finish'
            assert outcome in ('vote', 'finish')
            assert serials == before
            (mount / 'filler').unlink()
            for oid in base:
                assert storage.load(oid)[1] == before[oid]
            assert store_all(storage, base[:2] + new, value,
                             serials) == 'committed'
        finally:
            (mount / 'filler').unlink(missing_ok=True)
            if storage is not None:
                storage.close()
            cursor.execute('DROP DATABASE IF EXISTS %s' % DATABASE)
            cursor.execute('DROP TABLESPACE relstorage_full')
            admin.close()
