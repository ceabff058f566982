"""A private pgbouncer in front of a private PostgreSQL server (see
``servers`` for what a private server is).

The pooler gets a temporary directory of its own (its ini file, user
list, log and pid file), listens on 127.0.0.1 on a free port, and
forwards every database of the backend server. ``pool_mode`` and
``default_pool_size`` are the two settings the tests vary: in
``transaction`` mode a client's server connection is only its own for
one transaction, and at most ``pool_size`` server connections serve each
(database, user) pair, however many clients there are.

Authentication is ``trust`` on both sides, as on the private servers;
the admin console (database ``pgbouncer``) is open to ``postgres``.
"""
import os
import shutil
import signal
import time

from .postgresql_server import admin_connection
from .processes import alive
from .processes import cmdline
from .processes import read_pid
from .servers import DATABASES
from .servers import RO_USER
from .servers import NotInstalled
from .servers import PrivateServer

#: The pool modes pgbouncer has that the tests use.
POOL_MODES = ('session', 'transaction')


class PgBouncer(PrivateServer):
    """pgbouncer with *pool_mode* and *pool_size* (its
    ``default_pool_size``) in front of *backend*, a started
    PostgreSQLServer."""

    kind = 'pgbouncer'
    driver = 'psycopg2'
    system_user = 'postgres'
    admin_user = 'postgres'

    def __init__(self, backend, pool_mode='transaction', pool_size=4,
                 max_clients=1000, server_password=None, **kwargs):
        if pool_mode not in POOL_MODES:
            raise ValueError('pool_mode must be one of %s, not %r'
                             % (', '.join(POOL_MODES), pool_mode))
        super().__init__(max_connections=max_clients, **kwargs)
        self.backend = backend
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        #: The password pgbouncer logs in to the backend with (None: the
        #: backend trusts it, as a private server does).
        self.server_password = server_password
        self._program_path = None

    def __repr__(self):
        return '<PgBouncer %s pool_size=%s %s:%s -> %r>' % (
            self.pool_mode, self.pool_size, self.host, self.port,
            self.backend)

    @property
    def log_path(self):
        return os.path.join(self.dir, 'pgbouncer.log')

    @property
    def ini_path(self):
        return os.path.join(self.dir, 'pgbouncer.ini')

    @property
    def pid(self):
        if self.dir is None:
            return None
        pid = read_pid(os.path.join(self.dir, 'pgbouncer.pid'))
        if pid is not None and self.dir + '/' not in cmdline(pid):
            return None
        return pid

    def _find_programs(self):
        path = shutil.which('pgbouncer') or '/usr/sbin/pgbouncer'
        if not os.access(path, os.X_OK):
            raise NotInstalled('pgbouncer was found neither on PATH nor in '
                               '/usr/sbin (Debian: apt-get install '
                               'pgbouncer)')
        self._program_path = path

    def _initialise(self):
        # trust: the names must still be listed (the passwords are not
        # checked).
        with open(os.path.join(self.dir, 'userlist.txt'), 'w') as f:
            for user in (self.user, RO_USER, self.admin_user):
                f.write('"%s" ""\n' % user)

    def _settings(self):
        return {
            'listen_addr': self.host,
            'listen_port': str(self.port),
            # TCP only: no socket left in a shared directory.
            'unix_socket_dir': '',
            'auth_type': 'trust',
            'auth_file': os.path.join(self.dir, 'userlist.txt'),
            'admin_users': self.admin_user,
            'pool_mode': self.pool_mode,
            'default_pool_size': str(self.pool_size),
            'min_pool_size': '0',
            'reserve_pool_size': '0',
            'max_client_conn': str(self.max_connections),
            'server_reset_query': 'DISCARD ALL',
            # Clients wait this long for a server connection.
            'query_wait_timeout': '120',
            # Idle server connections go soon, leaving the backend's
            # slots to the other pools.
            'server_idle_timeout': '10',
            'logfile': self.log_path,
            'pidfile': os.path.join(self.dir, 'pgbouncer.pid'),
            'log_connections': '0',
            'log_disconnections': '0',
        }

    def _launch(self):
        self.backend.start()
        target = 'host=%s port=%d' % (self.backend.host, self.backend.port)
        if self.server_password:
            target += ' password=%s' % self.server_password
        # Readable by the pooler's account alone: it may hold a password.
        fd = os.open(self.ini_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600)
        if self._as_root():
            os.fchown(fd, *self._system_ids())
        with os.fdopen(fd, 'w') as f:
            f.write('[databases]\n* = %s\n\n[pgbouncer]\n' % target)
            for name, value in self._settings().items():
                f.write('%s = %s\n' % (name, value))
        self._run([self._program_path, '-d', self.ini_path],
                  'pgbouncer -d', as_server_user=True)
        # -d returns once it has forked; the pid file follows.
        deadline = time.monotonic() + self.timeout
        while self.pid is None:
            if time.monotonic() > deadline:
                raise self._error('wrote no pid file')
            time.sleep(0.05)

    def _exit_status(self):
        return None if self.running() else 'not running'

    def _halt(self):
        pid = self.pid
        if pid is None or not alive(pid):
            return
        # SIGTERM: immediate shutdown, server connections closed.
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.timeout
        while alive(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
            time.sleep(0.05)

    def _admin_connect(self, database='pgbouncer'):
        return admin_connection(self, database)

    def _setup(self):
        """The account and databases are the backend's."""

    def show(self, what):
        """``[{column: value}]`` of the admin console's ``SHOW what``
        (POOLS, CLIENTS, SERVERS...)."""
        if what.upper() not in ('POOLS', 'CLIENTS', 'SERVERS', 'STATS',
                                'DATABASES', 'CONFIG'):
            raise ValueError('not a SHOW the tests use: %r' % (what,))
        conn = self._admin_connect()
        try:
            cur = conn.cursor()
            cur.execute('SHOW ' + what.upper())
            names = [column[0] for column in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]
        finally:
            conn.close()

    def dsn(self, database=DATABASES[0]):
        """A libpq connection string to *database* through the pooler."""
        return 'dbname=%s host=%s port=%s user=%s password=%s' % (
            database, self.host, self.port, self.user, self.password)

    def connect(self, database=DATABASES[0]):
        import psycopg2
        return psycopg2.connect(self.dsn(database), connect_timeout=10)


class RunningServer:
    """A PostgreSQL server that runs already (the machine's, say), as
    a PgBouncer's backend: nothing of it is started or changed."""

    def __init__(self, host, port):
        self.host = host
        self.port = int(port)

    def start(self):
        """It runs already."""

    def __repr__(self):
        return '<RunningServer %s:%s>' % (self.host, self.port)
