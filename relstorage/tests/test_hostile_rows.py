"""Damaged and hostile rows, written straight into the tables as a bad
disk, a careless script or another program would: random bytes,
truncated pickles, pickles naming classes that do not exist, a
``state_size`` that disagrees with the state. Loading, iterating,
packing and copying either handle such a row or raise CorruptRecord
naming the object, and never damage another row.

Hypothesis draws the damage on SQLite (cheap to make afresh); the same
kinds run once each on PostgreSQL and MySQL.
"""
import os
import pickle
import shutil
import tempfile
import time

import pytest
import ZODB
import ZODB.blob
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from persistent.mapping import PersistentMapping
from ZODB.POSException import POSKeyError
from ZODB.serialize import referencesf
from ZODB.utils import oid_repr
from ZODB.utils import p64

from relstorage.exceptions import CorruptRecord
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import require

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


# Blob chunk sequences. A blob kept in the database is a run of chunks
# 0..n-1, all full but the last, which is shorter (empty when the size is
# a multiple of the chunk size). Losing, renumbering or shortening chunks
# must give a named error, never a shorter file; the one loss that cannot
# be seen is that of every chunk after the first.

CHUNK = 8


def _blob_storage(factory, zap=False):
    """A storage with blobs in the database and a new, empty cache;
    returns ``(storage, cache directory)``."""
    cache = tempfile.mkdtemp(prefix='relstorage-cache-')
    return factory.storage(zap=zap, blob_dir=cache, shared_blob_dir=False,
                           blob_chunk_size=CHUNK), cache


def _build_blobs(factory, sizes):
    """A database whose root holds one Blob per size in *sizes* (named
    by index); returns ``(oids, contents)``."""
    storage, cache = _blob_storage(factory, zap=True)
    db = ZODB.DB(storage)
    contents = [bytes(range(65, 65 + 26)) * 3 for _ in sizes]
    contents = [c[:size] for c, size in zip(contents, sizes)]
    with db.transaction() as conn:
        for n, data in enumerate(contents):
            blob = ZODB.blob.Blob()
            with blob.open('w') as f:
                f.write(data)
            conn.root()[n] = blob
    with db.transaction() as conn:
        oids = [conn.root()[n]._p_oid for n in range(len(sizes))]
    db.close()
    shutil.rmtree(cache, ignore_errors=True)
    return oids, contents


def _change_chunks(factory, oid, statements):
    """Run *statements* (SQL with ``{blob}`` for the blob_id of *oid*'s
    current revision) on the store connection."""
    adapter = factory.adapter()
    session = adapter.connect(for_store=True)
    try:
        session.begin()
        blob_id = session.scalar(
            'SELECT blob_id FROM object_state WHERE zoid = %s '
            'ORDER BY tid DESC LIMIT 1', (int.from_bytes(oid, 'big'),))
        for sql, params in statements:
            session.execute(sql.format(blob=blob_id), params)
        session.commit()
    finally:
        session.close()
        adapter.close()


def _read_blob(storage, oid):
    with storage.openCommittedBlobFile(oid, storage.load(oid)[1]) as f:
        return f.read()


def _check_blobs(factory, oids, contents, damaged, expect=CorruptRecord):
    """Reading and copying the blob of ``oids[damaged]`` gives *expect*
    (CorruptRecord naming the object; POSKeyError for a blob with no data
    at all, which a copy counts as missing, as ZODB's copies do; None for
    damage that cannot be seen), the other blobs read whole, and no
    partial file is left in the cache."""
    storage, cache = _blob_storage(factory)
    try:
        for n, oid in enumerate(oids):
            if n != damaged:
                assert _read_blob(storage, oid) == contents[n]
            elif expect is None:
                _read_blob(storage, oid)
            else:
                with pytest.raises(expect) as caught:
                    _read_blob(storage, oid)
                _names(caught.value, oid)
        assert not [name for _, _, files in os.walk(cache)
                    for name in files if name.endswith('.tmp')]
        destination = DatabaseFactory('sqlite', factory.keep_history)
        copy_cache = tempfile.mkdtemp(prefix='relstorage-copy-')
        try:
            copy = destination.storage(zap=True, blob_dir=copy_cache)
            try:
                if expect is CorruptRecord:
                    with pytest.raises(CorruptRecord) as caught:
                        copy.copyTransactionsFrom(storage)
                    _names(caught.value, oids[damaged])
                else:
                    copy.copyTransactionsFrom(storage)
                    for n, oid in enumerate(oids):
                        if n == damaged and expect is POSKeyError:
                            with pytest.raises(POSKeyError):
                                _read_blob(copy, oid)
                        elif n != damaged:
                            assert _read_blob(copy, oid) == contents[n]
            finally:
                copy.close()
        finally:
            shutil.rmtree(copy_cache, ignore_errors=True)
            destination.cleanup()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        storage.close()


def _names(error, oid):
    assert oid_repr(oid) in str(error) or (
        '0x%x' % int.from_bytes(oid, 'big')) in str(error), error


def _sequence_damage(kind, count):
    """Statements doing *kind* of damage to a blob of *count* chunks."""
    where = 'WHERE blob_id = {blob} AND chunk_num = %s'
    if kind == 'missing':
        return [('DELETE FROM blob_chunk ' + where, (n,))
                for n in range(count)]
    return {
        'first': [('DELETE FROM blob_chunk ' + where, (0,))],
        'middle': [('DELETE FROM blob_chunk ' + where, (count // 2,))],
        'last': [('DELETE FROM blob_chunk ' + where, (count - 1,))],
        'renumbered': [('UPDATE blob_chunk SET chunk_num = chunk_num + 100 '
                        'WHERE blob_id = {blob}', ())],
        'shortened': [('UPDATE blob_chunk SET chunk = %s ' + where,
                       (b'abc', 1))],
        'lengthened': [('UPDATE blob_chunk SET chunk = %s ' + where,
                        (b'x' * (CHUNK + 3), count - 1))],
    }[kind]


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'])
@pytest.mark.parametrize('kind', ['missing', 'first', 'middle', 'last',
                                  'renumbered', 'shortened', 'lengthened'])
@pytest.mark.parametrize('size', [45, 32], ids=['45B', '32B'])
def test_broken_blob_chunk_sequences(db, keep_history, kind, size):
    require(db)
    factory = DatabaseFactory(db, keep_history)
    try:
        # 45 bytes: chunks of 8 x5 and 5; 32 bytes: 8 x4 and an empty one.
        oids, contents = _build_blobs(factory, [size, 20])
        count = size // CHUNK + 1
        _change_chunks(factory, oids[0], _sequence_damage(kind, count))
        _check_blobs(factory, oids, contents, 0, POSKeyError
                     if kind == 'missing' else CorruptRecord)
    finally:
        factory.cleanup()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), size=st.integers(0, 60))
def test_chunks_lost_at_random_on_sqlite(data, size):
    count = size // CHUNK + 1
    lost = data.draw(st.sets(st.integers(0, count - 1), min_size=1))
    factory = DatabaseFactory('sqlite', False)
    try:
        oids, contents = _build_blobs(factory, [size, 9])
        _change_chunks(factory, oids[0], [
            ('DELETE FROM blob_chunk WHERE blob_id = {blob} '
             'AND chunk_num = %s', (n,)) for n in sorted(lost)])
        if lost == set(range(count)):
            expect = POSKeyError
        elif lost == set(range(1, count)):
            expect = None  # chunk 0 alone looks like a blob of one chunk
        else:
            expect = CorruptRecord
        _check_blobs(factory, oids, contents, 0, expect)
    finally:
        factory.cleanup()


# Ids out of range: no row the storage writes has a negative oid or tid
# (ZODB's ids are unsigned; the columns are signed 64-bit).

def _insert_copy(factory, oid, tid):
    """A copy of the root's current row under *oid* and *tid*."""
    adapter = factory.adapter()
    session = adapter.connect(for_store=True)
    try:
        session.begin()
        size, state = session.fetchone(
            'SELECT state_size, state FROM object_state WHERE zoid = 0 '
            'ORDER BY tid DESC LIMIT 1')
        if factory.keep_history:
            session.execute(
                'INSERT INTO object_state (zoid, tid, prev_tid, state_size, '
                'state) VALUES (%s, %s, 0, %s, %s)', (oid, tid, size, state))
        else:
            session.execute(
                'INSERT INTO object_state (zoid, tid, state_size, state) '
                'VALUES (%s, %s, %s, %s)', (oid, tid, size, state))
        if factory.keep_history:
            session.execute('INSERT INTO current_object (zoid, tid) '
                            'VALUES (%s, %s)', (oid, tid))
        session.commit()
    finally:
        session.close()
        adapter.close()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'])
@pytest.mark.parametrize('oid, tid', [(-5, None), (7, -9)],
                         ids=['negative-oid', 'negative-tid'])
def test_ids_out_of_range(db, keep_history, oid, tid):
    require(db)
    factory = DatabaseFactory(db, keep_history)
    try:
        states = _build(factory)
        storage = factory.storage()
        last = storage.lastTransaction()
        storage.close()
        _insert_copy(factory, oid, tid if tid is not None
                     else int.from_bytes(last, 'big'))
        storage = factory.storage()
        try:
            operations = {}
            if oid >= 0:
                operations.update(
                    load=lambda: storage.load(p64(oid)),
                    history=lambda: storage.history(p64(oid)),
                    before=lambda: storage.loadBefore(p64(oid), last))
            operations.update({
                'iterate': lambda: [r.oid for t in storage.iterator()
                                    for r in t],
                'iternext': lambda: _iternext(storage),
                'copy': lambda: _copy(storage),
                # Last: with garbage collection it removes the row.
                'pack': lambda: storage.pack(time.time() + 1, referencesf),
            })
            for name, operation in operations.items():
                try:
                    operation()
                except CorruptRecord as e:
                    assert str(oid) in str(e) and 'range' in str(e), e
                except POSKeyError:
                    # Handled: no revision before the view (a negative tid
                    # lies before every transaction), or, with history, no
                    # transaction the revision belongs to.
                    assert name == 'before' or (
                        name == 'history' and keep_history), name
            for other, other_state in states.items():
                assert storage.load(other)[0] == other_state
            # The database still takes commits.
            db = ZODB.DB(storage)
            with db.transaction() as conn:
                conn.root()['after'] = 1
            db.close()
        finally:
            storage.close()
    finally:
        factory.cleanup()


def _copy(storage):
    destination = DatabaseFactory('sqlite', storage._adapter.keep_history)
    try:
        copy = destination.storage(zap=True)
        try:
            copy.copyTransactionsFrom(storage)
        finally:
            copy.close()
    finally:
        destination.cleanup()
