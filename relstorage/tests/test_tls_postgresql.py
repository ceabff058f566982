"""libpq's ``sslmode`` in the ``<postgresql>`` dsn, with both drivers,
against a private PostgreSQL server that offers TLS and one that does
not: each mode refuses and encrypts as libpq documents it, which shows
that the dsn's TLS keywords reach libpq as they are written."""
import textwrap

import pytest

from relstorage.config import storage_from_string
from relstorage.exceptions import DatabaseUnavailable
from relstorage.testing.dbs import in_ci
from relstorage.testing.private_servers import private_server
from relstorage.testing.servers import NotInstalled
from relstorage.testing.servers import ServerError
from relstorage.testing.tls import OTHER_ADDRESS
from relstorage.testing.tls import TLSPostgreSQLServer
from relstorage.testing.tls import make_ca

DRIVERS = ['psycopg2', 'psycopg']
MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full']
#: As for MySQL (test_tls_and_credentials): the certificate names the
#: address connected to and is signed by the CA given (sslrootcert); it
#: names another address; another CA signed it; the server has no TLS.
CASES = ['named', 'wrong-name', 'wrong-ca', 'no-tls']
#: What libpq says of each refusal.
PROBLEMS = {
    'wrong-name': 'does not match host name',
    'wrong-ca': 'certificate verify failed',
    'no-tls': 'server does not support SSL, but SSL was required',
}
#: Sent in the dsn (the servers trust the address): never in an error.
PASSWORD = 'pg-tls-secret-Pw'


def expected(mode, case):
    """'clear', 'encrypted' or 'refused', as libpq's documentation says
    of *mode* with a root certificate given: allow tries without TLS
    first, prefer with it first (then without); a root certificate
    makes require check the CA as verify-ca does, and prefer's failed
    check falls back to a connection in the clear; verify-full checks the
    name too."""
    if mode in ('disable', 'allow'):
        return 'clear'
    if case == 'no-tls':
        return 'clear' if mode == 'prefer' else 'refused'
    if case == 'wrong-ca':
        return 'clear' if mode == 'prefer' else 'refused'
    if case == 'wrong-name' and mode == 'verify-full':
        return 'refused'
    return 'encrypted'


def _unavailable(why):
    if in_ci():
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope='module')
def servers():
    tls = TLSPostgreSQLServer()
    try:
        tls.start()
        plain = private_server('postgresql')
    except (NotInstalled, ServerError) as e:
        _unavailable(str(e))
    yield {'tls': tls, 'plain': plain}
    tls.remove()


@pytest.fixture(scope='module')
def other_ca(tmp_path_factory):
    return make_ca(str(tmp_path_factory.mktemp('other-ca')), 'other')[0]


def _open(server, driver, host, mode, ca):
    return storage_from_string(textwrap.dedent('''\
        %%import relstorage
        <relstorage>
          <postgresql>
            driver %s
            dsn dbname=relstoragetest_hp host=%s port=%d user=%s password=%s sslmode=%s sslrootcert=%s
          </postgresql>
        </relstorage>
        ''') % (driver, host, server.port, server.user, PASSWORD, mode, ca))


@pytest.mark.parametrize('case', CASES)
@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('driver', DRIVERS)
def test_each_sslmode_does_what_libpq_says(servers, other_ca, driver, mode,
                                           case):
    target = servers['plain' if case == 'no-tls' else 'tls']
    host = OTHER_ADDRESS if case == 'wrong-name' else '127.0.0.1'
    ca = other_ca if case == 'wrong-ca' else servers['tls'].ca_path
    outcome = expected(mode, case)
    if outcome == 'refused':
        with pytest.raises(DatabaseUnavailable) as exc:
            _open(target, driver, host, mode, ca).close()
        text = str(exc.value)
        assert text.startswith('cannot connect to the PostgreSQL database'
                               ), text
        assert 'host=%s port=%d' % (host, target.port) in text, text
        assert 'sslmode=%s' % mode in text, text
        assert PROBLEMS[case] in text, text
        assert PASSWORD not in text
        return
    storage = _open(target, driver, host, mode, ca)
    try:
        session = storage.adapter.connect(for_store=False)
        try:
            encrypted = session.scalar(
                'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()')
        finally:
            session.close()
    finally:
        storage.close()
    assert encrypted == (outcome == 'encrypted'), outcome
