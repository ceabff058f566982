"""A private PostgreSQL server (see ``servers``)."""
import glob
import os
import re
import shutil
import signal
import time

from .processes import alive
from .processes import cmdline
from .processes import read_pid
from .servers import DATABASES
from .servers import RO_USER
from .servers import NotInstalled
from .servers import PrivateServer
from .servers import ServerError


def admin_connection(server, database):
    """A psycopg2 connection in autocommit mode to *database* of
    *server* (a private PostgreSQL server or pooler) as its admin_user."""
    import psycopg2
    conn = psycopg2.connect(host=server.host, port=server.port,
                            user=server.admin_user, dbname=database,
                            connect_timeout=5)
    conn.autocommit = True
    return conn


def _version_key(path):
    return [int(n) for n in re.findall(r'\d+', path)]


class PostgreSQLServer(PrivateServer):
    """A private PostgreSQL cluster run with initdb and pg_ctl.

    Authentication is ``trust`` (the password is set but not checked),
    ``fsync`` is off and the shared buffers small, so that several such
    servers fit on one machine and start in a second or two.
    """

    kind = 'postgresql'
    driver = 'psycopg2'
    system_user = 'postgres'
    #: The cluster's superuser (initdb -U), used to create the rest.
    admin_user = 'postgres'
    _programs = ('initdb', 'pg_ctl', 'postgres')
    #: postgresql.conf settings of a subclass (replication, say).
    extra_settings = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._bindir = None

    def _find_bindir(self):
        # Debian keeps the server programs out of PATH, one directory per
        # major version: take the newest complete one.
        candidates = sorted(glob.glob('/usr/lib/postgresql/*/bin'),
                            key=_version_key, reverse=True)
        which = shutil.which('pg_ctl')
        if which:
            candidates.append(os.path.dirname(which))
        for d in candidates:
            if all(os.access(os.path.join(d, p), os.X_OK)
                   for p in self._programs):
                return d
        return None

    def _find_programs(self):
        if self._bindir is None:
            self._bindir = self._find_bindir()
        if self._bindir is None:
            raise NotInstalled(
                'the PostgreSQL server programs (%s) were found neither in '
                '/usr/lib/postgresql/*/bin nor on PATH (Debian: apt-get '
                'install postgresql)' % ', '.join(self._programs))

    def _program(self, name):
        return os.path.join(self._bindir, name)

    def _initialise(self):
        self._run([self._program('initdb'), '-D', self.data_dir,
                   '-A', 'trust', '-U', self.admin_user, '--no-sync',
                   '--encoding=UTF8', '--locale=C'],
                  'initdb', as_server_user=True)
        # The port goes on pg_ctl's command line (see _launch) so that it
        # can change when the first choice is taken.
        settings = {
            'listen_addresses': "'%s'" % self.listen_addresses,
            'unix_socket_directories': "'%s'" % self.dir,
            'max_connections': str(self.max_connections),
            'shared_buffers': '32MB',
            'fsync': 'off',
            'synchronous_commit': 'off',
            'full_page_writes': 'off',
        }
        settings.update(self.extra_settings)
        with open(os.path.join(self.data_dir, 'postgresql.conf'), 'a') as f:
            f.write('\n# relstorage private test server\n')
            for name, value in settings.items():
                f.write('%s = %s\n' % (name, value))
        if self.also_listen:
            # Clients on the other side of those addresses (a test's
            # network namespace) are on a subnet of the server's own.
            with open(os.path.join(self.data_dir, 'pg_hba.conf'), 'a') as f:
                f.write('host all all samenet trust\n')

    def _launch(self):
        self._run([self._program('pg_ctl'), '-D', self.data_dir,
                   '-l', self.log_path, '-o', '-p %d' % self.port,
                   '-w', '-t', str(self.timeout), 'start'],
                  'pg_ctl start', as_server_user=True)

    def _exit_status(self):
        # pg_ctl -w has waited for it already.
        return None if self.running() else 'not running'

    @property
    def pid(self):
        if self.dir is None:
            return None
        pid = read_pid(os.path.join(self.data_dir, 'postmaster.pid'))
        # A pid file left by a crash may name someone else's process now.
        if pid is not None and self.data_dir not in (cmdline(pid)
                                                     or self.data_dir):
            return None
        return pid

    def _halt(self):
        pid = self.pid
        if pid is None or not alive(pid):
            return
        for mode in ('fast', 'immediate'):
            try:
                self._run([self._program('pg_ctl'), '-D', self.data_dir,
                           '-m', mode, '-w', '-t', str(self.timeout), 'stop'],
                          'pg_ctl stop -m %s' % mode, as_server_user=True)
                break
            except ServerError:
                if not alive(pid):
                    break
        deadline = time.monotonic() + self.timeout
        killed = False
        while alive(pid):
            if time.monotonic() > deadline:
                if killed:
                    raise self._error('would not stop (pid %d)' % pid)
                os.kill(pid, signal.SIGKILL)
                killed = True
                deadline = time.monotonic() + 10
            time.sleep(0.05)

    def set(self, name, value):
        """ALTER SYSTEM on this (private) server, then reload."""
        conn = self._admin_connect()
        try:
            cur = conn.cursor()
            cur.execute('ALTER SYSTEM SET %s = %%s' % name, (value,))
            cur.execute('SELECT pg_reload_conf()')
        finally:
            conn.close()

    def _admin_connect(self, database='postgres'):
        return admin_connection(self, database)

    def connect(self, database=DATABASES[0]):
        import psycopg2
        return psycopg2.connect(host=self.host, port=self.port,
                                user=self.user, password=self.password,
                                dbname=database, connect_timeout=10)

    def _setup(self):
        conn = self._admin_connect()
        try:
            cur = conn.cursor()
            for role, password in ((self.user, self.password),
                                   (RO_USER, RO_USER)):
                cur.execute('SELECT 1 FROM pg_roles WHERE rolname = %s',
                            (role,))
                if not cur.fetchone():
                    cur.execute('CREATE ROLE %s LOGIN PASSWORD %%s' % role,
                                (password,))
            for db in DATABASES:
                cur.execute('SELECT 1 FROM pg_database WHERE datname = %s',
                            (db,))
                if not cur.fetchone():
                    cur.execute("CREATE DATABASE %s OWNER %s ENCODING 'UTF8' "
                                "TEMPLATE template0" % (db, self.user))
        finally:
            conn.close()
        conn = self._admin_connect(DATABASES[0])
        try:
            conn.cursor().execute(
                'GRANT CONNECT ON DATABASE {db} TO {ro};'
                'GRANT USAGE ON SCHEMA public TO {ro};'
                'ALTER DEFAULT PRIVILEGES FOR ROLE {user} IN SCHEMA public '
                'GRANT SELECT ON TABLES TO {ro}'.format(
                    db=DATABASES[0], ro=RO_USER, user=self.user))
        finally:
            conn.close()
