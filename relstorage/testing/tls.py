"""Certificates made with openssl for the TLS tests, and a private
MariaDB server that speaks TLS and has a user that must use it."""
import os
import shutil
import subprocess

from .mysql_server import MySQLServer
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


class TLSMySQLServer(MySQLServer):
    """A private MariaDB server with TLS (its certificate, for
    SERVER_NAME, signed by the CA at ``ca_path``) and TLS_USER, who
    must connect over TLS (``REQUIRE SSL``)."""

    prefix = 'relstorage-private-tls-'

    def __init__(self):
        super().__init__(also_listen=(OTHER_ADDRESS,))

    def _initialise(self):
        ca = make_ca(self.dir)
        cert, key = make_certificate(self.dir, 'server', ca, SERVER_NAME,
                                     'IP:' + SERVER_NAME)
        self.ca_path = ca[0]
        if self._as_root():
            uid, gid = self._system_ids()
            for path in (cert, key):
                os.chown(path, uid, gid)
        self.extra_args = ['--ssl-ca=%s' % ca[0], '--ssl-cert=%s' % cert,
                           '--ssl-key=%s' % key]
        super()._initialise()

    def _setup(self):
        super()._setup()
        conn = self._admin_connect()
        try:
            cur = conn.cursor()
            for host in ('%', 'localhost', '127.0.0.1'):
                cur.execute("CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED "
                            "BY '%s' REQUIRE SSL"
                            % (TLS_USER, host, TLS_PASSWORD))
                cur.execute("GRANT ALL PRIVILEGES ON `relstoragetest_hp`.* "
                            "TO '%s'@'%s'" % (TLS_USER, host))
        finally:
            conn.close()
