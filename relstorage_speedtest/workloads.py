"""The measured work. Each function here runs in a worker process of its
own (several at once for the concurrency levels), opens the contender's
database from its config text, and returns plain numbers; what it reads
back is checked against what it wrote, and any difference aborts the run
with SpeedTestError."""
import time

import transaction
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping

#: Bytes of payload per object (plus the pickle's own overhead).
PAYLOAD = 100


class SpeedTestError(Exception):
    """What was read back differs from what was written."""


def value(tag, t, i):
    text = '%s-%d-%d:' % (tag, t, i)
    return text + 'x' * max(0, PAYLOAD - len(text))


def empty(contender):
    """Remove everything from the contender's database, where the storage
    can (RelStorage); other storages start from their own empty files."""
    db = contender.open()
    try:
        zap = getattr(db.storage, 'zap_all', None)
        if zap is not None:
            zap()
    finally:
        db.close()


def write_read(contender, tag, objects, transactions, barrier=None):
    """Write *objects* new objects per transaction, *transactions* times,
    then read each transaction's objects back in a fresh connection.
    Returns ``{'write': [seconds...], 'read': [seconds...]}``."""
    db = contender.open()
    try:
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        # Workers starting together all change the root: retry conflicts.
        for attempt in tm.attempts(50):
            with attempt:
                conn.root()[tag] = OOBTree()
        if barrier is not None:
            barrier.wait(300)  # every worker starts measuring together
        writes = []
        for t in range(transactions):
            start = time.perf_counter()
            tm.begin()
            tree = conn.root()[tag]
            for i in range(objects):
                tree[t, i] = PersistentMapping(v=value(tag, t, i))
            tm.commit()
            writes.append(time.perf_counter() - start)
        conn.close()
        if barrier is not None:
            barrier.wait(300)
        reads = []
        for t in range(transactions):
            # A fresh connection: nothing of the object cache carries over;
            # the storage's own cache is used as configured.
            db.cacheMinimize()
            conn = db.open(transaction_manager=tm)
            conn.cacheMinimize()
            start = time.perf_counter()
            tm.begin()
            tree = conn.root()[tag]
            for i in range(objects):
                if tree[t, i]['v'] != value(tag, t, i):
                    raise SpeedTestError(
                        '%s: object %d of transaction %d read back wrong'
                        % (contender.name, i, t))
            reads.append(time.perf_counter() - start)
            tm.abort()
            conn.close()
        return {'write': writes, 'read': reads}
    finally:
        db.close()


def growth(contender, total, step):
    """Add one object per transaction until *total*; the seconds each
    further *step* objects took."""
    db = contender.open()
    try:
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        with tm:
            conn.root()['growth'] = OOBTree()
        times = []
        start = time.perf_counter()
        for i in range(total):
            tm.begin()
            conn.root()['growth'][i] = PersistentMapping(
                v=value('growth', 0, i))
            tm.commit()
            if (i + 1) % step == 0:
                now = time.perf_counter()
                times.append(now - start)
                start = now
        conn.cacheMinimize()
        tm.begin()
        tree = conn.root()['growth']
        if len(tree) != total or any(
                tree[i]['v'] != value('growth', 0, i)
                for i in range(0, total, max(1, total // 1000))):
            raise SpeedTestError('%s: the growth test read back wrong'
                                 % contender.name)
        tm.abort()
        conn.close()
        return times
    finally:
        db.close()


def _stored_pickles(session, rows):
    """*rows* pickles the write test stored (repeated if fewer)."""
    pickles = [bytes(r[0]) for r in session.fetchall(
        'SELECT state FROM object_state WHERE state IS NOT NULL '
        'ORDER BY zoid DESC LIMIT %d' % rows)]
    if not pickles:
        return None
    return (pickles * (rows // len(pickles) + 1))[:rows]


def raw_limit(contender, rows, transactions):
    """The driver's limit: plain multi-row INSERTs of the pickles the write
    test stored, one transaction per *rows* rows, into a scratch table of
    the same database; and, for comparison, the same pickles stored as
    new objects through the storage's own API (tpc_begin, new_oid and
    store for each, tpc_vote, tpc_finish), which leaves out what ZODB
    does before (pickling). ``{'raw': [seconds...], 'storage':
    [seconds...]}``, or None when the contender is not a RelStorage."""
    db = contender.open()
    try:
        storage = db.storage
        adapter = getattr(storage, 'adapter', None)
        if adapter is None:
            return None
        session = adapter.connect(for_store=True)
        try:
            pickles = _stored_pickles(session, rows)
            if pickles is None:
                return None
            raw = _raw_inserts(adapter, session, pickles, transactions)
        finally:
            session.close()
        return {'raw': raw,
                'storage': _storage_writes(storage, pickles, transactions)}
    finally:
        db.close()


def _raw_inserts(adapter, session, pickles, transactions):
    types = adapter.types
    session.execute('DROP TABLE IF EXISTS speedtest_raw')
    session.execute(
        'CREATE TABLE speedtest_raw (zoid %s NOT NULL PRIMARY KEY, '
        'tid %s NOT NULL, state %s)'
        % (types.bigint, types.bigint, types.blob))
    times = []
    oid = 0
    values = ', '.join(['(%s, %s, %s)'] * len(pickles))
    for t in range(transactions):
        params = []
        for state in pickles:
            oid += 1
            params.extend((oid, t + 1, state))
        start = time.perf_counter()
        session.begin(adapter.store_begin_sql)
        session.execute('INSERT INTO speedtest_raw (zoid, tid, '
                        'state) VALUES ' + values, params)
        session.commit()
        times.append(time.perf_counter() - start)
    session.execute('DROP TABLE speedtest_raw')
    return times


def _storage_writes(storage, pickles, transactions):
    from ZODB.Connection import TransactionMetaData
    times = []
    for _ in range(transactions):
        start = time.perf_counter()
        txn = TransactionMetaData()
        storage.tpc_begin(txn)
        stored = []
        for state in pickles:
            oid = storage.new_oid()
            storage.store(oid, None, state, '', txn)
            stored.append(oid)
        storage.tpc_vote(txn)
        storage.tpc_finish(txn)
        times.append(time.perf_counter() - start)
        # What was stored is what reads back.
        for oid, state in zip(stored[::97], pickles[::97]):
            if storage.load(oid)[0] != state:
                raise SpeedTestError('object 0x%x read back differs from '
                                     'what was stored' % int.from_bytes(
                                         oid, 'big'))
    return times


def replica_lag(contender, samples):
    """*samples* times: commit one change on the read-write server and
    time how long the first replica of the contender's ro-replica-conf
    takes to show it. Seconds."""
    db = contender.open()
    try:
        adapter = db.storage.adapter
        last_tid_sql = adapter.mover.last_tid_sql
        replica = adapter.replicas.connect_replica()
        if replica is None:
            raise SpeedTestError('%s: no replica of its ro-replica-conf '
                                 'answers' % contender.name)
        primary = adapter.connect(for_store=False)
        lags = []
        try:
            for i in range(samples):
                with db.transaction() as conn:
                    conn.root()['replica lag probe'] = i
                committed = time.perf_counter()
                newest = primary.scalar(last_tid_sql)
                while (replica.scalar(last_tid_sql) or 0) < newest:
                    if time.perf_counter() - committed > 60:
                        raise SpeedTestError(
                            '%s: the replica did not show a commit within '
                            '60 s' % contender.name)
                    time.sleep(0.0002)
                lags.append(time.perf_counter() - committed)
        finally:
            replica.close()
            primary.close()
        return lags
    finally:
        db.close()
