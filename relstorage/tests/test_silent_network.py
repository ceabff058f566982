"""A network that goes silent does not hang a process: a client in a
network namespace of its own talks to a private server of the run over a
veth pair; the test takes the link down (nothing closes, nothing
answers) in the middle of a load, of a poll and of a commit. Each call
fails within the bound that ``network-timeout`` sets, with an error that
names the server; a commit cut before its COMMIT went out is known not
to have happened (a retryable error), one cut as it went out says that
its outcome is unknown; once
the link is back the next transaction commits, and every commit the
client saw succeed is in the database.
"""
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from ZODB.tests.StorageTestBase import zodb_unpickle
from ZODB.utils import p64

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import in_ci
from relstorage.testing.dbs import require
from relstorage.testing.private_servers import private_server

from .netns import Namespace

#: What the client does when the link goes silent (silent_network_client).
CASES = ('load', 'poll', 'commit', 'commit-sent')
#: network-timeout in the client, seconds.
TIMEOUT = 3
#: The longest a call may take once the link is cut: the silence found
#: (TIMEOUT), then a new connection that cannot open (TIMEOUT), and
#: some slack for a loaded machine.
BOUND = 2 * TIMEOUT + 3


@pytest.fixture(scope='module')
def namespace():
    reason = Namespace.unavailable()
    if reason:
        if in_ci():
            pytest.fail('CI=true and %s' % reason)
        pytest.skip(reason)
    with Namespace() as ns:
        yield ns


def _drain(child):
    """Collect the client's stderr as it comes (a full pipe would block
    the client) in ``child.errors``, and its reports, line by line, in
    ``child.reports``. (select() on the stdout pipe cannot tell of a
    line already read into the pipe's buffer with the one before it.)"""
    child.errors = []
    child.reports = queue.Queue()

    def errors():
        for line in child.stderr:
            child.errors.append(line)

    def reports():
        for line in child.stdout:
            child.reports.put(line)
        child.reports.put('')  # the client ended
    child.drainer = threading.Thread(target=errors, daemon=True)
    child.drainer.start()
    threading.Thread(target=reports, daemon=True).start()


def _stderr(child):
    child.drainer.join(10)
    return ''.join(child.errors)[-6000:]


def _read(child, server, timeout=BOUND + 60):
    """The client's next report; a client silent for *timeout* seconds
    has hung, and fails the test with the stacks of its threads
    (faulthandler, on SIGUSR1) and the end of the server's log."""
    try:
        line = child.reports.get(timeout=timeout)
    except queue.Empty:
        child.send_signal(signal.SIGUSR1)
        time.sleep(2)
        child.kill()
        child.wait()
        raise AssertionError(
            'the client said nothing for %s s (hung); its stderr:\n%s\n'
            'the server log:\n%s' % (timeout, _stderr(child),
                                     server.log_tail())) from None
    if not line:
        child.wait()
        raise AssertionError('the client ended: %s' % _stderr(child))
    return json.loads(line)


def _send(child, word):
    child.stdin.write(word + '\n')
    child.stdin.flush()


#: How the client is started: as a module, or under gevent's
#: monkey-patching (done before anything else is imported).
CLIENT = ['-m', 'relstorage.tests.silent_network_client']
GEVENT_CLIENT = ['-c', 'from gevent import monkey; monkey.patch_all(); '
                 'from relstorage.tests.silent_network_client import main; '
                 'main()']


@pytest.mark.parametrize('keep_history', [True, False],
                         ids=['HP', 'HF'])
@pytest.mark.parametrize('db', ['postgresql', 'mysql'])
def test_silent_network_mid_load_poll_and_commit(namespace, db,
                                                 keep_history):
    silent_network_mid_load_poll_and_commit(namespace, db, keep_history,
                                            CLIENT)


@pytest.mark.parametrize('db', ['postgresql', 'mysql'])
def test_silent_network_under_gevent(namespace, db):
    """The same bounds with the client's waits cooperative (psycopg2's
    wait callback, mysqlclient's waits through gevent)."""
    pytest.importorskip('gevent')
    silent_network_mid_load_poll_and_commit(namespace, db, False,
                                            GEVENT_CLIENT)


def silent_network_mid_load_poll_and_commit(namespace, db, keep_history,
                                            client):
    server = private_server(db, also_listen=(namespace.host_address,))
    factory = DatabaseFactory(db, keep_history, server=server)
    factory.storage(zap=True).close()
    child = subprocess.Popen(
        namespace.command([sys.executable] + client + [
                           db, str(keep_history), namespace.host_address,
                           str(server.port),
                           str(TIMEOUT)]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=child_env())
    _drain(child)
    where = 'host=%s port=%s' % (namespace.host_address, server.port)
    reports = {}
    try:
        for case in CASES:
            assert _read(child, server) == {'cut': case}
            namespace.cut()
            try:
                _send(child, 'go')
                reports[case] = report = _read(child, server)
            finally:
                namespace.restore()
            _send(child, 'next')
            after = _read(child, server)
            assert after['next_commit'] == 'ok', after
            reports[case + ' next'] = after
        summary = _read(child, server)
        assert child.wait(30) == 0, _stderr(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    print(json.dumps(reports, indent=1))
    for case in CASES:
        report = reports[case]
        assert report['error'] is not None, report
        assert report['seconds'] < BOUND, report
        assert where in report['message'], report
    # Cut before the COMMIT went out: known not to have committed, and
    # retryable.
    assert reports['commit']['error'] == 'DatabaseDisconnected'
    assert reports['commit']['message'].startswith('lost the connection')
    # Cut as it went out: said to be unknown.
    assert reports['commit-sent']['error'] == 'CommitOutcomeUnknown'
    assert 'check the database' in reports['commit-sent']['message']
    # Nothing the client saw committed is missing: each commit stored the
    # next value in one object (every revision, where history is kept).
    storage = factory.storage()
    try:
        oid = p64(summary['oid'])
        current = zodb_unpickle(storage.load(oid)[0]).value
        if keep_history:
            values = [zodb_unpickle(storage.loadSerial(oid, h['tid'])).value
                      for h in storage.history(oid, size=100)]
    finally:
        storage.close()
    assert current == max(summary['committed'])
    if keep_history:
        assert set(summary['committed']) <= set(values)
        assert set(values) <= set(summary['committed'] + summary['unknown'])


def _tcp_settings(fd):
    sock = socket.socket(fileno=os.dup(fd))
    try:
        return {name: sock.getsockopt(socket.IPPROTO_TCP, option)
                for name, option in (('idle', socket.TCP_KEEPIDLE),
                                     ('interval', socket.TCP_KEEPINTVL),
                                     ('count', socket.TCP_KEEPCNT),
                                     ('user_timeout', socket.TCP_USER_TIMEOUT))}
    finally:
        sock.close()


@pytest.mark.parametrize('db', ['postgresql', 'mysql'])
def test_connections_carry_the_network_timeout(db):
    """Both ends of every connection: keepalives and TCP_USER_TIMEOUT on
    the client's socket; on the server, PostgreSQL's own keepalives for
    the session, MySQL's wait_timeout for store sessions (a client that
    vanished mid-commit leaves no locks behind for long). On the run's
    private server: this module runs beside the tests of the shared
    servers, which drop and create the tables there."""
    require(db)
    factory = DatabaseFactory(db, True, server=private_server(db))
    storage = factory.storage(zap=True, network_timeout=12)
    try:
        inst = storage.new_instance()
        inst.poll_invalidations()
        for session in (inst._view.session().session,
                        inst._commit.store_session().session):
            assert _tcp_settings(session.conn.fileno()) == {
                'idle': 4, 'interval': 2, 'count': 3, 'user_timeout': 12000}
        store = inst._commit.store_session().session
        if db == 'postgresql':
            assert store.scalar('SHOW tcp_user_timeout') == '12000'
            assert store.scalar('SHOW tcp_keepalives_idle') == '4'
        else:
            assert store.scalar('SELECT @@session.wait_timeout') == 24
        inst.release()
    finally:
        storage.close()
