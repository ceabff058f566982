"""Damaged and hostile rows, written straight into the tables as a bad
disk, a careless script or another program would: random bytes,
truncated pickles, pickles naming classes that do not exist, a
``state_size`` that disagrees with the state. Loading, iterating,
packing and copying either handle such a row or raise CorruptRecord
naming the object, and never damage another row.

Hypothesis draws the damage on SQLite (cheap to make afresh); the same
kinds run once each on PostgreSQL and MySQL.
"""
import pickle
import shutil
import tempfile
import time

import pytest
import ZODB
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf
from ZODB.utils import p64

from relstorage.exceptions import CorruptRecord

from .dbs import DatabaseFactory
from .dbs import require

#: A ZODB record whose class is in a module nobody has.
MISSING_CLASS = (b'\x80\x03cnosuchmodule\nThing\nq\x00.'
                 + pickle.dumps({'x': 1}, 3))


def _build(factory):
    """A database whose root holds ``a`` and ``b`` (no other references);
    returns ``{oid: state}`` of every object."""
    db = ZODB.DB(factory.storage(zap=True))
    with db.transaction() as conn:
        conn.root()['a'] = PersistentMapping(v='a')
        conn.root()['b'] = PersistentMapping(v='b')
    with db.transaction() as conn:
        conn.root()['b']['v'] = 'b2'
        oids = [conn.root()._p_oid, conn.root()['a']._p_oid,
                conn.root()['b']._p_oid]
    states = {oid: db.storage.load(oid)[0] for oid in oids}
    db.close()
    return states


def _damage(factory, oid, state, size):
    """Write *state* and *size* into the current row of *oid*."""
    adapter = factory.adapter()
    session = adapter.connect(for_store=True)
    try:
        session.begin()
        ioid = int.from_bytes(oid, 'big')
        tid = session.scalar('SELECT MAX(tid) FROM object_state '
                             'WHERE zoid = %s', (ioid,))
        session.execute('UPDATE object_state SET state = %s, state_size = %s '
                        'WHERE zoid = %s AND tid = %s',
                        (state, size, ioid, tid))
        session.commit()
    finally:
        session.close()
        adapter.close()


def _named(error, oid):
    assert isinstance(error, CorruptRecord), repr(error)
    assert '0x%x' % int.from_bytes(oid, 'big') in str(error)


def _check(factory, states, oid, state, size):
    """Every operation on a database with *oid*'s row damaged so."""
    damaged_size = size != len(state)
    others = {o: s for o, s in states.items() if o != oid}
    storage = factory.storage()
    try:
        # Load.
        try:
            loaded = storage.load(oid)[0]
        except Exception as e:  # noqa: BLE001 -- checked just below
            _named(e, oid)
            assert damaged_size
        else:
            assert not damaged_size and loaded == state
        # Iterate: every revision, and the current records.
        for walk in (lambda: [r.data for t in storage.iterator() for r in t],
                     lambda: _iternext(storage)):
            try:
                walk()
            except Exception as e:  # noqa: BLE001 -- checked just below
                _named(e, oid)
                assert damaged_size
            else:
                assert not damaged_size
        # Copy into another database.
        destination = DatabaseFactory('sqlite', factory.keep_history)
        try:
            copy = destination.storage(zap=True)
            try:
                copy.copyTransactionsFrom(storage)
            except Exception as e:  # noqa: BLE001 -- checked just below
                _named(e, oid)
                assert damaged_size
            else:
                assert not damaged_size
                assert copy.load(oid)[0] == state
            copy.close()
        finally:
            destination.cleanup()
        # Pack (with garbage collection): stops at a state whose
        # references cannot be read, never guesses.
        try:
            storage.pack(time.time() + 1, referencesf)
        except Exception as e:  # noqa: BLE001 -- checked just below
            _named(e, oid)
        # Nothing else was touched.
        for other, other_state in others.items():
            assert storage.load(other)[0] == other_state
    finally:
        storage.close()


def _iternext(storage):
    records, next_oid = [], None
    while True:
        oid, tid, data, next_oid = storage.record_iternext(next_oid)
        records.append(data)
        if next_oid is None:
            return records


def _hostile_state(kind, data, good):
    if kind == 'random':
        return data.draw(st.binary(max_size=300))
    if kind == 'truncated':
        return good[:data.draw(st.integers(0, len(good) - 1))]
    return MISSING_CLASS


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), keep_history=st.booleans(),
       kind=st.sampled_from(['random', 'truncated', 'missing-class']),
       target=st.sampled_from([1, 2]), size_change=st.sampled_from(
           [0, 0, -1, 1, 1000]))
def test_hostile_rows_on_sqlite(data, keep_history, kind, target,
                                size_change):
    factory = DatabaseFactory('sqlite', keep_history)
    try:
        states = _build(factory)
        oid = sorted(states)[target]
        state = _hostile_state(kind, data, states[oid])
        size = max(0, len(state) + size_change)
        _damage(factory, oid, state, size)
        _check(factory, states, oid, state, size)
    finally:
        factory.cleanup()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
@pytest.mark.parametrize('db', ['postgresql', 'mysql'])
@pytest.mark.parametrize('kind, size_change', [
    ('random', 0), ('truncated', 0), ('missing-class', 0), ('random', 7)])
def test_hostile_rows_on_servers(db, keep_history, kind, size_change):
    require(db)
    factory = DatabaseFactory(db, keep_history)
    try:
        states = _build(factory)
        oid = sorted(states)[1]
        state = {'random': b'\x80\x03\xfe garbage \x00\xff' * 3,
                 'truncated': states[oid][:len(states[oid]) // 2],
                 'missing-class': MISSING_CLASS}[kind]
        _damage(factory, oid, state, len(state) + size_change)
        _check(factory, states, oid, state, len(state) + size_change)
    finally:
        factory.cleanup()
