"""Read-ahead among an object's references: walking a container costs a
few queries, a single lookup reads nothing more, and what is read ahead
is never stale."""
import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.tests.MinPO import MinPO
from ZODB.utils import u64

from relstorage.storage.readahead import ReadAhead

N = 300


def _container(db, n=N, key='box'):
    conn = db.open()
    conn.root()[key] = PersistentMapping(
        {i: MinPO('value %d' % i) for i in range(n)})
    transaction.commit()
    conn.close()


def _count_reads(conn):
    """A list that grows by one per query for states on *conn*."""
    session = conn._storage._view.session()
    reads = []
    for name in ('load_current', 'load_many'):
        def counted(*args, _real=getattr(session, name)):
            reads.append(args)
            return _real(*args)
        setattr(session, name, counted)
    return reads


def _reopened(factory):
    """A new storage (as in a new process: nothing cached) opened on the
    box; its db, connection, box and a list of the queries for states."""
    db = ZODB.DB(factory.storage())
    conn = db.open()
    box = conn.root()['box']
    return db, conn, box, _count_reads(conn)


def test_walk_reads_ahead_and_lookup_does_not(factory):
    db = ZODB.DB(factory.storage())
    try:
        _container(db)
        db.close()
        # A new process: nothing cached anywhere.
        db = ZODB.DB(factory.storage())
        conn = db.open()
        box = conn.root()['box']
        box._p_activate()
        reads = _count_reads(conn)
        assert box[7].value == 'value 7'     # one lookup: one query
        assert len(reads) == 1
        assert [box[i].value for i in range(N)] == [
            'value %d' % i for i in range(N)]
        # 16, 32, 64, ... at a time: a handful of queries, not 300.
        assert len(reads) <= 10
        cache = conn._storage._cache
        assert cache.hits >= N - 10
        conn.close()
    finally:
        db.close()


def test_read_ahead_is_never_stale(factory):
    """A walk reads ahead; another client then changes some children; the
    next walk sees every change."""
    db1 = ZODB.DB(factory.storage())
    db2 = ZODB.DB(factory.storage())
    try:
        _container(db1)
        tm1 = transaction.TransactionManager()
        conn1 = db1.open(tm1)
        box1 = conn1.root()['box']
        assert sum(box1[i].value.startswith('value') for i in range(N)) == N
        tm1.commit()

        tm2 = transaction.TransactionManager()
        conn2 = db2.open(tm2)
        box2 = conn2.root()['box']
        for i in range(0, N, 7):
            box2[i].value = 'changed %d' % i
        tm2.commit()
        conn2.close()

        # Nothing in conn1's own cache either: every child is loaded again,
        # read ahead in batches, and each must be the new revision.
        conn1.cacheMinimize()
        tm1.begin()
        box1 = conn1.root()['box']
        got = [box1[i].value for i in range(N)]
        assert got == [('changed %d' if i % 7 == 0 else 'value %d') % i
                       for i in range(N)]
        tm1.commit()
        conn1.close()
    finally:
        db1.close()
        db2.close()


def test_off_without_a_cache(factory):
    storage = factory.storage(cache_local_mb=0)
    assert storage._view.readahead is None
    storage.close()


def _pickle_of(db, obj):
    return db.storage.load(obj._p_oid)[0]


def test_finds_references_in_order():
    from ZODB.MappingStorage import MappingStorage
    db = ZODB.DB(MappingStorage())
    try:
        _container(db, n=50)
        conn = db.open()
        box = conn.root()['box']
        children = [u64(box[i]._p_oid) for i in range(50)]
        state = _pickle_of(db, box)
        parent = u64(box._p_oid)
        held = set()
        ra = ReadAhead(held.__contains__)
        ra.note((parent, state))
        # The first child: alone, and nothing parsed yet.
        assert ra.along_with(children[0]) is None
        assert not ra._referrers
        # The second: it and the next FIRST_BATCH - 1 children.
        batch = ra.along_with(children[1])
        assert batch == children[1:1 + ReadAhead.FIRST_BATCH]
        # Past them, twice as many; cached ones are left out.
        held.update(children[20:30])
        nxt = 1 + ReadAhead.FIRST_BATCH
        batch = ra.along_with(children[nxt])
        assert batch == [children[nxt]] + [
            c for c in children[nxt + 1:] if c not in held][:31]
        # One read ahead already but missed again (evicted): alone.
        assert ra.along_with(children[2]) is None
        # A new transaction starts the walk over.
        ra.forget_walks()
        assert ra.along_with(children[40]) is None
        assert ra.along_with(children[41]) == children[41:50]
        conn.close()
    finally:
        db.close()


def test_lookups_in_different_objects_parse_nothing():
    """One child of each of many objects (a BTree descent, say): each is
    read alone and no state is parsed."""
    held = set()
    ra = ReadAhead(held.__contains__)
    for parent in range(1, 20):
        child = 1000 + parent
        ra.note((parent, b'C\x08' + child.to_bytes(8, 'big') + b'junk'))
        assert ra.along_with(child) is None
    assert not ra._referrers


@pytest.mark.parametrize('cached', [False, True])
def test_unrelated_oid_is_read_alone(cached):
    ra = ReadAhead(lambda oid: cached)
    ra.note((1, b'no references here'))
    assert ra.along_with(99) is None


def test_damaged_row_read_ahead_fails_only_its_own_load(factory):
    from relstorage.exceptions import CorruptRecord
    db = ZODB.DB(factory.storage())
    try:
        _container(db, n=6)
        conn = db.open()
        bad = u64(conn.root()['box'][3]._p_oid)
        conn.close()
        db.close()
        session = factory.adapter().connect(for_store=True)
        session.begin()
        session.execute('UPDATE object_state SET state = %s WHERE zoid = %s',
                        (b'\x80\x03cZODB.tests.MinPO\nMinPO', bad))
        session.commit()
        session.close()
        db, conn, box, reads = _reopened(factory)
        # The second child reads ahead the others, the damaged one among
        # them: that must not fail it, nor the ones after.
        assert [box[i].value for i in (0, 1, 2)] == [
            'value 0', 'value 1', 'value 2']
        assert any(len(args[0]) > 1 for args in reads if
                   isinstance(args[0], list))   # it did read ahead
        with pytest.raises(CorruptRecord):
            box[3].value
        assert [box[i].value for i in (4, 5)] == ['value 4', 'value 5']
        conn.close()
    finally:
        db.close()


def test_cache_cleared_between_transactions_is_used_again(factory):
    """Clearing the shared cache (as benchmarks do for cold reads) must not
    leave it refusing every state until the next commit."""
    db = ZODB.DB(factory.storage())
    try:
        _container(db)
        for _ in range(2):
            conn = db.open()
            conn.cacheMinimize()
            db.storage._cache.clear()
            conn.close()
            conn = db.open()            # polls: nothing changed
            box = conn.root()['box']
            box._p_activate()
            reads = _count_reads(conn)
            assert sum(box[i].value.startswith('value') for i in range(N)) == N
            assert len(reads) <= 10
            conn.close()
    finally:
        db.close()


def test_bytes_that_look_like_large_oids_are_not_read(factory):
    """The reference pattern also matches data; 8 bytes from 2**63 up are
    no oid any database holds, and a walk past them reads as usual."""
    db = ZODB.DB(factory.storage())
    try:
        conn = db.open()
        box = {i: MinPO('value %d' % i) for i in range(40)}
        # Interleaved with the references, values pickled exactly like
        # one: SHORT_BINBYTES of length 8.
        box.update({'fake %d' % i: bytes([0x80 + i]) + b'\xff' * 7
                    for i in range(40)})
        conn.root()['box'] = PersistentMapping(box)
        transaction.commit()
        conn.close()
        db.close()
        db, conn, box, reads = _reopened(factory)
        assert [box[i].value for i in range(40)] == [
            'value %d' % i for i in range(40)]
        assert len(reads) <= 8
        conn.close()
    finally:
        db.close()


def test_walk_goes_on_through_btree_buckets(factory):
    """A BTree's buckets each refer to the next: reading a bucket's values
    ahead reads the next bucket, whose values are then read ahead from
    its first miss, as many at once as the walk had reached."""
    from BTrees.OOBTree import OOBTree
    db = ZODB.DB(factory.storage())
    try:
        conn = db.open()
        tree = conn.root()['tree'] = OOBTree()
        for i in range(3000):
            tree[i] = MinPO(i)
        transaction.commit()
        conn.close()
        db.close()
        db = ZODB.DB(factory.storage())
        conn = db.open()
        tree = conn.root()['tree']
        buckets = 0
        bucket = tree._firstbucket
        while bucket is not None:
            buckets += 1
            bucket = bucket._next
        assert buckets > 50
        db.close()
        db = ZODB.DB(factory.storage())
        conn = db.open()
        tree = conn.root()['tree']
        tree._p_activate()
        reads = _count_reads(conn)
        assert [v.value for v in tree.values()] == list(range(3000))
        # Without going on from bucket to bucket: about four per bucket.
        assert len(reads) < 1.5 * buckets, (len(reads), buckets)
        transaction.abort()
    finally:
        db.close()


def test_children_of_a_tree_live_in_the_connection_are_read_by_oid(factory):
    """A script that made a tree reads it back: the buckets are live in
    its connection (never loaded again), the values ghosts the shared
    cache no longer holds. Read ahead by oid, a few queries, not one per
    value."""
    from BTrees.OOBTree import OOBTree
    db = ZODB.DB(factory.storage())
    try:
        conn = db.open()
        tree = conn.root()['tree'] = OOBTree()
        for i in range(3000):
            tree[i] = MinPO(i)
        transaction.commit()
        for value in tree.values():
            value._p_deactivate()
        db.storage._cache.clear()
        conn._storage._cache.clear()
        transaction.abort()          # a new transaction: polls
        reads = _count_reads(conn)
        assert [v.value for v in tree.values()] == list(range(3000))
        assert len(reads) < 40, len(reads)
        transaction.abort()
        conn.close()
    finally:
        db.close()


def test_misses_without_a_referrer_read_ahead_only_in_a_run():
    held = set()
    ra = ReadAhead(held.__contains__)
    ra.note((1, b'no references here'))
    first = ReadAhead.FIRST_BATCH
    # Far apart: alone.
    assert ra.along_with(1000) is None
    assert ra.along_with(2000) is None
    # Close after the one before: the run starts, FIRST_BATCH oids.
    assert ra.along_with(2003) == list(range(2003, 2003 + first))
    # One asked for already (gone, or evicted since): alone.
    assert ra.along_with(2005) is None
    # Just past them: twice as many after them; held ones left out.
    end = 2003 + first - 1
    held.update(range(end + 5, end + 10))
    assert ra.along_with(end + 2) == [end + 2] + [
        o for o in range(end + 1, end + 1 + 2 * first)
        if o not in held and o != end + 2]
    # Before them, within the next batch's reach: as many before them.
    assert ra.along_with(1990) == [1990] + [
        o for o in range(2003 - 4 * first, 2003) if o != 1990]
    # Somewhere else: the run is over.
    assert ra.along_with(10_000) is None
    assert ra.along_with(10_002) == list(range(10_002, 10_002 + first))
    # A new transaction starts over.
    ra.forget_walks()
    assert ra.along_with(10_100) is None
