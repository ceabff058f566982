"""The bank-transfer workload (chaos) on a private Galera cluster.

Six writer processes, two per node: writer *i* commits on node
``i % 3 + 1`` and lists the others after it in its ``replica-conf``, so
that it moves to the next node when its own goes away and comes back
after ``replica-timeout``. The fault: a pack on node 1 a third of the
way in, while the writers commit on all nodes; or, with *kill*, node 3's
mariadbd SIGKILLed once every node's writers commit, restarted a few seconds
after that and waited for until it has rejoined (caught up by IST), and
then until its writers have come back to it.

At the end, besides chaos's checks (the total is conserved, every
acknowledged transfer is there once, no other is), every node holds the
same rows (counts and a checksum of object_state's rows), and the
summary says how many retries each error caused (certification
conflicts among them), how long node 3's writers went without
committing, and how long the node took to rejoin.
"""
import os
import time

from .chaos import Chaos

#: Seconds the writers run (RELSTORAGE_GALERA_SECONDS; 20 by default).
SECONDS = float(os.environ.get('RELSTORAGE_GALERA_SECONDS') or 20)
#: The writers' replica-timeout: they return to their own node so long
#: after leaving it.
REPLICA_TIMEOUT = 3
#: Seconds node 3 stays down.
DOWN = 4
#: Seconds the writers go on, with a node killed, beyond SECONDS: enough
#: for it to rejoin and for its writers to come back to it.
REJOIN_ALLOWANCE = 25

#: Per table: the row count and an order-free checksum of the rows.
CHECKSUMS = {
    'object_state': (
        'SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x2c, zoid, tid, '
        'MD5(COALESCE(state, 0x00))))), 0) FROM object_state'),
    'current_object': (
        'SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x2c, zoid, tid))), 0) '
        'FROM current_object'),
    'transactions': (
        'SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x2c, tid, packed, '
        'is_empty))), 0) FROM transactions'),
}


class GaleraBank(Chaos):

    def __init__(self, cluster, keep_history, seconds=SECONDS, kill=False):
        if kill:
            seconds += REJOIN_ALLOWANCE
        super().__init__('mysql', keep_history, seconds, writers=6,
                         readers=0, seed=None, server=cluster.nodes[0])
        self.cluster = cluster
        self.kill = kill
        self.faults = {'pack': 0, 'pack failed': 0, 'kill node': 0}
        self.node_of = {}
        self.events = {}
        nodes = cluster.nodes
        #: replica-conf per node: that node first, then the others.
        self.conf = [cluster.server_file(*(nodes[k:] + nodes[:k]),
                                         name='from-node%d' % (k + 1))
                     for k in range(len(nodes))]

    def start(self, role, index):
        node = index % len(self.cluster.nodes)
        server = self.cluster.nodes[node]
        self.host, self.port = server.host, str(server.port)
        self.options = {'replica_conf': self.conf[node],
                        'replica_timeout': REPLICA_TIMEOUT}
        super().start(role, index)
        self.node_of[list(self.procs)[-1]] = node + 1

    def factory(self):
        # Checks and packs on node 1 alone.
        saved, self.options = self.options, {}
        try:
            return super().factory()
        finally:
            self.options = saved

    def inject_faults(self):
        started = time.time()
        if self.kill:
            # Once every node's writers commit (starting takes a while).
            while (len(self.commit_times()) < len(self.cluster.nodes)
                   and time.time() < self.deadline - REJOIN_ALLOWANCE):
                time.sleep(0.2)
            time.sleep(1)
            self.kill_node(self.cluster.nodes[2])
        else:
            time.sleep(max(0.0, self.seconds / 3 - 1))
            self.pack()
            self.faults['pack'] += 1
        time.sleep(max(0.0, self.deadline - time.time()))
        self.events['ran s'] = round(time.time() - started, 1)

    def kill_node(self, node):
        self.killed_at = time.time()
        self.cluster.kill(node)
        killed = time.monotonic()
        self.faults['kill node'] += 1
        time.sleep(DOWN)
        restarted = time.monotonic()
        self.cluster.rejoin(node)
        synced = time.monotonic()
        self.events['node down s'] = round(synced - killed, 1)
        self.events['rejoin s'] = round(synced - restarted, 1)
        # Its writers come back to it after replica-timeout (at their
        # next transaction once that has passed).
        while time.time() < self.deadline - 1:
            if self._our_sessions(node):
                self.events['writers back after s'] = round(
                    time.monotonic() - synced, 1)
                break
            time.sleep(0.2)

    def _our_sessions(self, node):
        conn = node.connect()
        try:
            cur = conn.cursor()
            cur.execute("SELECT COUNT(*) FROM information_schema.processlist "
                        "WHERE user = 'relstoragetest' "
                        "AND id <> CONNECTION_ID()")
            return cur.fetchone()[0]
        finally:
            conn.close()

    def commit_times(self):
        """``{node: sorted times}`` of the commits of each node's
        writers."""
        times = {}
        for node in sorted(set(self.node_of.values())):
            found = super().commit_times(
                [name for name, of in self.node_of.items() if of == node])
            if found:
                times[node] = found
        return times

    def gaps(self):
        """Per node, the longest time its writers went without a
        commit once all had committed; with a node killed, the time
        between the last commit before the kill and the first after it."""
        result = {}
        for node, times in sorted(self.commit_times().items()):
            gaps = [b - a for a, b in zip(times, times[1:])]
            entry = {'longest gap s': round(max(gaps or [0]), 2)}
            killed = getattr(self, 'killed_at', None)
            if killed is not None:
                before = [t for t in times if t <= killed]
                after = [t for t in times if t > killed]
                if before and after:
                    entry['gap over the kill s'] = round(after[0] - before[-1],
                                                         2)
            result['node %d' % node] = entry
        return result

    def node_tables(self):
        """Per node: ``{table: (rows, checksum)}`` once all are synced."""
        self.cluster.wait_synced()
        database = 'relstoragetest_%s' % ('hp' if self.keep_history
                                          else 'hf')
        result = {}
        for node in self.cluster.nodes:
            conn = node.connect(database)
            try:
                cur = conn.cursor()
                cur.execute('SET SESSION wsrep_sync_wait = 1')
                tables = {}
                for table, sql in CHECKSUMS.items():
                    if table != 'object_state' and not self.keep_history:
                        continue  # history-free: object_state alone
                    cur.execute(sql)
                    tables[table] = tuple(int(v) for v in cur.fetchone())
                result['node %d' % node.number] = tables
            finally:
                conn.close()
        return result

    def run(self):
        summary = super().run()
        summary['commit gaps by node'] = self.gaps()
        summary['events'] = self.events
        summary['nodes'] = self.node_tables()
        return summary
