"""Private, throw-away database servers for the tests: what every kind
has in common (``postgresql_server`` and ``mysql_server`` hold what
differs, ``private_servers`` hands out one per process).

Most tests share the machine's own servers (127.0.0.1:5432 and :3306, see
``dbs.py``).  A few cannot: they restart the server under a live storage,
or open more connections than a default server allows.  Doing that to the
shared servers would disturb everything else using them (other test runs,
other people), so those tests must never stop, restart or reconfigure
them (no ALTER SYSTEM, no SET GLOBAL).  Instead they ask
``private_servers`` for a private server: a fresh data directory under a
temporary directory, a free port on 127.0.0.1, the test account and
databases that ``scripts/testdb.sh`` creates on the shared servers, and
nothing else.  Every server this process starts is stopped and its
directory deleted when the interpreter exits (``processes``).

A server that cannot be started raises :class:`NotInstalled` when its
programs are missing (a test decides whether that is a skip or, under CI,
a failure) and :class:`ServerError`, with the end of the server's log,
for anything else.
"""
import os
import shutil
import subprocess
import tempfile
import time

from .processes import PREFIX
from .processes import alive
from .processes import free_port
from .processes import remember
from .processes import server_env
from .processes import tail

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
    prefix = PREFIX

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
        remember(self)
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
        return pid is not None and alive(pid)

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

    def logtail(self, lines=30):
        """The end of the server's log, for error messages."""
        return tail(self.log_path, lines)

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
        # sweep_leftovers().
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
                    args, cwd=self.dir, env=server_env(self.dir),
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
                    self.log_path, self.logtail()))
        return output

    def _error(self, message):
        return ServerError('the private %s server on port %s in %s %s\n'
                           '--- log %s:\n%s' % (
                               self.kind, self.port, self.dir, message,
                               self.log_path, self.logtail()))

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
