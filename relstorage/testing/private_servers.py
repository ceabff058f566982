"""Private, throw-away PostgreSQL and MariaDB servers for the tests.

Most tests share the machine's own servers (127.0.0.1:5432 and :3306, see
``dbs.py``).  A few cannot: they restart the server under a live storage,
or open more connections than a default server allows.  Doing that to the
shared servers would disturb everything else using them (other test runs,
other people), so those tests must never stop, restart or reconfigure
them (no ALTER SYSTEM, no SET GLOBAL).  Instead they ask this module for a
private server: a fresh data directory under a temporary directory, a free
port on 127.0.0.1, the test account and databases that
``scripts/testdb.sh`` creates on the shared servers, and nothing else.
Every server this process starts is stopped and its directory deleted when
the interpreter exits.

Usage::

    server = private_server('postgresql')   # or 'mysql'
    conn = server.connect('relstoragetest_hp')
    ...
    server.restart()                         # same port, same data

A server that cannot be started raises :class:`NotInstalled` when its
programs are missing (a test decides whether that is a skip or, under CI,
a failure) and :class:`ServerError`, with the end of the server's log,
for anything else.
"""
import atexit
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ['PrivateServer', 'PostgreSQLServer', 'MySQLServer',
           'private_server', 'NotInstalled', 'ServerError',
           'TEST_USER', 'TEST_PASSWORD', 'DATABASES']

#: The account the tests use, as on the shared servers.
TEST_USER = 'relstoragetest'
TEST_PASSWORD = 'relstoragetest'
#: May only read the first database (the read-only user tests); its
#: password is its name, as ``scripts/testdb.sh`` makes it.
RO_USER = 'relstoragetest_ro'
#: The databases ``dbs.py`` names, owned by / granted to TEST_USER.
DATABASES = ('relstoragetest_hp', 'relstoragetest_hf', 'relstoragetest_hp2',
             'relstoragetest_hf2', 'relstoragetest_misc')

#: Seconds a server may take to start or to stop.
TIMEOUT = 60


class NotInstalled(RuntimeError):
    """A program the server needs is not on this machine."""


class ServerError(RuntimeError):
    """A private server would not initialise, start or stop.  The message
    ends with the tail of the server's log."""


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _tail(path, lines=30):
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as e:
        return '(no log: %s)' % e
    text = data.decode('utf-8', 'replace').rstrip('\n').split('\n')
    return '\n'.join(text[-lines:])


def _child_env():
    # Variables such as PGPORT, PGDATA or MYSQL_TCP_PORT must not steer a
    # private server anywhere; messages in English so that the log can be
    # searched ("Address already in use").
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('PG', 'MYSQL', 'MARIADB'))}
    env['LC_ALL'] = 'C'
    return env


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's, but it exists
        return True
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return True


_lock = threading.RLock()
#: Every server started by this process, for the exit handler.
_started = []
_exit_handler_registered = False


def _read_pid(path):
    try:
        with open(path) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def _cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except OSError:
        return ''


def _sweep_leftovers():
    """Delete the private servers of test processes that died without
    their exit handler: killed, or ended with os._exit() as pytest-timeout
    does after a hung test.  A server is only signalled when its command
    line names its own directory, so nothing else is ever hit."""
    for parent in {'/tmp', tempfile.gettempdir()}:
        for path in glob.glob(os.path.join(parent, PrivateServer.prefix
                                           + '*')):
            owner = _read_pid(os.path.join(path, 'owner.pid'))
            if owner is None or owner == os.getpid() or _alive(owner):
                continue
            for name, sig in (('data/postmaster.pid', signal.SIGQUIT),
                              ('mysqld.pid', signal.SIGKILL)):
                pid = _read_pid(os.path.join(path, name))
                if pid is None or not _alive(pid) \
                        or path + '/' not in _cmdline(pid):
                    continue
                try:
                    os.kill(pid, sig)
                    deadline = time.monotonic() + 10
                    while _alive(pid) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if _alive(pid):
                        os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            shutil.rmtree(path, ignore_errors=True)


def _remember(server):
    global _exit_handler_registered
    with _lock:
        if server not in _started:
            _started.append(server)
        if not _exit_handler_registered:
            atexit.register(_remove_all)
            _exit_handler_registered = True
            try:
                _sweep_leftovers()
            except Exception as e:  # noqa: BLE001 -- never stops a start
                sys.stderr.write('private_servers: sweeping leftovers '
                                 'failed: %s\n' % e)


def _remove_all():
    """At exit: stop and delete every server this process started.  A
    forked child that exits through here leaves its parent's alone."""
    for server in reversed(_started):
        if server._owner != os.getpid():
            continue
        try:
            server.remove()
        except Exception as e:  # noqa: BLE001 -- go on with the others
            sys.stderr.write('private_servers: could not remove the %s server '
                             'in %s: %s\n' % (server.kind, server.dir, e))


class PrivateServer:
    """A database server of this process's own, on 127.0.0.1 and a free
    port, with its data in a temporary directory.

    The first :meth:`start` creates the directory, initialises the data
    and creates the test account and databases; later starts (as in
    :meth:`restart`) reuse both the data and the port.
    """

    kind = None
    host = '127.0.0.1'
    user = TEST_USER
    password = TEST_PASSWORD
    #: The system account that runs the server when we are root (the
    #: servers refuse to run as root).
    system_user = None
    #: The directory names prefix under the temporary directory.
    prefix = 'relstorage-private-'

    def __init__(self, max_connections=300, timeout=TIMEOUT, also_listen=()):
        self.max_connections = max_connections
        self.timeout = timeout
        #: Addresses it listens on besides 127.0.0.1 (the host side of a
        #: test's network namespace, see test_silent_network).
        self.also_listen = tuple(also_listen)
        #: The port, chosen on the first start and kept until remove().
        self.port = None
        #: The temporary directory holding data, log and socket.
        self.dir = None
        self._set_up = False
        self._owner = os.getpid()

    @property
    def listen_addresses(self):
        return ','.join((self.host,) + self.also_listen)

    def __repr__(self):
        return '<%s %s:%s in %s%s>' % (
            type(self).__name__, self.host, self.port, self.dir,
            ' running' if self.running() else '')

    # -- the public interface -------------------------------------------

    def start(self):
        """Start the server (initialising it the first time) and wait,
        at most ``timeout`` seconds, until it accepts connections."""
        if self.running():
            return
        self._check_installed()
        _remember(self)
        first = self.dir is None
        if first:
            self._make_dir()
            try:
                self._initialise()
            except BaseException:
                self.remove()
                raise
        # On the first start, another process may take the free port
        # before the server binds it: then take another.
        attempts = 3 if first else 1
        for attempt in range(attempts):
            if first:
                self.port = free_port()
            offset = self._log_size()
            try:
                self._launch()
                self._wait_ready()
                break
            except BaseException as e:
                in_use = 'Address already in use' in self._log_since(offset)
                try:
                    self._halt()
                except Exception:  # noqa: BLE001 -- report the first error
                    pass
                if (isinstance(e, ServerError) and in_use
                        and attempt + 1 < attempts):
                    continue
                if first:
                    self.remove()
                raise
        if not self._set_up:
            try:
                self._setup()
            except BaseException:
                self.remove()
                raise
            self._set_up = True

    def stop(self):
        """Shut the server down quickly (in-flight transactions are rolled
        back, connections dropped) and wait until its process has gone."""
        if self.running():
            self._halt()

    def restart(self):
        """Stop, then start again on the same port with the same data."""
        self.stop()
        self.start()

    def remove(self):
        """Stop the server if it runs and delete its directory.  Safe to
        call more than once; a later start() begins from nothing."""
        try:
            self.stop()
        finally:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
            self.port = None
            self._set_up = False

    def running(self):
        """Whether the server's process is alive."""
        pid = self.pid
        return pid is not None and _alive(pid)

    @property
    def pid(self):
        """The server's (main) process id while it runs, else None: a
        restart gives a new one."""
        raise NotImplementedError

    def connect(self, database=DATABASES[0]):
        """A new DB-API connection to *database* as the test user."""
        raise NotImplementedError

    # -- shared helpers --------------------------------------------------

    @property
    def log_path(self):
        return os.path.join(self.dir, 'server.log')

    @property
    def data_dir(self):
        return os.path.join(self.dir, 'data')

    def log_tail(self, lines=30):
        """The end of the server's log, for error messages."""
        return _tail(self.log_path, lines)

    def _log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def _log_since(self, offset):
        try:
            with open(self.log_path, 'rb') as f:
                f.seek(offset)
                return f.read().decode('utf-8', 'replace')
        except OSError:
            return ''

    def _as_root(self):
        return os.geteuid() == 0

    def _system_ids(self):
        import pwd
        try:
            entry = pwd.getpwnam(self.system_user)
        except KeyError:
            raise NotInstalled('running as root, and there is no %r system '
                               'user to run the %s server as'
                               % (self.system_user, self.kind))
        return entry.pw_uid, entry.pw_gid

    def _make_dir(self):
        # Under /tmp when root: the server's own account must be able to
        # reach it, which a private TMPDIR may not allow.
        parent = '/tmp' if self._as_root() and os.path.isdir('/tmp') \
            else None
        path = tempfile.mkdtemp(prefix='%s%s-' % (self.prefix, self.kind),
                                dir=parent)
        os.chmod(path, 0o755)
        # Who to ask whether the server is still wanted: see
        # _sweep_leftovers().
        with open(os.path.join(path, 'owner.pid'), 'w') as f:
            f.write('%d\n' % os.getpid())
        if self._as_root():
            uid, gid = self._system_ids()
            os.chown(path, uid, gid)
        self.dir = path

    def _run(self, args, what, timeout=None, as_server_user=False):
        """Run a command to completion, as the server's account when we
        are root and *as_server_user*; ServerError if it fails."""
        if as_server_user and self._as_root():
            runuser = shutil.which('runuser') or '/usr/sbin/runuser'
            args = [runuser, '-u', self.system_user, '--'] + list(args)
        timeout = timeout or self.timeout + 30
        with tempfile.TemporaryFile() as out:
            try:
                proc = subprocess.run(
                    args, cwd=self.dir, env=_child_env(),
                    stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, timeout=timeout)
            except subprocess.TimeoutExpired:
                returncode = 'timed out after %ss' % timeout
            else:
                returncode = proc.returncode
            out.seek(0)
            output = out.read().decode('utf-8', 'replace').strip()
        if returncode != 0:
            raise ServerError(
                '%s of the private %s server in %s failed (%s):\n%s\n'
                '--- log %s:\n%s' % (
                    what, self.kind, self.dir, returncode,
                    '\n'.join(output.split('\n')[-20:]),
                    self.log_path, self.log_tail()))
        return output

    def _error(self, message):
        return ServerError('the private %s server on port %s in %s %s\n'
                           '--- log %s:\n%s' % (
                               self.kind, self.port, self.dir, message,
                               self.log_path, self.log_tail()))

    def _check_installed(self):
        """Raise NotInstalled unless the server's programs and the driver
        the tests talk to it with are there."""
        self._find_programs()
        try:
            __import__(self.driver)
        except ImportError as e:
            raise NotInstalled('%s is needed to talk to the server: %s'
                               % (self.driver, e))
        if self._as_root():
            self._system_ids()

    # -- what each kind supplies -----------------------------------------

    #: The DB-API module the tests talk to the server with.
    driver = None

    def _find_programs(self):
        """Raise NotInstalled unless the server's programs are there."""
        raise NotImplementedError

    def _initialise(self):
        """Create the data directory (the first start only)."""
        raise NotImplementedError

    def _launch(self):
        """Start the server's process."""
        raise NotImplementedError

    def _wait_ready(self):
        """Return once the server accepts connections over TCP (within
        the timeout; an error with its log if it exits or never does)."""
        deadline = time.monotonic() + self.timeout
        while True:
            gone = self._exit_status()
            if gone is not None:
                raise self._error('exited while starting (%s)' % gone)
            try:
                self._admin_connect().close()
                return
            except Exception as e:  # noqa: BLE001 -- retried, then reported
                if time.monotonic() > deadline:
                    raise self._error('did not accept connections within '
                                      '%ss: %s' % (self.timeout, e))
            time.sleep(0.2)

    def _exit_status(self):
        """Why the server process is gone, or None while it runs."""
        raise NotImplementedError

    def _halt(self):
        """Stop the server's process, if any, and wait until it is gone."""
        raise NotImplementedError

    def _setup(self):
        """Create the test account and databases (the first start only;
        written so that doing it again does no harm)."""
        raise NotImplementedError


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
        pid = _read_pid(os.path.join(self.data_dir, 'postmaster.pid'))
        # A pid file left by a crash may name someone else's process now.
        if pid is not None and self.data_dir not in (_cmdline(pid)
                                                     or self.data_dir):
            return None
        return pid

    def _halt(self):
        pid = self.pid
        if pid is None or not _alive(pid):
            return
        for mode in ('fast', 'immediate'):
            try:
                self._run([self._program('pg_ctl'), '-D', self.data_dir,
                           '-m', mode, '-w', '-t', str(self.timeout), 'stop'],
                          'pg_ctl stop -m %s' % mode, as_server_user=True)
                break
            except ServerError:
                if not _alive(pid):
                    break
        deadline = time.monotonic() + self.timeout
        killed = False
        while _alive(pid):
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
        import psycopg2
        conn = psycopg2.connect(host=self.host, port=self.port,
                                user=self.admin_user, dbname=database,
                                connect_timeout=5)
        conn.autocommit = True
        return conn

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


class MySQLServer(PrivateServer):
    """A private MariaDB (or MySQL) server run directly from mariadbd.

    ``root`` has no password (over TCP from 127.0.0.1); the test account
    has ``relstoragetest``.  Settings follow the machine's server where
    the tests notice them (utf8mb4, no name resolution); the redo log is
    flushed once a second rather than at each commit, and the buffer pool
    is small.
    """

    kind = 'mysql'
    driver = 'MySQLdb'
    system_user = 'mysql'
    admin_user = 'root'
    _daemons = ('/usr/sbin/mariadbd', '/usr/sbin/mysqld')
    _installers = ('/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db')
    #: mariadbd options of a subclass (replication, say).
    extra_args = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._proc = None
        self._daemon = None
        self._installer = None

    @staticmethod
    def _find(paths):
        for p in paths:
            found = shutil.which(os.path.basename(p))
            for candidate in (p, found):
                if candidate and os.access(candidate, os.X_OK):
                    return candidate
        return None

    def _find_programs(self):
        self._daemon = self._daemon or self._find(self._daemons)
        self._installer = self._installer or self._find(self._installers)
        missing = [what for what, found in (
            ('mariadbd', self._daemon),
            ('mariadb-install-db', self._installer)) if not found]
        if missing:
            raise NotInstalled(
                'the MariaDB server programs (%s) are not installed '
                '(Debian: apt-get install mariadb-server)'
                % ', '.join(missing))

    def log_tail(self, lines=30):
        # What mariadbd says before it opens its log goes to stdout.log.
        tail = super().log_tail(lines)
        early = _tail(os.path.join(self.dir, 'stdout.log'), lines)
        if early and not early.startswith('(no log'):
            tail += '\n--- %s:\n%s' % (
                os.path.join(self.dir, 'stdout.log'), early)
        return tail

    @property
    def socket_path(self):
        return os.path.join(self.dir, 'mysqld.sock')

    def _user_option(self):
        return ['--user=%s' % self.system_user] if self._as_root() else []

    def _initialise(self):
        self._run([self._installer, '--no-defaults',
                   '--datadir=%s' % self.data_dir,
                   '--auth-root-authentication-method=normal',
                   '--skip-test-db', '--skip-name-resolve',
                   '--innodb-log-file-size=48M'] + self._user_option(),
                  'mariadb-install-db')

    def _launch(self):
        args = [self._daemon, '--no-defaults',
                '--datadir=%s' % self.data_dir,
                '--port=%d' % self.port,
                '--bind-address=%s' % self.listen_addresses,
                '--socket=%s' % self.socket_path,
                '--pid-file=%s' % os.path.join(self.dir, 'mysqld.pid'),
                '--log-error=%s' % self.log_path,
                '--max-connections=%d' % self.max_connections,
                '--skip-name-resolve',
                '--character-set-server=utf8mb4',
                '--collation-server=utf8mb4_general_ci',
                '--innodb-buffer-pool-size=64M',
                '--innodb-log-file-size=48M',
                '--innodb-flush-log-at-trx-commit=2',
                ] + self._user_option() + list(self.extra_args)
        if not any(arg.startswith('--log-bin') for arg in args):
            args.append('--skip-log-bin')
        # Its own session: a ^C meant for the test run reaches us, and we
        # shut the server down in order.
        with open(os.path.join(self.dir, 'stdout.log'), 'ab') as out:
            self._proc = subprocess.Popen(
                args, cwd=self.dir, env=_child_env(),
                stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)

    def _exit_status(self):
        status = self._proc.poll()
        return None if status is None else 'status %s' % status

    @property
    def pid(self):
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def _halt(self):
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)

    def _admin_connect(self):
        import MySQLdb
        return MySQLdb.connect(host=self.host, port=self.port,
                               user=self.admin_user, passwd='',
                               connect_timeout=5)

    def connect(self, database=DATABASES[0]):
        import MySQLdb
        return MySQLdb.connect(host=self.host, port=self.port,
                               user=self.user, passwd=self.password,
                               db=database, connect_timeout=10)

    def _setup(self):
        hosts = ('%', 'localhost', '127.0.0.1')
        statements = []
        for user, password in ((self.user, self.password),
                               (RO_USER, RO_USER)):
            for host in hosts:
                statements.append(
                    "CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED BY '%s'"
                    % (user, host, password))
        for db in DATABASES:
            statements.append('CREATE DATABASE IF NOT EXISTS `%s` '
                              'CHARACTER SET utf8mb4' % db)
            for host in hosts:
                statements.append("GRANT ALL PRIVILEGES ON `%s`.* TO '%s'@'%s'"
                                  % (db, self.user, host))
        for host in hosts:
            # PROCESS lets the tests look at lock waits.
            statements.append("GRANT PROCESS ON *.* TO '%s'@'%s'"
                              % (self.user, host))
            statements.append("GRANT SELECT ON `%s`.* TO '%s'@'%s'"
                              % (DATABASES[0], RO_USER, host))
        conn = self._admin_connect()
        try:
            cur = conn.cursor()
            for sql in statements:
                cur.execute(sql)
        finally:
            conn.close()


_KINDS = {'postgresql': PostgreSQLServer, 'mysql': MySQLServer}
_servers = {}
#: Why a server would not start, so that the tests after the first do
#: not each wait for it again.
_failures = {}


def private_server(kind, max_connections=300, also_listen=()):
    """The private server of *kind* ('postgresql' or 'mysql') with
    *max_connections*: one per process and per (kind, max_connections),
    created and started on the first call, started again if a test left
    it stopped, and stopped and deleted at interpreter exit (atexit), so
    that no server process outlives the test run.

    Raises NotInstalled when the server's programs are missing and
    ServerError when it will not start.
    """
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError('kind must be one of %s, not %r'
                         % (', '.join(sorted(_KINDS)), kind))
    key = (kind, max_connections, tuple(also_listen))
    with _lock:
        if key in _failures:
            raise _failures[key]
        server = _servers.get(key)
        if server is None:
            server = _servers[key] = cls(max_connections,
                                         also_listen=also_listen)
        try:
            server.start()
        except (NotInstalled, ServerError) as e:
            _failures[key] = e
            raise
    return server
