"""A private pg_auto_failover formation for the tests: a monitor and two
data nodes (Debian's postgresql-15-auto-failover and pg-auto-failover-cli),
each a PostgreSQL cluster in one temporary directory, on free ports of
127.0.0.1, trust authentication, no TLS; one ``pg_autoctl run`` process
per node keeps it in its assigned state. The machine's own servers are
never touched; ``remove()`` (run at exit for every formation started)
stops the keepers and their servers and deletes the directory.

The storage reaches the formation as ``pg_autoctl show uri`` prints it:
every node's host and port, ``target_session_attrs=read-write``.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from .postgresql_server import PostgreSQLServer
from .processes import PREFIX
from .processes import alive
from .processes import free_port
from .processes import read_pid
from .processes import remember
from .processes import server_env
from .servers import DATABASES
from .servers import TEST_PASSWORD
from .servers import TEST_USER
from .servers import NotInstalled
from .servers import ServerError

#: Seconds a formation may take to reach its states.
TIMEOUT = 120

#: The monitor's health checks, quickened (pgautofailover.*, in ms; see
#: Formation.quicken_health_checks): a primary that stops answering is
#: failed over in seconds, not the 20 s and 30 s of the defaults.
HEALTH_CHECKS = {
    'health_check_period': 1000,
    'health_check_timeout': 1000,
    'health_check_max_retries': 1,
    'health_check_retry_delay': 500,
    'node_considered_unhealthy_timeout': 2000,
    'primary_demote_timeout': 3000,
}


class Formation:
    """The monitor and *nodes* data nodes of one formation ('default')."""

    kind = 'pg_auto_failover'
    host = '127.0.0.1'
    system_user = 'postgres'
    user = TEST_USER
    password = TEST_PASSWORD

    def __init__(self, nodes=2, timeout=TIMEOUT):
        self.node_count = nodes
        self.timeout = timeout
        self.dir = None
        self.ports = {}
        self.keepers = {}
        self._owner = os.getpid()
        self._bindir = None

    # -- start ---------------------------------------------------------------

    def _find_programs(self):
        if not shutil.which('pg_autoctl'):
            raise NotInstalled('pg_autoctl was not found (Debian: apt-get '
                               'install pg-auto-failover-cli '
                               'postgresql-15-auto-failover)')
        self._bindir = PostgreSQLServer()._find_bindir()
        if self._bindir is None or not os.path.exists(os.path.join(
                os.path.dirname(self._bindir), 'lib', 'pgautofailover.so')):
            raise NotInstalled('the pgautofailover extension of the newest '
                               'PostgreSQL (%s) is not installed (Debian: '
                               'apt-get install postgresql-15-auto-failover)'
                               % self._bindir)

    def _env(self):
        env = server_env(self.dir)
        env.update(XDG_CONFIG_HOME=os.path.join(self.dir, 'config'),
                   XDG_DATA_HOME=os.path.join(self.dir, 'share'),
                   PATH=self._bindir + os.pathsep + env.get('PATH', ''))
        return env

    def _command(self, args):
        if os.geteuid() == 0:
            return (['runuser', '-u', self.system_user, '--', 'env']
                    + ['%s=%s' % item for item in self._env().items()
                       if item[0] in ('XDG_CONFIG_HOME', 'XDG_DATA_HOME',
                                      'PATH', 'LC_ALL', 'TMPDIR')]
                    + list(args))
        return list(args)

    def autoctl(self, *args, timeout=None):
        """Run ``pg_autoctl args`` to completion; its output."""
        done = subprocess.run(
            self._command(['pg_autoctl'] + list(args)), cwd=self.dir,
            env=self._env(), stdin=subprocess.DEVNULL, capture_output=True,
            text=True, errors='replace', timeout=timeout or self.timeout)
        if done.returncode != 0:
            raise ServerError('pg_autoctl %s failed (%s):\n%s' % (
                ' '.join(args), done.returncode, done.stderr[-3000:]))
        return done.stdout

    def pgdata(self, name):
        return os.path.join(self.dir, name)

    def _run_keeper(self, name):
        log = open(os.path.join(self.dir, name + '.log'), 'ab')
        self.keepers[name] = subprocess.Popen(
            self._command(['pg_autoctl', 'run', '--pgdata',
                           self.pgdata(name)]),
            cwd=self.dir, env=self._env(), stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self):
        self._find_programs()
        parent = '/tmp' if os.geteuid() == 0 else None
        self.dir = tempfile.mkdtemp(prefix=PREFIX + 'autofailover-',
                                    dir=parent)
        os.chmod(self.dir, 0o755)
        with open(os.path.join(self.dir, 'owner.pid'), 'w') as f:
            f.write('%d\n' % os.getpid())
        if os.geteuid() == 0:
            import pwd
            entry = pwd.getpwnam(self.system_user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        remember(self)
        try:
            self._create()
        except BaseException:
            self.remove()
            raise

    def _create(self):
        common = ['--hostname', self.host, '--auth', 'trust', '--no-ssl']
        self.ports['monitor'] = free_port()
        self.autoctl('create', 'monitor', '--pgdata', self.pgdata('monitor'),
                     '--pgport', str(self.ports['monitor']), *common)
        self._run_keeper('monitor')
        monitor = 'postgres://autoctl_node@%s:%d/pg_auto_failover' \
            '?sslmode=disable' % (self.host, self.ports['monitor'])
        for index in range(1, self.node_count + 1):
            name = 'node%d' % index
            self.ports[name] = free_port()
            self.autoctl('create', 'postgres', '--pgdata', self.pgdata(name),
                         '--pgport', str(self.ports[name]), '--name', name,
                         '--monitor', monitor, *common)
            self._run_keeper(name)
            self.wait_for(lambda: len(self.settled()) == index)
        self._setup()

    def _setup(self):
        import psycopg2
        conn = psycopg2.connect(self.dsn('postgres', user='postgres'),
                                connect_timeout=10)
        conn.autocommit = True
        try:
            cur = conn.cursor()
            cur.execute('CREATE ROLE %s LOGIN PASSWORD %%s' % self.user,
                        (self.password,))
            for db in DATABASES:
                cur.execute("CREATE DATABASE %s OWNER %s ENCODING 'UTF8' "
                            "TEMPLATE template0" % (db, self.user))
        finally:
            conn.close()

    def admin(self, name, sql, database='postgres'):
        """Run *sql* as the superuser on node *name*, outside a
        transaction; its rows, if any."""
        import psycopg2
        conn = psycopg2.connect(host=self.host, port=self.ports[name],
                                user=self.system_user, dbname=database,
                                connect_timeout=10)
        conn.autocommit = True
        try:
            cur = conn.cursor()
            cur.execute(sql)
            return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    # -- what it is now ------------------------------------------------------

    def state(self):
        """``[{node: ..., reported: ..., assigned: ...}]`` of the data
        nodes, as the monitor knows them."""
        out = self.autoctl('show', 'state', '--json', '--pgdata',
                           self.pgdata('monitor'))
        return [{'name': node['nodename'], 'port': node['nodeport'],
                 'reported': node['current_group_state'],
                 'assigned': node['assigned_group_state'],
                 'lsn': node['reported_lsn'], 'tli': node['reported_tli']}
                for node in json.loads(out)]

    def settled(self):
        """The nodes whose reported state is their assigned one and is
        single (a formation of one), primary or secondary."""
        return [node for node in self.state()
                if node['reported'] == node['assigned']
                and node['reported'] in ('single', 'primary', 'secondary')]

    def primary(self):
        """The name of the node the monitor has as primary, or None."""
        for node in self.state():
            if node['assigned'] in ('primary', 'wait_primary') and \
                    node['reported'] in ('primary', 'wait_primary'):
                return node['name']
        return None

    def wait_for(self, predicate, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                if predicate():
                    return
            except ServerError:
                pass    # the monitor restarting, say
            if time.monotonic() > deadline:
                raise ServerError('the formation in %s did not settle within '
                                  '%ss: %s' % (self.dir, timeout or
                                               self.timeout, self.state()))
            time.sleep(0.5)

    def uri(self):
        """What ``pg_autoctl show uri --formation default`` prints."""
        return self.autoctl('show', 'uri', '--formation', 'default',
                            '--pgdata', self.pgdata('monitor')).strip()

    def client_uri(self, database=DATABASES[0]):
        """uri() for *database*, as the test user (the manager's names
        the formation's own database and no user)."""
        from urllib.parse import parse_qsl
        from urllib.parse import urlencode
        from urllib.parse import urlsplit
        parts = urlsplit(self.uri())
        query = dict(parse_qsl(parts.query), user=self.user,
                     password=self.password, connect_timeout='5')
        return parts._replace(path='/' + database,
                              query=urlencode(query)).geturl()

    def dsn(self, database=DATABASES[0], user=None):
        """A libpq connection string to *database* on whichever node is
        the primary (every node, target_session_attrs=read-write)."""
        nodes = sorted(name for name in self.ports if name != 'monitor')
        dsn = ('host=%s port=%s dbname=%s user=%s '
               'target_session_attrs=read-write connect_timeout=5' % (
                   ','.join([self.host] * len(nodes)),
                   ','.join(str(self.ports[name]) for name in nodes),
                   database, user or self.user))
        if user is None:
            dsn += ' password=%s' % self.password
        return dsn

    def logs(self, lines=30):
        """The last *lines* of each data node's keeper log."""
        result = {}
        for name in sorted(self.keepers):
            if name == 'monitor':
                continue
            with open(os.path.join(self.dir, name + '.log'), 'rb') as f:
                text = f.read().decode('utf-8', 'replace')
            result[name] = '\n'.join(text.splitlines()[-lines:])
        return result

    # -- faults --------------------------------------------------------------

    def failover(self):
        """``pg_autoctl perform failover``: returns once the monitor has
        a new primary."""
        # pg_autoctl's own wait (60 s) is not always enough on a loaded
        # machine: the old primary rejoins first (pg_rewind).
        self.autoctl('perform', 'failover', '--wait', str(self.timeout),
                     '--pgdata', self.pgdata('monitor'),
                     timeout=self.timeout + 30)

    def postmaster_pid(self, name):
        return read_pid(os.path.join(self.pgdata(name), 'postmaster.pid'))

    def crash(self, name):
        """SIGKILL the keeper of node *name* and its postmaster: the node
        is gone until rejoin(), and the monitor fails over. (Its
        postmaster alone SIGKILLed, the keeper restarts it in place, or
        the monitor fails over meanwhile: in 3 of 10 runs under load, the
        promoted node then stayed read-only in wait_primary, the old one
        in recovery, for over a minute.)"""
        keeper = self.keepers[name]
        os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()
        return self.kill_postmaster(name)

    def rejoin(self, name):
        """Start the keeper of a node crash() took down again: it
        rejoins the formation as a standby (pg_rewind)."""
        self._run_keeper(name)

    def kill_postmaster(self, name):
        """SIGKILL the postmaster of node *name*."""
        pid = self.postmaster_pid(name)
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)
        return pid

    def asynchronous(self, standby):
        """Replicate to *standby* asynchronously (its replication-quorum
        false): commits on the primary no longer wait for it, and a
        failover to it may lose the last of them."""
        primary = self.primary()
        self.autoctl('set', 'node', 'replication-quorum', 'false',
                     '--pgdata', self.pgdata(standby))
        # (The primary passes through apply_settings meanwhile.)
        self.wait_for(lambda: self.admin(
            primary, 'SHOW synchronous_standby_names') == [('',)]
            and self.primary() == primary)

    def quicken_health_checks(self):
        """HEALTH_CHECKS on the monitor: a primary lost is failed over in
        seconds."""
        for name, value in sorted(HEALTH_CHECKS.items()):
            self.admin('monitor', 'ALTER SYSTEM SET pgautofailover.%s = %d'
                       % (name, value))
        self.admin('monitor', 'SELECT pg_reload_conf()')

    def pause_replication(self, standby):
        """SIGSTOP the WAL receiver of *standby*: what the primary sends
        from now on waits unread in its socket. Returns its pid."""
        [(pid,)] = self.admin(standby, 'SELECT pid FROM pg_stat_wal_receiver')
        os.kill(pid, signal.SIGSTOP)
        return pid

    def crash_unreplicated(self, primary, receiver):
        """Lose node *primary* for good (its keeper and its postmaster
        SIGKILLed) and with it the WAL the stopped *receiver* (see
        pause_replication) had not read: SIGKILLed, its standby restarts
        from what it has replayed, and the monitor promotes it."""
        self.crash(primary)
        os.kill(receiver, signal.SIGKILL)

    # -- the end ---------------------------------------------------------------

    def remove(self):
        """Stop the keepers (each stops its server) and delete the
        directory."""
        for name in sorted(self.keepers, reverse=True):
            proc = self.keepers[name]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for name, proc in self.keepers.items():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self.dir is not None:
            for name in self.ports:
                pid = self.postmaster_pid(name)
                if pid is not None and alive(pid):
                    os.kill(pid, signal.SIGQUIT)
            shutil.rmtree(self.dir, ignore_errors=True)
        self.keepers = {}
        self.dir = None
