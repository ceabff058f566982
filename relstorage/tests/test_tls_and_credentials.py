"""TLS in the ``<mysql>`` section, with both drivers, against a private
MariaDB server that speaks TLS and a user it admits only over TLS
(REQUIRE SSL); and ``password-command`` of ``<mysql>`` and
``<postgresql>``, run for each new connection, against private servers
whose password is changed between them."""
import logging
import textwrap
from urllib.parse import quote

import pytest
import ZODB
from persistent.mapping import PersistentMapping

from relstorage import uriresolver
from relstorage.adapters.mysql.tls import connector_c
from relstorage.adapters.mysql.tls import mysqlclient_options
from relstorage.config import storage_from_string
from relstorage.exceptions import DatabaseUnavailable
from relstorage.testing.dbs import in_ci
from relstorage.testing.private_servers import private_server
from relstorage.testing.servers import NotInstalled
from relstorage.testing.servers import ServerError
from relstorage.testing.tls import CHECKED_USER
from relstorage.testing.tls import OTHER_ADDRESS
from relstorage.testing.tls import PasswordPostgreSQLServer
from relstorage.testing.tls import TLS_PASSWORD
from relstorage.testing.tls import TLS_USER
from relstorage.testing.tls import TLSMySQLServer
from relstorage.testing.tls import make_ca

DRIVERS = ['MySQLdb', 'PyMySQL']


def _unavailable(why):
    if in_ci():
        pytest.fail(why)
    pytest.skip(why)


def _started(server):
    """*server* started for the module's tests, removed after them."""
    try:
        server.start()
    except (NotInstalled, ServerError) as e:
        _unavailable(str(e))
    yield server
    server.remove()


@pytest.fixture(scope='module')
def server():
    yield from _started(TLSMySQLServer())


def _config(server, driver, host='127.0.0.1', user=TLS_USER,
            password=TLS_PASSWORD, extra=''):
    lines = ['host %s' % host, 'port %d' % server.port, 'user %s' % user,
             'db relstoragetest_hp', 'driver %s' % driver]
    if password is not None:
        lines.append('passwd %s' % password)
    return textwrap.dedent('''\
        %%import relstorage
        <relstorage>
          keep-history true
        %s
          <mysql>
        %s
          </mysql>
        </relstorage>
        ''') % (extra, '\n'.join('    ' + line for line in lines))


def _tls(config_extra):
    return ''.join('    %s\n' % line for line in config_extra)


def _open(server, driver, keys=(), **kw):
    text = _config(server, driver, **kw)
    return storage_from_string(text.replace('  </mysql>',
                                            _tls(keys) + '  </mysql>'))


def _cipher(storage):
    session = storage.adapter.connect(for_store=False)
    try:
        row = session.fetchone("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
    finally:
        session.close()
    return row[1]


def _from_uri(resolver, uri):
    factory, _ = resolver(uri)
    return factory()


def _round_trip(storage, value):
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()['tls'] = PersistentMapping(v=value)
        with db.transaction() as conn:
            assert conn.root()['tls']['v'] == value
    finally:
        db.close()


@pytest.mark.parametrize('driver', DRIVERS)
def test_tls_with_the_servers_ca_and_name(server, driver):
    storage = _open(server, driver, ['ssl-mode VERIFY_IDENTITY',
                                     'ssl-ca %s' % server.ca_path])
    assert _cipher(storage)
    _round_trip(storage, driver)


@pytest.mark.parametrize('driver', DRIVERS)
def test_ssl_ca_alone_verifies_and_encrypts(server, driver):
    storage = _open(server, driver, ['ssl-ca %s' % server.ca_path])
    try:
        assert _cipher(storage)
    finally:
        storage.close()


@pytest.mark.parametrize('driver', DRIVERS)
def test_the_user_is_refused_without_tls(server, driver):
    with pytest.raises(DatabaseUnavailable) as exc:
        _open(server, driver, ['ssl-mode DISABLED'])
    assert 'Access denied' in str(exc.value)
    assert TLS_PASSWORD not in str(exc.value)


@pytest.mark.parametrize('driver', DRIVERS)
def test_a_wrong_ca_is_a_clear_error(server, driver, tmp_path):
    other_ca, _ = make_ca(str(tmp_path), 'other')
    with pytest.raises(DatabaseUnavailable) as exc:
        _open(server, driver, ['ssl-mode VERIFY_CA', 'ssl-ca %s' % other_ca])
    text = str(exc.value)
    # Which server, and that its certificate was not accepted.
    assert text.startswith('cannot connect to the ')
    assert 'host=127.0.0.1 port=%d' % server.port in text
    assert 'self-signed certificate in certificate chain' in text, text
    assert TLS_PASSWORD not in text


@pytest.mark.parametrize('driver', DRIVERS)
def test_the_servers_name_is_verified(server, driver):
    """At an address its certificate does not name, VERIFY_IDENTITY
    refuses the server."""
    with pytest.raises(DatabaseUnavailable) as exc:
        _open(server, driver, ['ssl-mode VERIFY_IDENTITY',
                               'ssl-ca %s' % server.ca_path],
              host=OTHER_ADDRESS)
    assert 'cannot connect' in str(exc.value)


@pytest.mark.parametrize('driver', DRIVERS)
def test_replica_lines_take_the_sections_tls(server, driver, tmp_path):
    servers = tmp_path / 'servers.conf'
    servers.write_text('127.0.0.1:%d\n' % server.port)
    storage = _open(server, driver, ['ssl-mode VERIFY_IDENTITY',
                                     'ssl-ca %s' % server.ca_path],
                    host=OTHER_ADDRESS,
                    extra='  replica-conf %s' % servers)
    assert storage.adapter.replicas is not None
    assert _cipher(storage)
    _round_trip(storage, 'replicas ' + driver)


# -- password-command ---------------------------------------------------

ROTATING = 'relstoragerotating'


@pytest.fixture(scope='module')
def plain_server():
    try:
        return private_server('mysql')
    except (NotInstalled, ServerError) as e:
        _unavailable(str(e))


def _set_password(server, password):
    conn = server._admin_connect()
    try:
        cur = conn.cursor()
        for host in ('%', 'localhost', '127.0.0.1'):
            cur.execute("CREATE USER IF NOT EXISTS '%s'@'%s'"
                        % (ROTATING, host))
            cur.execute("ALTER USER '%s'@'%s' IDENTIFIED BY '%s'"
                        % (ROTATING, host, password))
            cur.execute("GRANT ALL PRIVILEGES ON `relstoragetest_hp`.* "
                        "TO '%s'@'%s'" % (ROTATING, host))
    finally:
        conn.close()


@pytest.mark.parametrize('driver', DRIVERS)
def test_password_command_is_run_for_each_connection(plain_server, driver,
                                                     tmp_path, caplog):
    secret = tmp_path / 'password'
    first, second = 'first-Pw-%s' % driver, 'second-Pw-%s' % driver
    _set_password(plain_server, first)
    secret.write_text(first + '\n')
    text = _config(plain_server, driver, user=ROTATING, password=None)
    text = text.replace('  </mysql>',
                        '    password-command cat %s\n  </mysql>' % secret)
    with caplog.at_level(logging.DEBUG):
        storage = storage_from_string(text)
        _round_trip(storage, 1)
        # Rotated: connections made from now on need the new password.
        _set_password(plain_server, second)
        secret.write_text(second + '\n')
        storage = storage_from_string(text)
        _round_trip(storage, 2)
        # The same through a zodburi URI.
        uri = ('mysql://%s@127.0.0.1:%d/relstoragetest_hp?driver=%s'
               '&password_command=%s' % (ROTATING, plain_server.port, driver,
                                         quote('cat %s' % secret)))
        _round_trip(_from_uri(uriresolver.mysql, uri), 3)
        # A command printing a wrong password: refused, and said so
        # without it.
        secret.write_text('wrong-Pw\n')
        with pytest.raises(DatabaseUnavailable) as exc:
            storage_from_string(text)
        assert 'Access denied' in str(exc.value)
        assert 'wrong-Pw' not in str(exc.value)
        # A command that fails: named, with its status.
        failing = text.replace('cat %s' % secret, 'false')
        with pytest.raises(DatabaseUnavailable) as exc:
            storage_from_string(failing)
        assert 'password-command false exited with status 1' in str(
            exc.value)
    logged = '\n'.join(r.getMessage() for r in caplog.records)
    for password in (first, second, 'wrong-Pw'):
        assert password not in logged


@pytest.fixture(scope='module')
def checking_pg():
    yield from _started(PasswordPostgreSQLServer())


def test_postgresql_password_command(checking_pg, tmp_path, caplog):
    secret = tmp_path / 'password'
    first, second = 'first-Pg-Pw', 'second-Pg-Pw'
    checking_pg.set_password(first)
    secret.write_text(first + '\n')
    text = textwrap.dedent('''\
        %%import relstorage
        <relstorage>
          <postgresql>
            dsn dbname=relstoragetest_hp host=127.0.0.1 port=%d user=%s
            password-command cat %s
          </postgresql>
        </relstorage>
        ''') % (checking_pg.port, CHECKED_USER, secret)
    with caplog.at_level(logging.DEBUG):
        _round_trip(storage_from_string(text), 1)
        checking_pg.set_password(second)
        secret.write_text(second + '\n')
        _round_trip(storage_from_string(text), 2)
        uri = ('postgresql://%s@127.0.0.1:%d/relstoragetest_hp'
               '?password_command=%s' % (CHECKED_USER, checking_pg.port,
                                         quote('cat %s' % secret)))
        _round_trip(_from_uri(uriresolver.postgresql, uri), 3)
        secret.write_text('wrong-Pg-Pw\n')
        with pytest.raises(DatabaseUnavailable) as exc:
            storage_from_string(text)
        assert 'password authentication failed' in str(exc.value)
        assert 'wrong-Pg-Pw' not in str(exc.value)
    logged = '\n'.join(r.getMessage() for r in caplog.records)
    for password in (first, second, 'wrong-Pg-Pw'):
        assert password not in logged


@pytest.mark.parametrize('driver', DRIVERS)
def test_required_tls_from_a_server_without_it(plain_server, driver):
    """A server that offers no TLS: ssl-mode REQUIRED refuses it, with
    either driver (the driver says so, or, where a PyMySQL would go on in
    the clear, the storage's check once connected)."""
    text = _config(plain_server, driver, user=plain_server.user,
                   password=plain_server.password)
    with pytest.raises(DatabaseUnavailable) as exc:
        storage_from_string(text.replace(
            '  </mysql>', '    ssl-mode REQUIRED\n  </mysql>'))
    message = str(exc.value)
    assert message.startswith('cannot connect to the ')
    assert ('SSL is required' in message
            or 'the connection is not encrypted' in message), message
    # Without it, the same section connects.
    storage_from_string(text).close()


# -- each ssl-mode against each kind of server -------------------------

MODES = ['DISABLED', 'PREFERRED', 'REQUIRED', 'VERIFY_CA', 'VERIFY_IDENTITY']
#: The servers a mode is tried against: the certificate names the
#: address connected to and is signed by the CA given; it names another
#: address; it is signed by a CA other than the one given; the server
#: speaks no TLS.
CASES = ['named', 'wrong-name', 'wrong-ca', 'no-tls']
#: What a refusal says, by case (either driver's words).
PROBLEMS = {
    'wrong-name': ('IP address mismatch',
                   'Validation of SSL server certificate failed'),
    'wrong-ca': ('self-signed certificate', 'unable to get local issuer'),
    'no-tls': ('SSL is required', 'the connection is not encrypted'),
}


def expected(mode, case):
    """'clear', 'encrypted' or 'refused': what MySQL's client's *mode*
    does with the server of *case*."""
    if mode == 'DISABLED':
        return 'clear'
    if case == 'no-tls':
        return 'clear' if mode == 'PREFERRED' else 'refused'
    checks = {'REQUIRED': (), 'VERIFY_CA': ('wrong-ca',),
              'VERIFY_IDENTITY': ('wrong-ca', 'wrong-name')}
    return 'refused' if case in checks.get(mode, ()) else 'encrypted'


#: A user of both servers whom TLS is not required of (so that the mode
#: alone decides), and its password, which no error may show.
MODES_USER = 'relstoragemodes'
MODES_PASSWORD = 'modes-secret-Pw'


@pytest.fixture(scope='module')
def servers(server, plain_server):
    """The TLS server and the one without TLS, each with MODES_USER."""
    for target in (server, plain_server):
        for host in ('%', 'localhost', '127.0.0.1'):
            target.admin("CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED "
                         "BY '%s'" % (MODES_USER, host, MODES_PASSWORD),
                         "GRANT ALL PRIVILEGES ON `relstoragetest_hp`.* "
                         "TO '%s'@'%s'" % (MODES_USER, host))
    return {'tls': server, 'plain': plain_server}


@pytest.fixture(scope='module')
def other_ca(tmp_path_factory):
    """A CA that signed neither server's certificate."""
    return make_ca(str(tmp_path_factory.mktemp('other-ca')), 'other')[0]


@pytest.mark.parametrize('source', ['ssl-ca', 'system-store'])
@pytest.mark.parametrize('case', CASES)
@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('driver', DRIVERS)
def test_each_mode_does_what_it_says(servers, other_ca, driver, mode, case,
                                     source, monkeypatch, tmp_path):
    """The CA is the section's ``ssl-ca``, or where none is given the
    system's store, here OpenSSL's default file (SSL_CERT_FILE) with an
    empty default directory (SSL_CERT_DIR)."""
    target = servers['plain' if case == 'no-tls' else 'tls']
    host = OTHER_ADDRESS if case == 'wrong-name' else '127.0.0.1'
    ca = other_ca if case == 'wrong-ca' else servers['tls'].ca_path
    keys = ['ssl-mode %s' % mode]
    if source == 'ssl-ca':
        keys.append('ssl-ca %s' % ca)
    else:
        monkeypatch.setenv('SSL_CERT_FILE', ca)
        monkeypatch.setenv('SSL_CERT_DIR', str(tmp_path))
    outcome = expected(mode, case)
    if outcome == 'refused':
        with pytest.raises(DatabaseUnavailable) as exc:
            _open(target, driver, keys, host=host, user=MODES_USER,
                  password=MODES_PASSWORD).close()
        text = str(exc.value)
        assert text.startswith('cannot connect to the '), text
        assert 'host=%s port=%d' % (host, target.port) in text, text
        assert 'ssl-mode=%s' % mode in text, text
        assert any(problem in text for problem in PROBLEMS[case]), text
        assert MODES_PASSWORD not in text
        return
    storage = _open(target, driver, keys, host=host, user=MODES_USER,
                    password=MODES_PASSWORD)
    try:
        cipher = _cipher(storage)
    finally:
        storage.close()
    assert bool(cipher) == (outcome == 'encrypted'), (outcome, cipher)


def test_mysqlclient_is_told_each_mode_in_its_librarys_terms():
    """MySQL's client library takes the modes as they are (only its
    VERIFY modes given the CA); MariaDB's, as tested above, needs
    REQUIRED to encrypt at all and checks a CA it is given without
    checking the name. Which library it is comes from its version."""
    files = {'ca': '/ca.pem', 'cert': '/c.pem', 'key': '/k.pem'}
    told = {mariadb: {mode: mysqlclient_options(mode, files, mariadb)
                      for mode in MODES}
            for mariadb in (False, True)}
    client = {'cert': '/c.pem', 'key': '/k.pem'}
    verified = dict(client, ca='/ca.pem')
    assert told[False] == {
        'DISABLED': ('DISABLED', None), 'PREFERRED': ('PREFERRED', client),
        'REQUIRED': ('REQUIRED', client),
        'VERIFY_CA': ('VERIFY_CA', verified),
        'VERIFY_IDENTITY': ('VERIFY_IDENTITY', verified)}
    assert told[True] == {
        'DISABLED': ('DISABLED', None), 'PREFERRED': ('REQUIRED', client),
        'REQUIRED': ('REQUIRED', client),
        'VERIFY_CA': ('REQUIRED', verified),
        'VERIFY_IDENTITY': ('VERIFY_IDENTITY', verified)}
    assert [connector_c(v) for v in ('3.3.20', '10.11.6', '8.0.36',
                                     '5.7.44', '9.1.0')] == [
        True, True, False, False, False]
