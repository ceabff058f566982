"""Read-ahead among an object's references: walking a container costs a
few queries, a single lookup reads nothing more, and what is read ahead
is never stale."""
import pytest
import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from BTrees.OOBTree import OOTreeSet
from hypothesis import HealthCheck
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from persistent.mapping import PersistentMapping
from ZODB.tests.MinPO import MinPO
from ZODB.utils import p64
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


class SmallBTree(OOBTree):
    """Nodes of at most four children and buckets of at most four items:
    a tree of many levels from a few thousand items."""
    max_internal_size = 4
    max_leaf_size = 4


def _bucket_count(tree):
    count, bucket = 0, tree._firstbucket
    while bucket is not None:
        count += 1
        bucket = bucket._next
    return count


def _tree_in_a_new_process(factory, make, fill):
    """Commit the tree *make()* filled by *fill(tree)* at root['tree'];
    then a new storage (as in a new process: nothing cached): its db,
    the tree, how many buckets it has, and the list of queries for
    states (each the oids it asked for)."""
    db = ZODB.DB(factory.storage())
    conn = db.open()
    tree = conn.root()['tree'] = make()
    fill(tree)
    transaction.commit()
    buckets = _bucket_count(tree)
    conn.close()
    db.close()
    db = ZODB.DB(factory.storage())
    conn = db.open()
    tree = conn.root()['tree']
    tree._p_activate()
    return db, tree, buckets, _count_reads(conn)


def _sizes(reads):
    """How many oids each of the queries *reads* asked for."""
    return [len(oids) if isinstance(oids, list) else 1 for oids, *_ in reads]


def _asked(reads):
    """How many oids the queries *reads* asked for."""
    return sum(_sizes(reads))


@pytest.mark.parametrize('make, count', [(OOBTree, 3000),
                                         (OOBTree, 20000),
                                         (SmallBTree, 2000)],
                         ids=['one level', 'two levels', 'seven levels'])
def test_iterating_a_btree_reads_many_buckets_at_once(factory, make, count):
    """Iterating a BTree reads its buckets many at a time, found through
    its inner nodes (one query per level), and their values in batches
    across buckets: a few dozen queries, where following each bucket's
    reference to the next costs at least one per bucket."""
    db, tree, buckets, reads = _tree_in_a_new_process(
        factory, make,
        lambda tree: [tree.__setitem__(i, MinPO(i)) for i in range(count)])
    try:
        assert buckets > 150
        assert [v.value for v in tree.values()] == list(range(count))
        # At most MAX_BATCH values a query, and a few queries to get there.
        assert len(reads) < max(30, 1.5 * count / ReadAhead.MAX_BATCH), (
            str(_sizes(reads)), buckets)
        # A second walk in the next transaction finds everything cached.
        transaction.abort()
        del reads[:]
        assert len(tree) == count
        assert sum(v.value for v in tree.values()) == sum(range(count))
        assert reads == []
    finally:
        db.close()


def test_iterating_btrees_of_btrees(factory):
    """An outer tree whose values are trees: the walk through each inner
    tree goes on beside the outer one."""
    def fill(tree):
        for outer in range(20):
            tree[outer] = inner = OOBTree()
            for i in range(500):
                inner[i] = MinPO(outer * 1000 + i)

    db, tree, buckets, reads = _tree_in_a_new_process(
        factory, OOBTree, fill)
    try:
        got = [v.value for inner in tree.values() for v in inner.values()]
        assert got == [o * 1000 + i for o in range(20) for i in range(500)]
        # 20 trees of about 35 buckets: a few queries each.
        assert len(reads) < 20 * 8, str(_sizes(reads))
    finally:
        db.close()


def test_a_lookup_in_a_big_btree_reads_little(factory):
    """Looking up one key goes down the tree, one query per level, each
    for the object of that level alone, or, for a bucket that is its
    node's first (where iterating a tree of one level starts), with a few
    buckets after it: never the tree's other nodes or values."""
    db, tree, buckets, reads = _tree_in_a_new_process(
        factory, SmallBTree,
        lambda tree: [tree.__setitem__(i, MinPO(i)) for i in range(2000)])
    try:
        assert tree[1234].value == 1234
        levels = len(reads)
        assert 5 < levels < 12
        assert _asked(reads) <= levels + ReadAhead.FIRST_BATCH, reads
        transaction.abort()
        del reads[:]
        assert tree[0].value == 0
        assert len(reads) <= levels
        assert _asked(reads) <= levels + ReadAhead.FIRST_BATCH, reads
    finally:
        db.close()


def test_recognises_btree_pickles():
    """What the tree walk reads from pickles alone: the class, a node's
    or a bucket's reference after its items (first bucket, next bucket)
    and a node listing buckets."""
    from BTrees.IIBTree import IITreeSet
    from ZODB.MappingStorage import MappingStorage
    from relstorage.storage import treewalk
    db = ZODB.DB(MappingStorage())
    try:
        conn = db.open()
        root = conn.root()
        root['one'] = one = OOBTree()
        root['many'] = many = SmallBTree()
        root['set'] = ints = IITreeSet()
        for i in range(300):
            one[i] = MinPO(i)
            many[i] = MinPO(i)
            ints.add(i)
        transaction.commit()

        def pickle(obj):
            return _pickle_of(db, obj)

        kind = treewalk.tree_kind
        assert kind(pickle(one)) == kind(pickle(many)) == treewalk.NODE
        assert kind(pickle(ints)) == treewalk.NODE
        assert kind(pickle(one._firstbucket)) == treewalk.BUCKET
        assert kind(pickle(ints._firstbucket)) == treewalk.BUCKET
        assert kind(pickle(one[0])) is None
        assert kind(pickle(root)) is None

        after = treewalk.refers_after_items_to
        first = treewalk.first_of_buckets
        # One level: the node lists buckets; its first bucket is its
        # first child (named once), its last child no first bucket.
        state = pickle(one)
        children = treewalk.references(state)
        assert children[0] == u64(one._firstbucket._p_oid)
        assert first(state, one._firstbucket._p_oid)
        assert not first(state, p64(children[1]))
        assert not after(state, p64(children[-1]))
        # Many levels: the root lists nodes, and names its first bucket
        # after them.
        state = pickle(many)
        assert after(state, many._firstbucket._p_oid)
        assert not first(state, p64(treewalk.references(state)[0]))
        # A bucket names the next one after its items; the last bucket
        # has none, its last value is an item.
        bucket = one._firstbucket
        assert after(pickle(bucket), bucket._next._p_oid)
        while bucket._next is not None:
            bucket = bucket._next
        last_value = treewalk.references(pickle(bucket))[-1]
        assert not after(pickle(bucket), p64(last_value))
    finally:
        db.close()


class SmallTreeSet(OOTreeSet):
    max_internal_size = 4
    max_leaf_size = 4


_TREE_TYPES = {'OOBTree': OOBTree, 'SmallBTree': SmallBTree,
               'OOTreeSet': OOTreeSet, 'SmallTreeSet': SmallTreeSet}


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow,
                                 HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(_TREE_TYPES)),
       batches=st.lists(st.tuples(st.integers(0, 1500),
                                  st.floats(0, 0.95)),
                        min_size=1, max_size=3),
       rng=st.randoms(use_true_random=False),
       low=st.one_of(st.none(), st.integers(0, 3000)),
       cache_mb=st.sampled_from([10, 1]))
def test_walks_through_any_tree_read_what_is_there(kind, batches, rng, low,
                                                   cache_mb):
    """Trees of any shape (sets too, nodes of four children, buckets left
    nearly empty by deletions), changed over several commits (each adds
    some keys, then removes a share of all), then walked by a new process
    every way iteration goes (keys, values, a range from some key, len)
    with a cache large or small: each walk sees exactly the tree's
    contents, and the first, from nothing cached, reads the buckets many
    at a time."""
    from relstorage.testing.dbs import DatabaseFactory
    factory = DatabaseFactory('sqlite', False)
    make = _TREE_TYPES[kind]
    is_set = kind.endswith('Set')
    expected = {}
    db = ZODB.DB(factory.storage())
    try:
        conn = db.open()
        tree = conn.root()['tree'] = make()
        for count, share in batches:
            for key in rng.sample(range(3000), count):
                if is_set:
                    tree.add(key)
                else:
                    tree[key] = MinPO(key)
                expected[key] = key
            gone = rng.sample(sorted(expected), int(share * len(expected)))
            for key in gone:
                del expected[key]
                if is_set:
                    tree.remove(key)
                else:
                    del tree[key]
            transaction.commit()
        conn.close()
        db.close()
        db = ZODB.DB(factory.storage(cache_local_mb=cache_mb))
        conn = db.open()
        tree = conn.root()['tree']
        keys = sorted(expected)
        event('keys: %s' % ('<100' if len(keys) < 100 else '<500' if
                            len(keys) < 500 else '500+'))
        reads = _count_reads(conn)
        assert list(tree.keys()) == keys
        # Nothing cached: going down to the last bucket, one query a
        # level, then the nodes a level a query, then the buckets many
        # at a time, never one per query.
        assert len(reads) <= 12 + len(keys) // 40, (len(reads), len(keys))
        transaction.abort()
        conn.cacheMinimize()
        if not is_set:
            assert [v.value for v in tree.values()] == keys
            transaction.abort()
            conn.cacheMinimize()
        assert len(tree) == len(keys)
        wanted = [k for k in keys if low is None or k >= low]
        if is_set:
            assert list(tree.keys(min=low)) == wanted
        else:
            assert [(k, v.value) for k, v in tree.items(min=low)] == [
                (k, k) for k in wanted]
        conn.close()
    finally:
        db.close()
        factory.cleanup()


def test_a_walk_starts_where_the_cache_held_the_first_buckets(factory):
    """The tree's first and last buckets are in the shared cache (read in
    an earlier transaction), their values not: the walk starts among the
    first bucket's values and reads the rest many buckets at a time."""
    db, tree, buckets, reads = _tree_in_a_new_process(
        factory, OOBTree,
        lambda tree: [tree.__setitem__(i, MinPO(i)) for i in range(3000)])
    try:
        assert buckets > 150
        tree._firstbucket._p_activate()
        assert tree.maxKey() == 2999
        transaction.abort()
        tree._p_jar.cacheMinimize()
        del reads[:]
        assert [v.value for v in tree.values()] == list(range(3000))
        assert len(reads) < 15, str(_sizes(reads))
    finally:
        db.close()
