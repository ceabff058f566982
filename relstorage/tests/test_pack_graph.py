"""The pre-pack's walk of the reference graph, done in the packing process
(within pack-graph-mb), by the database (pack-graph-mb 0), or moved to
the database when it outgrows pack-graph-mb part way: long chains, cycles
and shared objects on every database and mode, and random graphs
(Hypothesis, SQLite) checked against a walk done here."""
import time

import pytest
import ZODB
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from persistent.mapping import PersistentMapping
from ZODB.POSException import POSKeyError
from ZODB.serialize import referencesf

from relstorage.storage.pack.graph import ReferenceGraph
from relstorage.testing.dbs import DatabaseFactory

#: pack-graph-mb for each way of walking the graph, and where the
#: pack's result says the walk was done. 0.01 MB is outgrown by the
#: first page of 1,000 objects, whose references then go to the database.
GRAPH_MODES = {
    'memory': (512, 'memory'),
    'database': (0, 'database'),
    'outgrown': (0.01, 'database'),
}


def _build(db, size, edges, linked):
    """*size* objects, object i referring to each object of edges[i];
    then the root keeps only those of *linked*. Returns their oids."""
    with db.transaction() as conn:
        objects = [PersistentMapping(i=i) for i in range(size)]
        for i, targets in edges.items():
            objects[i]['refs'] = [objects[j] for j in targets]
        conn.root()['all'] = objects
    with db.transaction() as conn:
        objects = conn.root().pop('all')
        conn.root()['linked'] = [objects[i] for i in sorted(linked)]
        return [o._p_oid for o in objects]


def _reached(edges, linked):
    reached, todo = set(linked), list(linked)
    while todo:
        for j in edges.get(todo.pop(), ()):
            if j not in reached:
                reached.add(j)
                todo.append(j)
    return reached


def _pack_and_check(storage, size, edges, linked, graph=None):
    """Pack; check that exactly what *linked* reaches is left (and, given
    *graph*, a key of GRAPH_MODES, that the walk was done that way)."""
    db = ZODB.DB(storage)
    try:
        oids = _build(db, size, edges, linked)
        time.sleep(0.01)
        result = storage.pack_with_result(time.time(), referencesf)
        expected = _reached(edges, linked)
        left = set()
        for i, oid in enumerate(oids):
            try:
                storage.load(oid)
            except POSKeyError:
                continue
            left.add(i)
        assert left == expected
        assert result['objects_removed'] == size - len(expected)
        if graph is not None:
            assert result['prepack_graph'] == GRAPH_MODES[graph][1]
        with db.transaction() as conn:
            assert [o['i'] for o in conn.root()['linked']] == sorted(linked)
        return result
    finally:
        db.close()


@pytest.mark.parametrize('graph', sorted(GRAPH_MODES))
def test_long_chains_cycles_and_shared_objects(factory, graph):
    # A chain longer than MySQL's default recursion limit (1000), closed
    # into a cycle, whose every link also refers to one shared object;
    # unreachable: a cycle of three, and a chain leading into the kept one.
    chain, shared = 1500, 1500
    edges = {i: [i + 1, shared] for i in range(chain - 1)}
    edges[chain - 1] = [0, shared]
    edges.update({1501: [1502], 1502: [1503], 1503: [1501]})
    edges.update({i: [i + 1] for i in range(1504, 1553)})
    edges[1553] = [700]
    storage = factory.storage(zap=True, pack_graph_mb=GRAPH_MODES[graph][0])
    _pack_and_check(storage, 1554, edges, {0}, graph)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), keep_history=st.booleans(),
       size=st.integers(1, 25),
       graph=st.sampled_from(['memory', 'database']))
def test_random_graphs_on_sqlite(data, keep_history, size, graph):
    index = st.integers(0, size - 1)
    edges = data.draw(st.dictionaries(index, st.lists(index, max_size=4),
                                      max_size=size))
    linked = data.draw(st.sets(index, max_size=3))
    factory = DatabaseFactory('sqlite', keep_history)
    try:
        storage = factory.storage(pack_graph_mb=GRAPH_MODES[graph][0])
        _pack_and_check(storage, size, edges, linked, graph)
    finally:
        factory.cleanup()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_pack_without_any_garbage_keeps_everything(keep_history):
    factory = DatabaseFactory('sqlite', keep_history)
    try:
        _pack_and_check(factory.storage(), 3, {0: [1], 1: [2]}, {0})
    finally:
        factory.cleanup()


def test_the_graph_in_memory_takes_pages_in_oid_order_only():
    graph = ReferenceGraph()
    graph.add_page([1, 2, 5], [(2, [1, 5]), (5, [9])])
    graph.add_page([7], [(7, [2])])
    assert list(graph.pairs()) == [(2, 1), (2, 5), (5, 9), (7, 2)]
    # 32-bit oids, ends and references, and reach()'s table of 8 bytes
    # an object at most.
    assert graph.nbytes == 4 * (4 + 4 + 8) + 4 * 4
    reached = graph.reach({5})  # 5 refers to 9, which is not there
    assert list(graph.unreached(reached)) == [1, 2, 7]
    with pytest.raises(ValueError, match='increasing oid order'):
        graph.add_page([6], [])


def test_the_graph_in_memory_widens_for_oids_past_32_bits():
    graph = ReferenceGraph()
    graph.add_page([1, 2], [(1, [2])])
    assert graph.oids.itemsize == graph.refs.itemsize == 4
    graph.add_page([2 ** 33, 2 ** 40], [(2 ** 33, [1, 2 ** 40]),
                                        (2 ** 40, [2 ** 33])])
    assert graph.oids.itemsize == graph.refs.itemsize == 8
    assert list(graph.oids) == [1, 2, 2 ** 33, 2 ** 40]
    assert list(graph.pairs()) == [(1, 2), (2 ** 33, 1), (2 ** 33, 2 ** 40),
                                   (2 ** 40, 2 ** 33)]
    assert list(graph.unreached(graph.reach({2 ** 40}))) == []
    assert list(graph.unreached(graph.reach({1}))) == [2 ** 33, 2 ** 40]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), sparse=st.booleans())
def test_reach_is_a_plain_walk(data, sparse):
    """reach() on any graph, its oids dense (a table of positions) or
    sparse (a binary search): what a plain walk reaches, and each
    reference to an oid never added reported once per referring object
    reached."""
    top = 2 ** 40 if sparse else 60
    oids = sorted(data.draw(st.sets(st.integers(0, top), min_size=1,
                                    max_size=40)))
    targets = st.one_of(st.sampled_from(oids), st.integers(0, top))
    edges = {oid: sorted(set(data.draw(st.lists(targets, max_size=4))))
             for oid in oids}
    roots = data.draw(st.sets(targets, max_size=4))
    graph = ReferenceGraph()
    half = len(oids) // 2
    for part in (oids[:half], oids[half:]):
        graph.add_page(part, [(oid, edges[oid]) for oid in part
                              if edges[oid]])
    missing = []
    reached = graph.reach(roots, lambda oid, ref: missing.append((oid, ref)))
    known = set(oids)
    expected = _reached(edges, roots & known) & known
    assert {oid for oid, flag in zip(oids, reached) if flag} == expected
    assert list(graph.unreached(reached)) == sorted(known - expected)
    assert sorted(missing) == sorted(
        (oid, ref) for oid in expected for ref in edges[oid]
        if ref not in known)
