"""The references a pack keeps for the next one (storage.pack.keptrefs): a
later pack unpickles only what changed, yet removes exactly what an
unpickling pack would."""
import contextlib
import hashlib
import time

import pytest
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64

from relstorage.storage.pack.keptrefs import decode


@pytest.fixture
def db(factory):
    """A ZODB.DB on the factory's storage, closed after the test."""
    db = ZODB.DB(factory.storage())
    yield db
    db.close()


@contextlib.contextmanager
def _reading(storage):
    """A load session on the storage's database, in a transaction."""
    session = storage.adapter.connect(for_store=False)
    try:
        session.begin()
        yield session
    finally:
        session.rollback_quietly()
        session.close()


def _rows(storage, sql, params=()):
    with _reading(storage) as session:
        return session.fetchall(sql, params)


def _write(storage, sql, params=()):
    adapter = storage.adapter
    session = adapter.connect(for_store=True)
    try:
        session.begin(adapter.store_begin_sql)
        session.execute(sql, params)
        session.commit()
    finally:
        session.rollback_quietly()
        session.close()


def _kept(storage):
    """``{oid: (tid, [oids])}`` of state_refs (None where the kept bytes
    do not check out against the state of that tid, as stored: a state
    replaced in place by a test is not the one the storage may cache)."""
    kept = {}
    for zoid, tid, refs, state in _rows(
            storage, 'SELECT r.zoid, r.tid, r.refs, s.state FROM '
            'state_refs r LEFT JOIN object_state s ON s.zoid = r.zoid '
            'AND s.tid = r.tid'):
        kept[zoid] = (tid, decode(bytes(refs), state and bytes(state)))
    return kept


def _state(storage, oid):
    """``(state, tid)`` of *oid*'s current revision, as stored."""
    return _rows(storage, 'SELECT state, tid FROM object_state WHERE '
                 'zoid = %s ORDER BY tid DESC', (oid,))[0]


def _current(storage):
    """``{oid: tid}`` of every object's current revision."""
    table = ('current_object' if storage.adapter.keep_history
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


def test_a_later_pack_unpickles_only_what_changed(db):
    storage = db.storage
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


def test_kept_references_are_the_states_references(db):
    storage = db.storage
    oids = _build(db, 5)
    _pack(storage)
    kept = _kept(storage)
    for oid, (tid, refs) in kept.items():
        data, serial = storage.load(p64(oid))
        assert u64(serial) == tid
        assert refs == sorted({u64(r) for r in referencesf(data)})
    assert kept[oids[0]][1] == [oids[1]]
    assert kept[oids[-1]][1] == []


def test_damaged_kept_references_are_read_again(db):
    storage = db.storage
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


def test_kept_references_that_do_not_check_out_are_read_again(db):
    """Bytes damaged in the table, or a state changed in place keeping its
    tid: the state is read again, and the pack removes what it would
    have removed without kept references -- no more, no less."""
    storage = db.storage
    oids = _build(db, 5)
    with db.transaction() as conn:
        # Now only 0 refers to 1, and only 2 to 3.
        del conn.root()['children']['1']
        del conn.root()['children']['3']
    _pack(storage)
    kept = dict(_rows(storage, 'SELECT zoid, refs FROM state_refs'))
    # 0's kept bytes damaged as a flipped bit would: still whole oids
    # (1 becomes 0), the check no longer matching. Trusted, they would
    # leave 1 unreached, and remove it.
    damaged = bytearray(bytes(kept[oids[0]]))
    damaged[7] ^= 1
    _write(storage, 'UPDATE state_refs SET refs = %s WHERE zoid = %s',
           (bytes(damaged), oids[0]))
    # 2's state replaced in place by 4's (which refers to nothing),
    # its tid kept: 3 is unreachable now, though the references kept
    # for that tid still reach it.
    last_state, _ = _state(storage, oids[4])
    _, tid = _state(storage, oids[2])
    _write(storage, 'UPDATE object_state SET state = %s, state_size = '
           '%s WHERE zoid = %s AND tid = %s',
           (bytes(last_state), len(bytes(last_state)), oids[2], tid))
    result = _pack(storage)
    assert result['prepack_unpickled'] == 2
    assert result['objects_removed'] == 1  # 3, and only 3
    with db.transaction() as conn:
        assert conn.root()['children']['0']['next']['n'] == 1
    kept = _kept(storage)
    assert kept[oids[0]][1] == [oids[1]]
    assert kept[oids[2]][1] == []
    assert oids[3] not in kept


def _page(storage, checked, kept=None):
    """``{oid: (state, tid, kept_tid)}`` of the first pre-pack page as
    of now, read *checked* or not; each row's kept bytes go into the
    dict *kept*, if given."""
    with _reading(storage) as session:
        rows = storage.adapter.packer.states_at(
            session, u64(storage.lastTransaction()), -1, 1000,
            checked=checked)
    if kept is not None:
        kept.update((row[0], row[4]) for row in rows)
    return {oid: (state, tid, kept_tid)
            for oid, state, tid, kept_tid, _ in rows}


def test_checked_pages_bring_no_state_whose_references_are_kept(
        db, factory):
    """PostgreSQL and MySQL check the kept references against the state
    themselves: a page read checked brings only the states to unpickle
    (PostgreSQL not even the tids of the others, nor their kept bytes
    where they hold no oid). SQLite's are checked in the packing
    process: it brings them all."""
    storage = db.storage
    oids = _build(db, 5)
    _pack(storage)
    with db.transaction() as conn:
        children = conn.root()['children']
        children['2']['n'] = 'changed'
        del children['4']  # 3 still refers to it
        mapping = u64(children._p_oid)
    last_state, _ = _state(storage, oids[4])
    _, tid = _state(storage, oids[3])
    # 3's state replaced in place by 4's, which refers to nothing (its
    # tid kept): it no longer checks out.
    _write(storage, 'UPDATE object_state SET state = %s, state_size = %s '
           'WHERE zoid = %s AND tid = %s',
           (bytes(last_state), len(bytes(last_state)), oids[3], tid))
    plain = _page(storage, checked=False)
    kept_bytes = {}
    checked = _page(storage, checked=True, kept=kept_bytes)
    assert set(plain) == set(checked) == set(_current(storage))
    assert all(state for state, _, _ in plain.values())
    if not storage.adapter.packer.checks_kept_references:
        assert checked == plain
        return
    sent = {oid for oid, (state, _, _) in checked.items() if state}
    # The mapping and 2 changed since (their kept tids are older), 3 was
    # replaced in place.
    assert sent == {mapping, oids[2], oids[3]}
    for oid in sent:
        assert checked[oid] == plain[oid]
    lean = factory.db == 'postgresql'
    for oid, (state, tid, kept_tid) in checked.items():
        if oid in sent:
            continue
        assert state == b''
        if lean:
            assert tid is None and kept_tid is None
            # 4 (deleted from the mapping, still referred to by 3) is
            # the one that refers to nothing.
            assert (kept_bytes[oid] is None) == (oid == oids[4])
        else:
            assert tid == kept_tid is not None
    result = _pack(storage)
    assert result['prepack_unpickled'] == 3
    assert result['objects_removed'] == 1  # 4: 3 no longer refers to it


def test_references_a_database_passed_must_be_whole_oids():
    with pytest.raises(ValueError, match='passed the database'):
        decode(b'\x00' * 21, b'', checked=True)
    # Not checked, an empty state is no state: nothing is trusted.
    assert decode(b'\x00' * 24, b'') is None
    assert decode(b'\x00' * 21, b'x') is None


def test_a_database_made_before_kept_references_packs(db):
    storage = db.storage
    _build(db, 5)
    with db.transaction() as conn:
        del conn.root()['children']
    adapter = storage.adapter
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


def test_a_pack_without_garbage_collection_keeps_nothing(factory):
    db = ZODB.DB(factory.storage(pack_gc=False))
    try:
        _build(db, 3)
        result = _pack(db.storage)
        assert 'prepack_unpickled' not in result
        assert _kept(db.storage) == {}
    finally:
        db.close()


def test_the_kept_bytes_a_page_makes_are_encode_s():
    """merged() keeps what encode() makes, for objects referring to none,
    one or many: the oids, 8 bytes each, big-endian, then the first 16
    bytes of the SHA-256 of the state and those oids; decode() reads
    them back."""
    from relstorage.storage.pack.keptrefs import KeptReferences
    from relstorage.storage.pack.keptrefs import encode
    rows = [(oid, b'state %d' % oid * (oid % 7 + 1), 100 + oid, None, None)
            for oid in range(1, 200)]
    found = [(oid, list(range(oid + 1, oid + 1 + oid % 70)))
             for oid in range(1, 200, 3)]
    kept = KeptReferences(True)
    (page,) = kept.to_read([rows])
    oids, merged, keep, stale = kept.merged(page, found)
    assert oids == list(range(1, 200)) and merged == found and not stale
    refs = dict(found)
    assert keep == [(oid, tid, encode(refs.get(oid, ()), state))
                    for oid, state, tid, _, _ in rows]
    for oid, _, kept_bytes in keep:
        assert decode(kept_bytes, rows[oid - 1][1]) == refs.get(oid, [])
        body = b''.join(ref.to_bytes(8, 'big') for ref in refs.get(oid, ()))
        assert kept_bytes == body + hashlib.sha256(
            rows[oid - 1][1] + body).digest()[:16]
