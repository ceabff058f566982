"""A private MariaDB (or MySQL) server (see ``servers``)."""
import os
import shutil
import signal
import subprocess

from .processes import server_env
from .processes import tail
from .servers import DATABASES
from .servers import RO_USER
from .servers import NotInstalled
from .servers import PrivateServer


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

    def logtail(self, lines=30):
        # What mariadbd says before it opens its log goes to stdout.log.
        text = super().logtail(lines)
        early = tail(os.path.join(self.dir, 'stdout.log'), lines)
        if early and not early.startswith('(no log'):
            text += '\n--- %s:\n%s' % (
                os.path.join(self.dir, 'stdout.log'), early)
        return text

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
                args, cwd=self.dir, env=server_env(self.dir),
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

    def admin(self, *statements):
        """Run *statements* in turn as the server's administrator; the rows
        of the last one (None if it gives none)."""
        conn = self._admin_connect()
        try:
            cur = conn.cursor()
            for sql in statements:
                cur.execute(sql)
            return cur.fetchall() if cur.description else None
        finally:
            conn.close()

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
        self.admin(*statements)
