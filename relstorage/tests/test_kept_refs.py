"""The references a pack keeps for the next one (storage.keptrefs): a
later pack unpickles only what changed, yet removes exactly what an
unpickling pack would."""
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64

from relstorage.storage.keptrefs import decode


def _rows(storage, sql, params=()):
    session = storage._adapter.connect(for_store=False)
    try:
        session.begin()
        return session.fetchall(sql, params)
    finally:
        session.rollback_quietly()
        session.close()


def _write(storage, sql, params=()):
    adapter = storage._adapter
    session = adapter.connect(for_store=True)
    try:
        session.begin(adapter.store_begin_sql)
        session.execute(sql, params)
        session.commit()
    finally:
        session.rollback_quietly()
        session.close()


def _kept(storage):
    """``{oid: (tid, [oids])}`` of state_refs."""
    return {zoid: (tid, decode(bytes(refs) if refs is not None else b''))
            for zoid, tid, refs in _rows(
                storage, 'SELECT zoid, tid, refs FROM state_refs')}


def _current(storage):
    """``{oid: tid}`` of every object's current revision."""
    table = ('current_object' if storage._adapter.keep_history
             else 'object_state')
    return dict(_rows(storage, 'SELECT zoid, tid FROM %s' % table))


def _build(db, count=30):
    """A root holding a mapping of *count* children, each child referring
    to the next one; ``(oids of the children)``."""
    with db.transaction() as conn:
        children = [PersistentMapping(n=i) for i in range(count)]
        for child, after in zip(children, children[1:]):
            child['next'] = after
        conn.root()['children'] = PersistentMapping(
            {str(i): child for i, child in enumerate(children)})
    with db.transaction() as conn:
        return [u64(c._p_oid) for c in
                conn.root()['children'].values()]


def _pack(storage):
    time.sleep(0.01)
    return storage.pack_with_result(time.time(), referencesf)


def test_a_later_pack_unpickles_only_what_changed(factory):
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        _build(db)
        objects = len(storage)  # the root, the mapping, 30 children
        first = _pack(storage)
        assert first['prepack_unpickled'] == objects
        assert first['prepack_refs_kept'] == 0
        kept = _kept(storage)
        current = _current(storage)
        # Every object's references are kept, read from its revision.
        assert {oid: tid for oid, (tid, _) in kept.items()} == current
        with db.transaction() as conn:
            children = conn.root()['children']
            mapping_oid = u64(children._p_oid)
            # 5 now refers to a new object instead of 6, which only 5
            # and the mapping kept alive.
            del children['6']
            children['5']['next'] = PersistentMapping(n='new')
            five = u64(children['5']._p_oid)
        assert five in kept and mapping_oid in kept
        second = _pack(storage)
        # What changed is read again (the mapping, 5 and the new object,
        # all committed before the pack time); the rest is not.
        assert second['prepack_unpickled'] == 3
        assert second['prepack_refs_kept'] == objects - 2
        # What the older revisions of 5 and of the mapping referred to,
        # as kept, was not followed: 6 is gone.
        assert second['objects_removed'] == 1
        with db.transaction() as conn:
            children = conn.root()['children']
            assert len(children) == 29 and '6' not in children
            assert children['5']['next']['n'] == 'new'
            assert children['7']['next']['n'] == 8
        kept = _kept(storage)
        assert {oid: tid for oid, (tid, _) in kept.items()} == \
            _current(storage)
        assert u64(children._p_oid) in kept
        third = _pack(storage)
        assert third['prepack_unpickled'] == 0
        assert third['objects_removed'] == 0
    finally:
        db.close()


def test_kept_references_are_the_states_references(factory):
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        oids = _build(db, 5)
        _pack(storage)
        kept = _kept(storage)
        for oid, (tid, refs) in kept.items():
            data, serial = storage.load(p64(oid))
            assert u64(serial) == tid
            assert refs == sorted({u64(r) for r in referencesf(data)})
        assert kept[oids[0]][1] == [oids[1]]
        assert kept[oids[-1]][1] == []
    finally:
        db.close()


def test_damaged_kept_references_are_read_again(factory):
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        oids = _build(db, 5)
        _pack(storage)
        # What 0 refers to, damaged: not a whole number of oids. And 2's
        # kept as if read from another revision.
        _write(storage, 'UPDATE state_refs SET refs = %s WHERE zoid = %s',
               (b'\x00\x01\x02', oids[0]))
        _write(storage, 'UPDATE state_refs SET tid = tid - 1 '
               'WHERE zoid = %s', (oids[2],))
        with db.transaction() as conn:
            del conn.root()['children']['4']  # 3 still refers to it
        result = _pack(storage)
        # The mapping (changed), 0 and 2 are read again.
        assert result['prepack_unpickled'] == 3
        assert result['objects_removed'] == 0
        kept = _kept(storage)
        assert kept[oids[0]][1] == [oids[1]]
        assert {oid: tid for oid, (tid, _) in kept.items()} == \
            _current(storage)
        with db.transaction() as conn:
            first = conn.root()['children']['0']
            assert first['next']['next']['next']['next']['n'] == 4
    finally:
        db.close()


def test_a_database_made_before_kept_references_packs(factory):
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        _build(db, 5)
        with db.transaction() as conn:
            del conn.root()['children']
        adapter = storage._adapter
        session = adapter.connect(for_store=True)
        try:
            adapter.schema.drop_table(session, 'state_refs')
        finally:
            session.close()
        result = _pack(storage)
        assert result['objects_removed'] == 6
        assert len(storage) == 1
        assert set(_kept(storage)) == {0}
        storage.zap_all()
        assert _kept(storage) == {}
    finally:
        db.close()


@pytest.mark.parametrize('gc', [False])
def test_a_pack_without_garbage_collection_keeps_nothing(factory, gc):
    storage = factory.storage(pack_gc=gc)
    db = ZODB.DB(storage)
    try:
        _build(db, 3)
        result = _pack(storage)
        assert 'prepack_unpickled' not in result
        assert _kept(storage) == {}
    finally:
        db.close()
        transaction.abort()
