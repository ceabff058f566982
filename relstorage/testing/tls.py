"""For the TLS and credential tests: certificates made with openssl, a
private MariaDB server that speaks TLS and has a user that must use it,
a private PostgreSQL server that speaks TLS, and one that checks one
user's password."""
import os
import shutil
import subprocess

from .mysql_server import MySQLServer
from .postgresql_server import PostgreSQLServer
from .servers import NotInstalled

#: The user of TLSMySQLServer who must connect over TLS, and its password.
TLS_USER = 'relstoragetls'
TLS_PASSWORD = 'tls-secret-Pw'
#: What the server's certificate names: 127.0.0.1, where the tests
#: connect; it also listens on OTHER_ADDRESS, which the certificate does
#: not name (VERIFY_IDENTITY must refuse it there).
SERVER_NAME = '127.0.0.1'
OTHER_ADDRESS = '127.0.0.2'


def _openssl(*args, cwd):
    done = subprocess.run(['openssl'] + list(args), cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError('openssl %s failed: %s' % (args[0], done.stderr))


def make_ca(directory, name='ca'):
    """A self-signed CA in *directory*: ``(certificate, key)`` paths."""
    if shutil.which('openssl') is None:
        raise NotInstalled('openssl is not installed (Debian: apt-get '
                           'install openssl)')
    cert, key = name + '.pem', name + '-key.pem'
    _openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
             '-subj', '/CN=relstorage test %s' % name, '-keyout', key,
             '-out', cert, cwd=directory)
    return os.path.join(directory, cert), os.path.join(directory, key)


def make_certificate(directory, name, ca, common_name, alt_names=None):
    """A certificate for *common_name* signed by *ca* (a ``make_ca``
    result): ``(certificate, key)`` paths."""
    cert, key, csr = name + '.pem', name + '-key.pem', name + '.csr'
    _openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj',
             '/CN=%s' % common_name, '-keyout', key, '-out', csr,
             cwd=directory)
    ext = os.path.join(directory, name + '.ext')
    with open(ext, 'w') as f:
        f.write('subjectAltName=%s\n' % (alt_names or 'DNS:' + common_name))
    _openssl('x509', '-req', '-in', csr, '-CA', ca[0], '-CAkey', ca[1],
             '-CAcreateserial', '-days', '2', '-extfile', ext, '-out', cert,
             cwd=directory)
    return os.path.join(directory, cert), os.path.join(directory, key)


def server_certificate(server):
    """A CA and, signed by it, a certificate for SERVER_NAME in
    *server*'s directory, readable by the server's system user:
    ``(ca, certificate, key)`` paths."""
    ca = make_ca(server.dir)
    cert, key = make_certificate(server.dir, 'server', ca, SERVER_NAME,
                                 'IP:' + SERVER_NAME)
    if server._as_root():
        uid, gid = server._system_ids()
        for path in (cert, key):
            os.chown(path, uid, gid)
    return ca[0], cert, key


class TLSMySQLServer(MySQLServer):
    """A private MariaDB server with TLS (its certificate, for
    SERVER_NAME, signed by the CA at ``ca_path``) and TLS_USER, who
    must connect over TLS (``REQUIRE SSL``)."""

    prefix = 'relstorage-private-tls-'

    def __init__(self):
        super().__init__(also_listen=(OTHER_ADDRESS,))

    def _initialise(self):
        self.ca_path, cert, key = server_certificate(self)
        self.extra_args = ['--ssl-ca=%s' % self.ca_path,
                           '--ssl-cert=%s' % cert, '--ssl-key=%s' % key]
        super()._initialise()

    def _setup(self):
        super()._setup()
        for host in ('%', 'localhost', '127.0.0.1'):
            self.admin("CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED "
                       "BY '%s' REQUIRE SSL" % (TLS_USER, host, TLS_PASSWORD),
                       "GRANT ALL PRIVILEGES ON `relstoragetest_hp`.* "
                       "TO '%s'@'%s'" % (TLS_USER, host))


class TLSPostgreSQLServer(PostgreSQLServer):
    """A private PostgreSQL server that offers TLS (its certificate, for
    SERVER_NAME, signed by the CA at ``ca_path``), to clients that want
    it; it also listens on OTHER_ADDRESS."""

    prefix = 'relstorage-private-tls-'

    def __init__(self):
        super().__init__(also_listen=(OTHER_ADDRESS,))

    def _initialise(self):
        self.ca_path, cert, key = server_certificate(self)
        self.extra_settings = {'ssl': 'on', 'ssl_cert_file': "'%s'" % cert,
                               'ssl_key_file': "'%s'" % key}
        super()._initialise()


#: The PostgreSQL user whose password PasswordPostgreSQLServer checks.
CHECKED_USER = 'relstoragechecked'


class PasswordPostgreSQLServer(PostgreSQLServer):
    """A private PostgreSQL server that checks CHECKED_USER's password
    (scram-sha-256) over TCP; set it with set_password()."""

    prefix = 'relstorage-private-password-'

    def _initialise(self):
        super()._initialise()
        hba = os.path.join(self.data_dir, 'pg_hba.conf')
        with open(hba) as f:
            rules = f.read()
        # The first matching line counts: this one before initdb's trust.
        with open(hba, 'w') as f:
            f.write('host all %s 127.0.0.1/32 scram-sha-256\n%s'
                    % (CHECKED_USER, rules))

    def set_password(self, password, database='relstoragetest_hp'):
        conn = self._admin_connect()
        try:
            cur = conn.cursor()
            cur.execute('SELECT 1 FROM pg_roles WHERE rolname = %s',
                        (CHECKED_USER,))
            verb = 'ALTER' if cur.fetchone() else 'CREATE'
            cur.execute('%s ROLE %s LOGIN PASSWORD %%s' % (verb, CHECKED_USER),
                        (password,))
            cur.execute('GRANT ALL ON DATABASE %s TO %s'
                        % (database, CHECKED_USER))
        finally:
            conn.close()
        conn = self._admin_connect(database)
        try:
            conn.cursor().execute('GRANT ALL ON SCHEMA public TO %s'
                                  % CHECKED_USER)
        finally:
            conn.close()
