"""The Oracle driver layer for real, without an Oracle server: oracledb in
thin mode against a closed port and against listeners (threads of this
test) that drop the connection, answer garbage or say nothing. Each gives
this project's error naming host, port and service, within the
network-timeout bound, with no driver exception chained to it."""
import importlib
import importlib.util
import socket
import threading
import time

import pytest

from relstorage.adapters.oracle import OracleAdapter
from relstorage.adapters.oracle.drivers import DSN
from relstorage.adapters.oracle.drivers import connect_error
from relstorage.adapters.oracle.drivers import select_driver
from relstorage.config import storage_from_string
from relstorage.exceptions import ConfigurationError
from relstorage.exceptions import DatabaseFull
from relstorage.exceptions import DatabaseUnavailable
from relstorage.exceptions import PermissionDenied
from relstorage.options import Options

oracledb = pytest.importorskip('oracledb')
driver_errors = importlib.import_module('oracledb.errors')

#: network-timeout for these tests: connecting must fail within it.
BOUND = 3


def Error(message):
    """The error python-oracledb raises for the server's *message*: its
    error object carries the ORA- number as ``code``."""
    detail = driver_errors._Error(
        message, code=int(message.split(':')[0].split('-')[1]))
    return detail.exc_type(detail)


class Listener:
    """A TCP listener on 127.0.0.1 that treats each connection as *mode*
    says: ``drop`` closes it at once, ``garbage`` reads the client's
    first packet and answers bytes that are not Oracle's protocol,
    ``silent`` keeps it open and says nothing."""

    def __init__(self, mode):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.open = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == 'drop':
                conn.close()
            elif self.mode == 'garbage':
                try:
                    conn.recv(65536)
                    conn.sendall(b'\x00\x2a\x00\x00\x0b\x00\x00\x00'
                                 + b'not the Oracle Net protocol' * 20)
                except OSError:
                    pass
                time.sleep(0.2)
                conn.close()
            else:
                self.open.append(conn)

    def close(self):
        self.sock.close()
        for conn in self.open:
            conn.close()


def closed_port():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def adapter_for(port, **kw):
    return OracleAdapter(user='app', password='s3cret-pw',
                         dsn='127.0.0.1:%d/RSTEST' % port,
                         options=Options(network_timeout=BOUND, **kw))


def assert_clear(error, port):
    text = str(error)
    assert 'host=127.0.0.1' in text and 'port=%d' % port in text, text
    assert 'service=RSTEST' in text and 'user=app' in text, text
    assert 's3cret-pw' not in text
    # The driver's exception is not chained: no raw traceback below ours.
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


@pytest.mark.parametrize('mode', ['closed', 'drop', 'garbage', 'silent'])
def test_unreachable_server_is_named_within_the_bound(mode):
    listener = None if mode == 'closed' else Listener(mode)
    port = closed_port() if listener is None else listener.port
    try:
        adapter = adapter_for(port)
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as exc:
            adapter.connect(for_store=True)
        elapsed = time.monotonic() - started
    finally:
        if listener is not None:
            listener.close()
    assert elapsed < BOUND + 1, elapsed
    assert_clear(exc.value, port)
    assert type(exc.value) is DatabaseUnavailable
    if listener is not None:
        assert listener.accepted >= 1   # the driver really got that far
    if mode == 'silent':
        assert 'no answer within %ss' % BOUND in str(exc.value)
        assert elapsed >= BOUND - 0.5
    else:
        assert 'DPY-' in str(exc.value)    # the driver's own words, kept


def test_cx_oracle_without_client_libraries_says_so():
    # cx_Oracle is optional (and needs Oracle's client libraries to
    # connect at all); where it is installed, its errors are ours too.
    pytest.importorskip('cx_Oracle', reason='cx_Oracle is not installed')
    port = closed_port()
    adapter = OracleAdapter(user='app', password='s3cret-pw',
                            dsn='127.0.0.1:%d/RSTEST' % port,
                            driver='cx_Oracle',
                            options=Options(network_timeout=BOUND))
    assert adapter.driver.name == 'cx_Oracle'
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as exc:
        adapter.connect(for_store=True)
    assert time.monotonic() - started < BOUND + 1
    assert_clear(exc.value, port)
    if 'DPI-1047' in str(exc.value):
        assert "cx_Oracle needs Oracle's client libraries" in str(exc.value)


def test_zope_conf_oracle_section_opens_through_the_real_driver():
    port = closed_port()
    with pytest.raises(DatabaseUnavailable) as exc:
        storage_from_string('''
            <relstorage>
              network-timeout %d
              <oracle>
                user app
                password s3cret-pw
                dsn 127.0.0.1:%d/RSTEST
                driver oracledb
              </oracle>
            </relstorage>''' % (BOUND, port))
    assert_clear(exc.value, port)


def test_connect_error_translates_what_users_meet():
    where = DSN('db.example.org:1521/ORCLPDB1').describe()
    cases = [
        ('ORA-01017: invalid credential or not authorized; logon denied',
         DatabaseUnavailable, 'wrong user name or password'),
        ('ORA-12541: Cannot connect. No listener at host db port 1521.',
         DatabaseUnavailable, 'no listener on that host and port'),
        ('ORA-12514: Cannot connect to database. Service ORCLPDB1 is not '
         'registered with the listener', DatabaseUnavailable,
         'the listener does not know that service'),
        ('ORA-12170: Cannot connect. TCP connect timeout of 20s',
         DatabaseUnavailable, 'the connection timed out'),
        ('ORA-01045: Login denied. User APP does not have CREATE SESSION '
         'privilege.', PermissionDenied, 'CREATE SESSION'),
    ]
    for message, cls, words in cases:
        error = connect_error(Error(message), where, 'app')
        assert type(error) is cls, message
        assert words in str(error)
        assert ('host=db.example.org port=1521 service=ORCLPDB1 user=app'
                in str(error))


def test_full_tablespace_and_missing_privilege_are_recognised():
    from relstorage.adapters.oracle.session import OracleSession
    # (No server: a session without a connection answers from the codes.)
    session = OracleSession.__new__(OracleSession)
    for code in ('ORA-01653', 'ORA-01654', 'ORA-01536'):
        assert session.is_full_error(Error('%s: unable to extend' % code))
    assert session.is_permission_error(
        Error('ORA-01031: insufficient privileges'))
    assert not session.is_full_error(Error('ORA-00001: unique constraint'))
    assert issubclass(DatabaseFull, Exception)


def test_dsn_forms():
    assert DSN('db.example.org:1521/ORCLPDB1').location() == (
        'db.example.org', '1521', 'ORCLPDB1')
    assert DSN('//db.example.org/ORCLPDB1').describe() == (
        'host=db.example.org port=1521 service=ORCLPDB1')
    assert DSN('tcp://10.0.0.5:1522/app?connect_timeout=5').location() == (
        '10.0.0.5', '1522', 'app')
    assert DSN('PRODDB').describe() == 'TNS alias PRODDB'
    descriptor = ('(DESCRIPTION=(ADDRESS=(PROTOCOL=TCP)(HOST=db1)(PORT=1530))'
                  '(CONNECT_DATA=(SERVICE_NAME=svc)))')
    assert DSN(descriptor).location() == ('db1', '1530', 'svc')


def test_tns_alias_is_described_by_where_it_points(tmp_path, monkeypatch):
    (tmp_path / 'tnsnames.ora').write_text(
        'PRODDB =\n  (DESCRIPTION = (ADDRESS = (PROTOCOL = TCP)'
        '(HOST = db7.example.org)(PORT = 1599))\n'
        '    (CONNECT_DATA = (SERVICE_NAME = prod.example.org)))\n')
    monkeypatch.setattr(oracledb.defaults, 'config_dir', str(tmp_path))
    assert DSN('PRODDB').describe() == (
        'TNS alias PRODDB, host=db7.example.org port=1599 '
        'service=prod.example.org')
    assert DSN('OTHERDB').describe() == 'TNS alias OTHERDB'


def test_driver_option():
    assert select_driver('auto').name == 'oracledb'
    assert select_driver('OracleDB').name == 'oracledb'
    with pytest.raises(ConfigurationError) as exc:
        select_driver('pyodbc')
    assert str(exc.value).startswith(
        'driver: unknown or unsupported Oracle driver')
    if importlib.util.find_spec('cx_Oracle') is None:
        with pytest.raises(ConfigurationError) as exc:
            select_driver('cx_Oracle')
        assert 'cx_Oracle' in str(exc.value)
    else:  # pragma: no cover -- depends on the install
        assert select_driver('cx_Oracle').name == 'cx_Oracle'


def test_location_tells_users_apart():
    one = OracleAdapter(user='app', password='x', dsn='db:1521/s')
    other = OracleAdapter(user='cat', password='x', dsn='db:1521/s')
    assert one.location() != other.location()
    assert one.location() == OracleAdapter(
        user='APP', password='y', dsn='db:1521/s').location()


def test_errors_are_classified_by_their_codes_not_their_words():
    from relstorage.adapters.oracle.drivers import error_codes
    # A disconnect python-oracledb reports as its own DPY- code, with the
    # server's ORA- number kept.
    detail = driver_errors._Error('ORA-03113: end-of-file on channel',
                                    code=3113)
    assert set(error_codes(oracledb.DatabaseError(detail))) >= {'ORA-03113'}
    # Words alone, without the driver's error object, classify nothing.
    assert error_codes(oracledb.DatabaseError('ORA-01653: unable to')) == []
    assert error_codes(ValueError('ORA-00054')) == []

    class CxOracleError:  # cx_Oracle's error object: no full_code
        code = 0
        message = 'DPI-1047: Cannot locate a 64-bit Oracle Client library'
    assert error_codes(oracledb.DatabaseError(CxOracleError())) == [
        'DPI-1047']
    CxOracleError.code, CxOracleError.message = 54, 'ORA-00054: busy'
    assert error_codes(oracledb.DatabaseError(CxOracleError())) == [
        'ORA-00054']
