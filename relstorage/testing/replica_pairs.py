"""Replicated pairs of private servers: a primary and a replica of it.

Built from ``private_servers`` (a temporary directory, free ports on
127.0.0.1, removed at exit; the machine's own servers are never touched):

* PostgreSQL: a primary and a hot standby made with ``pg_basebackup -R``,
  streaming; with *synchronous* the primary waits at each commit until the
  standby has the transaction's WAL (``synchronous_standby_names``).
* MariaDB: a primary writing a row-based binlog and a read-only replica
  following it by GTID; with *synchronous*, semi-synchronous replication
  (a commit returns once the replica has received it).

``pair.promote()`` turns the replica into a read-write primary,
``pair.delay(seconds)`` holds back replay on the replica, and
``pair.caught_up()`` waits until it has replayed everything.

Run as a script (``scripts/testdb.sh --replicas``) it starts one pair of
each kind, prints the server files and a ``<relstorage>`` section to try
them with, and removes them when interrupted.
"""
import math
import os
import sys
import time

from .mysql_server import MySQLServer
from .postgresql_server import PostgreSQLServer
from .processes import lock
from .processes import run_until_interrupted
from .servers import DATABASES
from .servers import NotInstalled
from .servers import ServerError

#: Seconds a replica may take to replay what its primary has.
CATCH_UP = 60


class PostgreSQLPrimary(PostgreSQLServer):

    prefix = 'relstorage-private-primary-'

    def __init__(self, synchronous=False, **kw):
        super().__init__(**kw)
        self.synchronous = synchronous
        self.extra_settings = {
            'wal_level': 'replica',
            'max_wal_senders': '5',
            'wal_keep_size': "'256MB'",
            'hot_standby': 'on',
            # Else WAL goes out only when the WAL writer flushes it (every
            # 200 ms): replicas would lag by that much. (fsync stays off.)
            'synchronous_commit': 'on',
        }

    def after_standby(self):
        if self.synchronous:
            # Only now: with no standby yet, every commit would wait.
            self.set('synchronous_standby_names', '*')


class PostgreSQLStandby(PostgreSQLServer):
    """A hot standby of *primary*, copied with pg_basebackup."""

    prefix = 'relstorage-private-standby-'

    def __init__(self, primary, **kw):
        super().__init__(**kw)
        self.primary = primary

    def _initialise(self):
        self._run([self._program('pg_basebackup'),
                   '-h', self.primary.host, '-p', str(self.primary.port),
                   '-U', self.admin_user, '-D', self.data_dir,
                   '-R', '-X', 'stream', '--no-sync', '-c', 'fast'],
                  'pg_basebackup', as_server_user=True)
        # The copy has the primary's settings: its own socket directory,
        # and feedback so that the primary's cleanup does not cancel the
        # standby's long snapshots.
        with open(os.path.join(self.data_dir, 'postgresql.conf'), 'a') as f:
            f.write("\nunix_socket_directories = '%s'\n"
                    'hot_standby_feedback = on\n' % self.dir)

    def _setup(self):
        """The account and databases come from the primary."""

    def _find_bindir(self):
        return self.primary._bindir

    def promote(self):
        self._run([self._program('pg_ctl'), '-D', self.data_dir,
                   '-w', '-t', str(self.timeout), 'promote'],
                  'pg_ctl promote', as_server_user=True)

class MariaDBPrimary(MySQLServer):

    prefix = 'relstorage-private-primary-'

    def __init__(self, synchronous=False, **kw):
        super().__init__(**kw)
        self.synchronous = synchronous
        self.extra_args = ['--log-bin=primary-bin', '--server-id=1',
                           '--binlog-format=ROW']
        if synchronous:
            self.extra_args += ['--rpl-semi-sync-master-wait-point=AFTER_SYNC',
                                '--rpl-semi-sync-master-timeout=30000']

    def after_standby(self):
        if self.synchronous:
            # Only now: with no replica yet, every commit would wait.
            self.admin('SET GLOBAL rpl_semi_sync_master_enabled = ON')

    def _setup(self):
        super()._setup()
        for host in ('%', 'localhost', '127.0.0.1'):
            self.admin("CREATE USER IF NOT EXISTS 'repl'@'%s' "
                       "IDENTIFIED BY 'repl'" % host,
                       "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%s'" % host)

    def binlog_position(self):
        return self.admin('SELECT @@gtid_binlog_pos')[0][0]


class MariaDBReplica(MySQLServer):
    """A read-only replica of *primary*, by GTID from its first binlog
    (which holds the account and databases the primary made)."""

    prefix = 'relstorage-private-replica-'

    def __init__(self, primary, synchronous=False, **kw):
        super().__init__(**kw)
        self.primary = primary
        self.extra_args = ['--server-id=2', '--read-only=ON',
                           '--relay-log=replica-relay', '--log-bin=replica-bin',
                           '--log-slave-updates', '--binlog-format=ROW']
        if synchronous:
            self.extra_args.append('--rpl-semi-sync-slave-enabled=ON')

    def _setup(self):
        self.admin("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, "
                   "MASTER_USER='repl', MASTER_PASSWORD='repl', "
                   'MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1'
                   % (self.primary.host, self.primary.port),
                   'START SLAVE')

    def status(self):
        conn = self._admin_connect()
        try:
            import MySQLdb.cursors
            cur = conn.cursor(MySQLdb.cursors.DictCursor)
            cur.execute('SHOW SLAVE STATUS')
            return cur.fetchone() or {}
        finally:
            conn.close()


class Pair:
    """A primary and its replica, started together."""

    def __init__(self, kind, synchronous=False):
        self.kind = kind
        self.synchronous = synchronous
        if kind == 'postgresql':
            self.primary = PostgreSQLPrimary(synchronous)
            self.replica = PostgreSQLStandby(self.primary)
        elif kind == 'mysql':
            self.primary = MariaDBPrimary(synchronous)
            self.replica = MariaDBReplica(self.primary, synchronous)
        else:
            raise ValueError('kind must be postgresql or mysql, not %r'
                             % (kind,))

    def start(self):
        try:
            self.primary.start()
            self.replica.start()
            self.primary.after_standby()
            self.caught_up()
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self):
        for server in (self.replica, self.primary):
            try:
                server.remove()
            except Exception as e:  # noqa: BLE001 -- remove the other too
                sys.stderr.write('replica_pairs: could not remove %r: %s\n'
                                 % (server, e))

    @property
    def servers(self):
        return self.primary, self.replica

    def line(self, server):
        """The server-file line naming *server*."""
        return '%s:%d' % (server.host, server.port)

    def server_file(self, *servers, name=None):
        """A server file (in the primary's directory) listing *servers*."""
        name = name or '-'.join(
            'primary' if s is self.primary else 'replica' for s in servers)
        path = os.path.join(self.primary.dir, name + '.conf')
        with open(path, 'w') as f:
            f.write('# written by the tests\n\n')
            for server in servers:
                f.write(self.line(server) + '\n')
        return path

    def caught_up(self, timeout=CATCH_UP):
        """Wait until the replica has replayed all the primary has."""
        deadline = time.monotonic() + timeout
        if self.kind == 'postgresql':
            with self.primary._admin_connect() as conn:
                cur = conn.cursor()
                cur.execute('SELECT pg_current_wal_lsn()')
                target = cur.fetchone()[0]
            conn.close()
            while time.monotonic() < deadline:
                conn = self.replica._admin_connect()
                try:
                    cur = conn.cursor()
                    cur.execute('SELECT pg_last_wal_replay_lsn() >= %s',
                                (target,))
                    if cur.fetchone()[0]:
                        return
                finally:
                    conn.close()
                time.sleep(0.05)
        else:
            target = self.primary.binlog_position()
            rows = self.replica.admin(
                "SELECT MASTER_GTID_WAIT('%s', %d)" % (target, timeout))
            if rows and rows[0][0] == 0:
                return
        raise ServerError('the replica %r did not catch up with %r within '
                          '%ss' % (self.replica, self.primary, timeout))

    def delay(self, seconds):
        """Hold back replay on the replica by at least *seconds* (0: none).

        PostgreSQL holds a transaction back by the delay to the
        millisecond. MariaDB counts ``MASTER_DELAY`` in whole seconds from
        the event's time, itself kept in whole seconds: a delay of *n*
        holds a commit back by anything above *n - 1* up to *n* seconds
        (next to nothing for ``n = 1`` when the commit came late in its
        second), so it is given one second more than asked for."""
        if self.kind == 'postgresql':
            self.replica.set('recovery_min_apply_delay', '%dms'
                             % int(seconds * 1000))
        else:
            whole = math.ceil(seconds) + 1 if seconds > 0 else 0
            self.replica.admin('STOP SLAVE',
                               'CHANGE MASTER TO MASTER_DELAY=%d' % whole,
                               'START SLAVE')

    def promote(self, timeout=CATCH_UP):
        """Make the replica a read-write primary (after it has replayed
        what it received)."""
        if self.kind == 'postgresql':
            self.replica.promote()
            return
        replica = self.replica
        replica.admin('STOP SLAVE IO_THREAD')
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = replica.status()
            if (status.get('Slave_SQL_Running') != 'Yes'
                    or (status.get('Relay_Master_Log_File')
                        == status.get('Master_Log_File')
                        and status.get('Exec_Master_Log_Pos')
                        == status.get('Read_Master_Log_Pos'))):
                break
            time.sleep(0.05)
        replica.admin('STOP SLAVE', 'RESET SLAVE ALL',
                      'SET GLOBAL read_only = OFF')


_pairs = {}


def replica_pair(kind, synchronous=False):
    """The shared, started pair of *kind* (one per process and kind and
    *synchronous*); tests that promote or stop a server make their own
    with ``Pair(kind).start()`` and remove it."""
    key = (kind, synchronous)
    with lock:
        pair = _pairs.get(key)
        if pair is None:
            pair = _pairs[key] = Pair(kind, synchronous).start()
        for server in pair.servers:
            server.start()
    return pair


def main():
    """Start a pair of each kind; print how to use them; wait for ^C."""
    pairs = []
    for kind in ('postgresql', 'mysql'):
        try:
            pairs.append(Pair(kind).start())
        except (NotInstalled, ServerError) as e:
            print('%s: no pair: %s' % (kind, e))
    for pair in pairs:
        rw = pair.server_file(pair.primary, pair.replica, name='replica')
        ro = pair.server_file(pair.replica, name='ro-replica')
        if pair.kind == 'postgresql':
            section = ('  <postgresql>\n    dsn host=%s port=%d '
                       'dbname=%s user=relstoragetest\n  </postgresql>'
                       % (pair.primary.host, pair.primary.port, DATABASES[0]))
        else:
            section = ('  <mysql>\n    host %s\n    port %d\n    db %s\n'
                       '    user relstoragetest\n    passwd relstoragetest\n'
                       '  </mysql>' % (pair.primary.host, pair.primary.port,
                                       DATABASES[0]))
        print('\n%s: primary %s, replica %s\n  %s\n  %s\n'
              '<relstorage>\n  replica-conf %s\n  ro-replica-conf %s\n%s\n'
              '</relstorage>' % (pair.kind, pair.line(pair.primary),
                                 pair.line(pair.replica), rw, ro, rw, ro,
                                 section))
    if not pairs:
        return 1
    run_until_interrupted('\nRunning; ^C (or SIGTERM) stops and removes '
                          'them.')
    for pair in pairs:
        pair.remove()
    return 0


if __name__ == '__main__':
    sys.exit(main())
