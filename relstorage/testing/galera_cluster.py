"""A private three-node MariaDB Galera cluster (see ``servers``).

Each node is a private MariaDB server (``mysql_server``): its own
temporary directory, its client port on 127.0.0.1, and three more free
loopback ports for the group communication (gcomm), incremental state
transfer (IST) and full state transfer (SST, by rsync). Node 1 bootstraps
the cluster (``--wsrep-new-cluster``) and creates the test account and
databases; nodes 2 and 3 join it and receive all of that by SST. Every
node is stopped and its directory deleted at exit, as any private server.

``cluster.kill(node)`` SIGKILLs a node's mariadbd; ``cluster.rejoin(node)``
starts it again (it recovers its position from InnoDB and catches up by
IST, or SST when the cluster no longer holds what it missed) and waits
until it is synced. The machine's own MariaDB is never touched.

Run as a script it starts a cluster, prints a ``replica-conf`` file and a
``<relstorage>`` section naming it, and removes it when interrupted.
"""
import os
import re
import shutil
import signal
import sys
import time

from .mysql_server import MySQLServer
from .processes import free_port
from .processes import lock
from .processes import run_until_interrupted
from .servers import DATABASES
from .servers import NotInstalled
from .servers import ServerError

#: Where Debian's galera-4 puts the wsrep provider.
PROVIDERS = ('/usr/lib/galera/libgalera_smm.so', '/usr/lib/libgalera_smm.so',
             '/usr/lib64/galera-4/libgalera_smm.so')
#: Seconds a node may take to join (state transfer included) and sync.
JOIN_TIMEOUT = 120
CLUSTER_NAME = 'relstorage-test'


def find_provider():
    for path in PROVIDERS:
        if os.path.exists(path):
            return path
    raise NotInstalled('the Galera provider (libgalera_smm.so) is not '
                       'installed (Debian: apt-get install galera-4 rsync)')


class GaleraNode(MySQLServer):
    """One node of *cluster* (numbered from 1)."""

    prefix = 'relstorage-private-galera-'

    def __init__(self, cluster, number, **kw):
        super().__init__(timeout=JOIN_TIMEOUT, **kw)
        self.cluster = cluster
        self.number = number
        self.gcomm_port = self.ist_port = self.sst_port = None
        self.bootstrap = False
        #: The position --wsrep-recover found after a crash, if any.
        self.start_position = None

    def _find_programs(self):
        super()._find_programs()
        find_provider()
        if not shutil.which('rsync'):
            raise NotInstalled('rsync is needed for the Galera state '
                               'transfers (Debian: apt-get install rsync)')

    def _initialise(self):
        super()._initialise()
        self.gcomm_port = self.gcomm_port or free_port()
        self.ist_port, self.sst_port = free_port(), free_port()

    @property
    def extra_args(self):
        cluster = self.cluster
        options = ('gmcast.listen_addr=tcp://127.0.0.1:%d; '
                   'ist.recv_addr=127.0.0.1:%d; gcache.size=128M; '
                   'evs.suspect_timeout=PT3S; evs.inactive_timeout=PT6S; '
                   'evs.install_timeout=PT5S; evs.keepalive_period=PT1S; '
                   'pc.wait_prim_timeout=PT30S'
                   % (self.gcomm_port, self.ist_port))
        args = ['--wsrep-on=ON',
                '--wsrep-provider=%s' % find_provider(),
                '--wsrep-cluster-name=%s' % CLUSTER_NAME,
                '--wsrep-cluster-address=gcomm://%s' % ','.join(
                    '127.0.0.1:%d' % node.gcomm_port
                    for node in cluster.nodes if node.gcomm_port),
                '--wsrep-node-name=node%d' % self.number,
                '--wsrep-node-address=127.0.0.1:%d' % self.gcomm_port,
                '--wsrep-node-incoming-address=127.0.0.1:%d' % self.port,
                '--wsrep-provider-options=%s' % options,
                '--wsrep-sst-method=rsync',
                '--wsrep-sst-receive-address=127.0.0.1:%d' % self.sst_port,
                '--wsrep-slave-threads=2',
                '--binlog-format=ROW',
                '--innodb-autoinc-lock-mode=2',
                '--default-storage-engine=InnoDB']
        if self.bootstrap:
            args.append('--wsrep-new-cluster')
        if self.start_position:
            args.append('--wsrep-start-position=%s' % self.start_position)
        return args

    def _launch(self):
        # The gcomm and state-transfer ports were chosen with the data;
        # a first start that has to take another client port keeps them.
        self._recover_position()
        super()._launch()

    def _recover_position(self):
        """After a crash grastate.dat says nothing of the position: ask
        InnoDB (``--wsrep-recover``), so that the node catches up by IST
        rather than by a full copy."""
        self.start_position = None
        path = os.path.join(self.data_dir, 'grastate.dat')
        try:
            with open(path) as f:
                state = f.read()
        except OSError:
            return
        if not re.search(r'^seqno:\s+-1\s*$', state, re.M):
            return
        log = os.path.join(self.dir, 'recover.log')
        args = [self._daemon, '--no-defaults', '--datadir=%s' % self.data_dir,
                '--log-error=%s' % log, '--skip-networking',
                '--socket=%s' % os.path.join(self.dir, 'recover.sock'),
                '--innodb-log-file-size=48M'] + self._user_option() + [
                    arg for arg in self.extra_args
                    if not arg.startswith(('--wsrep-new-cluster',
                                           '--wsrep-start-position'))] + [
                    '--wsrep-recover']
        self._run(args, 'mariadbd --wsrep-recover')
        with open(log, errors='replace') as f:
            found = re.findall(r'WSREP: Recovered position:?\s+(\S+:-?\d+)',
                               f.read())
        if found and not found[-1].endswith(':-1'):
            self.start_position = found[-1]

    def _setup(self):
        if self.bootstrap:
            super()._setup()

    def wsrep_status(self):
        """``{name: value}`` of the node's wsrep status variables."""
        return dict(self.admin("SHOW GLOBAL STATUS LIKE 'wsrep_%'"))

    def synced(self):
        try:
            status = self.wsrep_status()
        except Exception:  # noqa: BLE001 -- not answering yet
            return False
        return (status.get('wsrep_local_state_comment') == 'Synced'
                and status.get('wsrep_cluster_status') == 'Primary'
                and status.get('wsrep_ready') == 'ON')

    def wait_synced(self, timeout=JOIN_TIMEOUT):
        deadline = time.monotonic() + timeout
        while not self.synced():
            if time.monotonic() > deadline:
                raise self._error('was not synced with the cluster within '
                                  '%ss' % timeout)
            if not self.running():
                raise self._error('exited while joining the cluster')
            time.sleep(0.2)

    def kill(self):
        """SIGKILL mariadbd (no shutdown: a crash)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        self._proc = None


class GaleraCluster:
    """Three GaleraNodes on loopback; node 1 bootstraps it."""

    def __init__(self, size=3):
        self.nodes = [GaleraNode(self, n) for n in range(1, size + 1)]

    def start(self):
        try:
            first = self.nodes[0]
            for node in self.nodes:
                node._check_installed()
            # Every node's gcomm port is chosen before the first starts,
            # so that each one's cluster address names them all.
            for node in self.nodes:
                node.gcomm_port = node.gcomm_port or free_port()
            first.bootstrap = True
            first.start()
            first.bootstrap = False
            first.wait_synced()
            for node in self.nodes[1:]:
                node.start()
                node.wait_synced()
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self):
        for node in reversed(self.nodes):
            try:
                node.remove()
            except Exception as e:  # noqa: BLE001 -- remove the others too
                sys.stderr.write('galera_cluster: could not remove %r: %s\n'
                                 % (node, e))

    def kill(self, node):
        node.kill()

    def rejoin(self, node, timeout=JOIN_TIMEOUT):
        """Start a killed or stopped *node* again; return once synced."""
        node.start()
        node.wait_synced(timeout)

    def server_file(self, *nodes, name=None):
        """A ``replica-conf`` file (in node 1's directory) listing
        *nodes* (default: all), in that order."""
        nodes = nodes or self.nodes
        name = name or 'nodes-' + '-'.join(str(n.number) for n in nodes)
        path = os.path.join(self.nodes[0].dir, name + '.conf')
        with open(path, 'w') as f:
            f.write('# the Galera nodes, in order of preference\n')
            for node in nodes:
                f.write('%s:%d\n' % (node.host, node.port))
        return path

    def wait_synced(self, timeout=JOIN_TIMEOUT):
        for node in self.nodes:
            if node.running():
                node.wait_synced(timeout)


_clusters = {}


def galera_cluster():
    """The shared, started cluster of this process (tests that kill a node
    rejoin it before they end)."""
    with lock:
        cluster = _clusters.get('shared')
        if cluster is None:
            cluster = _clusters['shared'] = GaleraCluster().start()
        for node in cluster.nodes:
            if not node.running():
                cluster.rejoin(node)
    return cluster


def main():
    """Start a cluster; print how to use it; wait for ^C."""
    try:
        cluster = GaleraCluster().start()
    except (NotInstalled, ServerError) as e:
        print('no cluster: %s' % e)
        return 1
    conf = cluster.server_file()
    first = cluster.nodes[0]
    print('Galera nodes: %s\n  %s\n<relstorage>\n  replica-conf %s\n'
          '  <mysql>\n    host %s\n    port %d\n    db %s\n'
          '    user relstoragetest\n    passwd relstoragetest\n  </mysql>\n'
          '</relstorage>' % (
              ', '.join('%s:%d' % (n.host, n.port) for n in cluster.nodes),
              conf, conf, first.host, first.port, DATABASES[0]))
    run_until_interrupted('\nRunning; ^C (or SIGTERM) stops and removes it.')
    cluster.remove()
    return 0


if __name__ == '__main__':
    sys.exit(main())
