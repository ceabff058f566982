"""The private servers of ``relstorage.testing``, for real: they start on a
port of their own (never the machine's 5432 or 3306), serve the test
account and databases with the connection limit asked for, and keep their
data and port across a restart.

A server whose programs are missing is a skip, or under CI a failure.
Each test is bounded by a timeout; together they take seconds.
"""
import os

import pytest

from relstorage.testing.dbs import in_ci
from relstorage.testing.mysql_server import MySQLServer
from relstorage.testing.postgresql_server import PostgreSQLServer
from relstorage.testing.processes import alive
from relstorage.testing.private_servers import private_server
from relstorage.testing.servers import DATABASES
from relstorage.testing.servers import NotInstalled

CLASSES = {'postgresql': PostgreSQLServer, 'mysql': MySQLServer}
KINDS = tuple(CLASSES)
SHARED_PORTS = (5432, 3306)

pytestmark = pytest.mark.timeout(60)


def _not_installed(e):
    if in_ci():
        pytest.fail('CI=true and %s' % e)
    pytest.skip(str(e))


def _server(kind):
    try:
        return private_server(kind)
    except NotInstalled as e:
        _not_installed(e)


def _max_connections(conn, kind):
    cur = conn.cursor()
    cur.execute('SHOW max_connections' if kind == 'postgresql'
                else 'SELECT @@max_connections')
    return int(cur.fetchone()[0])


@pytest.mark.parametrize('kind', KINDS)
def test_private_server_survives_restart(kind):
    server = _server(kind)
    assert private_server(kind) is server  # one per process
    assert server.kind == kind
    assert server.host == '127.0.0.1'
    assert server.port not in SHARED_PORTS
    assert (server.user, server.password) == ('relstoragetest',
                                              'relstoragetest')
    assert server.running()

    conn = server.connect('relstoragetest_hp')
    try:
        assert _max_connections(conn, kind) == 300
        cur = conn.cursor()
        cur.execute('DROP TABLE IF EXISTS private_server_check')
        cur.execute('CREATE TABLE private_server_check '
                    '(id INTEGER PRIMARY KEY, note VARCHAR(50))')
        cur.execute("INSERT INTO private_server_check VALUES (1, 'kept')")
        conn.commit()
    finally:
        conn.close()

    port, pid = server.port, server.pid
    server.restart()
    assert server.running()
    assert server.port == port
    assert server.pid != pid  # a new process, not the old one kept

    conn = server.connect('relstoragetest_hp')
    try:
        cur = conn.cursor()
        cur.execute('SELECT id, note FROM private_server_check')
        assert [tuple(r) for r in cur.fetchall()] == [(1, 'kept')]
        assert _max_connections(conn, kind) == 300
        cur.execute('DROP TABLE private_server_check')
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize('kind', KINDS)
def test_private_server_has_every_test_database(kind):
    server = _server(kind)
    for db in DATABASES:
        conn = server.connect(db)
        try:
            cur = conn.cursor()
            # The test user may create tables in each.
            cur.execute('CREATE TABLE private_server_owned (id INTEGER)')
            cur.execute('DROP TABLE private_server_owned')
            conn.commit()
        finally:
            conn.close()
    if kind == 'mysql':
        conn = server.connect()
        try:
            cur = conn.cursor()
            cur.execute('SHOW GRANTS')
            grants = ' '.join(r[0] for r in cur.fetchall())
            assert 'PROCESS' in grants
        finally:
            conn.close()


@pytest.mark.parametrize('kind', KINDS)
def test_remove_leaves_nothing_behind(kind):
    # A server of its own (not the shared singleton), with another limit.
    server = CLASSES[kind](max_connections=20)
    try:
        server.start()
    except NotInstalled as e:
        server.remove()
        _not_installed(e)
    try:
        conn = server.connect()
        try:
            assert _max_connections(conn, kind) == 20
        finally:
            conn.close()
        path, pid = server.dir, server.pid
        assert server.port not in SHARED_PORTS
        assert pid is not None
    finally:
        server.remove()
    assert not server.running()
    assert not alive(pid)
    assert not os.path.exists(path)
    server.remove()  # a second time is harmless
    assert server.dir is None
