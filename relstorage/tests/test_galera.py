"""A private three-node MariaDB Galera cluster as the database
(galera_cluster): the bank-transfer workload with writers on every node
(galera_bank), with a pack on node 1 while they commit, and again with
node 3 SIGKILLed and rejoining; what the cluster locks, refuses and
reads."""
import json
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.exceptions import ClusterConflict
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import require_galera

from .galera_bank import GaleraBank


@pytest.fixture(scope='module')
def cluster():
    return require_galera()


def run_bank(cluster, keep_history, kill):
    bank = GaleraBank(cluster, keep_history, kill=kill)
    try:
        summary = bank.run()
    finally:
        bank.remove()
    print(json.dumps(summary))
    assert summary['problems'] == [], summary
    # A raw driver error (or any the storage did not name) would be here.
    assert summary['errors seen by workers'] == {}, summary
    assert summary['faults']['pack'] == (0 if kill else 1)
    assert summary['faults']['pack failed'] == 0, summary
    assert summary['transfers committed'] > 30, summary
    nodes = summary['nodes']
    assert len(set(json.dumps(t, sort_keys=True) for t in nodes.values())) \
        == 1, nodes
    # Writers on three nodes met the cluster's refusals, and retried.
    assert summary['retries by error'].get('ClusterConflict', 0) > 0, summary
    return summary


def test_bank_on_every_node_with_a_pack(cluster):
    run_bank(cluster, keep_history=False, kill=False)


def test_bank_with_a_node_killed_and_rejoining(cluster):
    summary = run_bank(cluster, keep_history=True, kill=True)
    events = summary['events']
    assert summary['faults']['kill node'] == 1
    # Node 3's writers went on on the other nodes (once the cluster had
    # seen the node go), not only once it was back.
    gap = summary['commit gaps by node']['node 3']['gap over the kill s']
    assert gap < events['node down s'], summary
    assert 'writers back after s' in events, summary


def _db(cluster, node, keep_history=True):
    factory = DatabaseFactory('mysql', keep_history, server=node, child=True)
    return ZODB.DB(factory.storage())


def test_commits_from_two_nodes_are_refused_whole(cluster):
    """Two transactions that change the same object, voted on nodes 1
    and 2 before either commits (each node locked the row for its own):
    the one that finishes second is refused by the cluster (applying the
    first aborted it; nothing of it committed), and a retry succeeds."""
    first, second = cluster.nodes[:2]
    DatabaseFactory('mysql', True, server=first).storage(zap=True).close()
    db1, db2 = _db(cluster, first), _db(cluster, second)
    try:
        with db1.transaction() as conn:
            conn.root()['a'] = PersistentMapping(n=0)
        time.sleep(0.5)
        tms = [transaction.TransactionManager() for _ in range(2)]
        conns = [db.open(transaction_manager=tm)
                 for db, tm in zip((db1, db2), tms)]
        for conn in conns:
            conn.root()['a']['n'] += 1
        txns = [tm.get() for tm in tms]
        for conn, txn in zip(conns, txns):
            conn.tpc_begin(txn)
            conn.commit(txn)
            conn.tpc_vote(txn)
        conns[0].tpc_finish(txns[0])
        with pytest.raises(ClusterConflict):
            conns[1].tpc_finish(txns[1])
        conns[1].tpc_abort(txns[1])
        for tm in tms:
            tm.abort()
        for conn in conns:
            conn.close()
        # The retry, on node 2, sees node 1's commit and goes through.
        with db2.transaction() as conn:
            assert conn.root()['a']['n'] == 1
            conn.root()['a']['n'] += 1
        with db1.transaction() as conn:
            assert conn.root()['a']['n'] == 2
    finally:
        db1.close()
        db2.close()


def test_shootout_contender_on_the_cluster(cluster, tmp_path):
    """relstorage_speedtest.shootout --galera's contender commits through
    zodbshootout on the cluster (a short run: figures are not judged)."""
    import argparse
    import os
    from relstorage_speedtest import shootout
    args = shootout.parse_args(['--processes', '1', '--values', '1',
                                '--objects', '20'])
    args = argparse.Namespace(**dict(vars(args), prefix='rsshoottest'))
    contender = shootout.GaleraContender(cluster, args, str(tmp_path),
                                         dict(os.environ))
    contender.create_databases(['hf'])
    result = contender.run('mysql', 'hf', 1, ['add'])
    assert 'error' not in result, result
    assert result['add'] > 0
    table = shootout.summarise({('mysql', 'hf', 1): {
        'ours': [result], 'galera': [result]}}, ['add'])
    assert table[0]['galera'][0] == 1.0


def test_a_snapshot_waits_once_for_the_cluster(cluster):
    """A load session's snapshot begins once node 2 has applied what the
    cluster committed before it (one causal read), and the reads inside
    it do not wait again; a store session's reads all wait."""
    node = cluster.nodes[1]
    adapter = DatabaseFactory('mysql', False, server=node,
                              child=True).adapter()

    def causal_reads():
        return int(node.wsrep_status()['wsrep_causal_reads'])
    try:
        assert adapter.server.flavour == 'MariaDB Galera'
        session = adapter.connect(for_store=False)
        before = causal_reads()
        session.begin(adapter.load_begin_sql)
        for _ in range(3):
            assert session.scalar('SELECT 1') == 1
        session.end_read()
        assert causal_reads() - before == 1
        session.close()
        store = adapter.connect(for_store=True)
        before = causal_reads()
        for _ in range(3):
            store.scalar('SELECT 1')
        assert causal_reads() - before == 3
        store.close()
    finally:
        adapter.close()


def test_a_pack_leaves_the_cluster_locks_free(cluster):
    from ZODB.serialize import referencesf
    node = cluster.nodes[0]
    storage = DatabaseFactory('mysql', False, server=node).storage(zap=True)
    try:
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            conn.root()['a'] = PersistentMapping()
        storage.pack(time.time(), referencesf)
        storage.pack(time.time(), referencesf)  # the lease was given back
    finally:
        db.close()
    conn = node.connect('relstoragetest_hf')
    try:
        cur = conn.cursor()
        cur.execute("SELECT name, holder FROM cluster_lock "
                    "WHERE name IN ('pack', 'schema') ORDER BY name")
        assert cur.fetchall() == (('pack', ''), ('schema', ''))
    finally:
        conn.close()


def test_a_pack_batch_the_cluster_refuses_is_done_again(cluster):
    """A pack batch on node 1 whose commit the cluster refuses (node 2
    committed the commit row after node 1 had locked its own copy:
    certification refuses node 1's commit whole) is aborted and run
    again by the node's pack writer; the second one commits."""
    first, second = cluster.nodes[:2]
    storage = DatabaseFactory('mysql', False, server=first).storage(
        zap=True)
    storage.close()
    adapter = DatabaseFactory('mysql', False, server=first).adapter()
    other = second.connect('relstoragetest_hf')
    session = adapter.open_pack_writer()
    calls = []
    serial = ("SELECT serial FROM cluster_lock WHERE name = 'commit'")
    try:
        assert session.lock_pack()

        def attempt():
            calls.append(session.begin_batch())
            if len(calls) == 1:
                cur = other.cursor()
                cur.execute("UPDATE cluster_lock SET serial = serial + 1 "
                            "WHERE name = 'commit'")
                other.commit()
            session.commit_batch()
            return len(calls)
        before = other.cursor()
        before.execute(serial)
        (start,), = before.fetchall()
        other.commit()
        assert session.run_batch(attempt) == 2
        assert session.BUSY not in calls
        time.sleep(0.5)  # node 2 applies node 1's commit
        after = other.cursor()
        after.execute(serial)
        # Node 2's bump and the batch that went through; not the refused.
        assert after.fetchall() == ((start + 2,),)
        other.commit()
    finally:
        session.close()
        other.close()
        adapter.close()


def test_a_pack_whose_lease_was_taken_stops_at_its_next_batch(cluster):
    """The cluster's pack lock is a lease each batch renews: a pack
    stopped past it, whose lease another pack (on another node, whose
    own lock is no obstacle) then took, stops before its next batch and
    removes nothing more."""
    from ZODB.serialize import referencesf
    from relstorage.exceptions import PackLockLost
    from relstorage.storage.pack.pack import STEP
    node = cluster.nodes[0]
    storage = DatabaseFactory('mysql', False, server=node).storage(
        zap=True, pack_batch_timeout=0.0001)
    made, kept = 3 * STEP + 100, 100
    conn = node.connect('relstoragetest_hf')
    cur = conn.cursor()

    def rows():
        conn.commit()   # a new snapshot
        cur.execute('SELECT COUNT(*) FROM object_state')
        return cur.fetchone()[0]
    db = ZODB.DB(storage)
    try:
        with db.transaction() as c:
            for i in range(made):
                c.root()['o%d' % i] = PersistentMapping(i=i)
        with db.transaction() as c:
            for i in range(kept, made):
                del c.root()['o%d' % i]
        taken = []

        def progress(done, total):
            if not taken:
                # Another pack takes the lease, as if this one's lapsed.
                cur.execute("UPDATE cluster_lock SET holder = 'another', "
                            'expires = UNIX_TIMESTAMP() + 300 '
                            "WHERE name = 'pack'")
                conn.commit()
                taken.append(rows())
        with pytest.raises(PackLockLost, match='lost to another pack'):
            storage.pack_with_result(time.time() + 1, referencesf,
                                     progress=progress)
        # One batch removed STEP objects; the next one removed nothing.
        assert taken == [made + 1 - STEP]
        assert rows() == taken[0]
        # The other pack's lease is left as it is.
        cur.execute("SELECT holder FROM cluster_lock WHERE name = 'pack'")
        assert cur.fetchone()[0] == 'another'
        cur.execute("UPDATE cluster_lock SET holder = '', expires = 0 "
                    "WHERE name = 'pack'")
        conn.commit()
        # Once it is free, a pack finishes the job.
        storage.pack(time.time() + 1, referencesf)
        assert rows() == kept + 1
        with db.transaction() as c:
            assert sorted(c.root()) == sorted('o%d' % i for i in range(kept))
    finally:
        db.close()
        conn.close()
