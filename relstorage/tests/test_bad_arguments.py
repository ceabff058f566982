"""Arguments that no row can match (a negative or huge history size, a
tid past what a column holds, a pack time no tid can name) get the same
clear answer on every database, decided before any SQL is sent, and the
instance that was asked stays usable: its snapshot is not left aborted
by a statement the database refused."""
import math

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
from ZODB.POSException import UndoError
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import z64

from relstorage.exceptions import InvalidPackTime
from relstorage.exceptions import RelStorageError
from relstorage.storage.load import MAX_ID

#: An oid or tid just past what a signed 64-bit column holds, and the
#: largest 8-byte one.
PAST_COLUMNS = (p64(1 << 63), p64((1 << 64) - 1))


@pytest.fixture
def site(factory):
    """``(storage, db, instance, oid)``: an object changed in three
    transactions, and a storage instance (as a ZODB connection has one)
    that has polled."""
    storage = factory.storage()
    db = ZODB.DB(storage)
    for n in range(3):
        with transaction.manager:
            root = db.open().root()
            if n == 0:
                root['a'] = PersistentMapping()
            root['a']['n'] = n
    with transaction.manager:
        oid = db.open().root()['a']._p_oid
    instance = storage.new_instance()
    instance.poll_invalidations()
    yield storage, db, instance, oid
    instance.release()
    db.close()


def _still_usable(instance, oid):
    """A load through *instance* and a commit through it both work."""
    state, tid = instance.load(oid)
    assert state
    meta = TransactionMetaData()
    instance.tpc_begin(meta)
    instance.store(oid, tid, state, '', meta)
    instance.tpc_vote(meta)
    assert instance.tpc_finish(meta) > tid
    instance.poll_invalidations()
    assert instance.load(oid)[0] == state


def test_history_sizes_as_filestorage(factory, site):
    """As FileStorage: a size of zero or less gives no revisions (for an
    object that exists), None the default one, a huge one all; anything
    but an integer is a TypeError naming the argument."""
    _, _, instance, oid = site
    revisions = 3 if factory.keep_history else 1
    for size in (-1, 0, -(1 << 70)):
        assert instance.history(oid, size) == []
    # (PostgreSQL refused a negative LIMIT, which left the instance's
    # snapshot aborted: every later read failed until the next poll.)
    assert instance.load(oid)[0]
    assert len(instance.history(oid, None)) == 1
    assert len(instance.history(oid)) == 1
    assert len(instance.history(oid, 2)) == min(2, revisions)
    for size in (1 << 63, 1 << 70):
        entries = instance.history(oid, size)
        assert len(entries) == revisions
        assert entries[0]['tid'] == instance.load(oid)[1]
    with pytest.raises(TypeError, match='size'):
        instance.history(oid, 1.5)
    for missing in (p64(0x7ffffff0),) + PAST_COLUMNS:
        with pytest.raises(POSKeyError):
            instance.history(missing, -1)
    _still_usable(instance, oid)


def test_load_of_oids_no_row_can_have(factory, site):
    """An oid past the columns, or not 8 bytes long, is a POSKeyError
    naming it, from an instance (whose hits take no lock) and from the
    storage used directly; both stay usable."""
    storage, _, instance, oid = site
    for reader in (instance, storage):
        for bad in PAST_COLUMNS + (b'abc', b'', b'123456789'):
            with pytest.raises(POSKeyError) as caught:
                reader.load(bad)
            assert caught.value.args[0] == bad
        assert reader.load(oid)[0]
    _still_usable(instance, oid)


def test_older_reads_of_oids_not_8_bytes(factory, site):
    """loadSerial, loadBefore and history take an oid that is not 8 bytes
    long for none: a POSKeyError naming it (an empty oid was read as 0,
    the root object, before)."""
    storage, _, instance, oid = site
    tid = instance.load(oid)[1]
    for bad in (b'', b'\0', b'abc', b'\0' * 9):
        for read in (lambda: instance.loadSerial(bad, tid),
                     lambda: instance.loadBefore(bad, p64(MAX_ID)),
                     lambda: instance.history(bad, 1)):
            with pytest.raises(POSKeyError) as caught:
                read()
            assert caught.value.args[0] == bad
    _still_usable(instance, oid)


def test_undo_of_a_tid_no_column_holds(hp_factory):
    """Undo of an id that names no transaction (past what a column holds,
    or not 8 bytes) is ZODB's UndoError, as FileStorage raises; the
    transaction aborts and the instance commits afterwards."""
    storage = hp_factory.storage()
    db = ZODB.DB(storage)
    try:
        with transaction.manager:
            db.open().root()['a'] = PersistentMapping(n=1)
        instance = storage.new_instance()
        instance.poll_invalidations()
        for bad in PAST_COLUMNS + (b'abc', b'', b'123456789'):
            meta = TransactionMetaData()
            instance.tpc_begin(meta)
            with pytest.raises(UndoError, match='no such transaction'):
                instance.undo(bad, meta)
            instance.tpc_abort(meta)
            _still_usable(instance, z64)
        instance.release()
    finally:
        db.close()


#: Pack times no tid can name: before 1900, the end of tids (5908) and
#: past it, no finite number, no number.
ABSURD_TIMES = (-1e10, -2208988801, 124299454080, 1e13, 1e20, 1 << 70,
                math.nan, math.inf, -math.inf, '2026-01-01', None, True)


def test_pack_time_no_tid_can_name(factory, site):
    """A pack time no tid can name is InvalidPackTime naming it (a
    ValueError too, as callers of pack(t) expect for a bad time); nothing
    was packed, and the storage packs and commits afterwards."""
    from ZODB.TimeStamp import TimeStamp
    storage, _, instance, oid = site
    before = storage.history(oid, 10)
    for when in ABSURD_TIMES:
        with pytest.raises(InvalidPackTime) as exc:
            storage.pack(when, referencesf)
        assert 'pack time %r' % (when,) in str(exc.value)
        assert isinstance(exc.value, RelStorageError)
        assert isinstance(exc.value, ValueError)
        assert storage.history(oid, 10) == before
        _still_usable(instance, oid)
        before = storage.history(oid, 10)
    # The earliest time a tid names packs nothing away; the newest commit's
    # time packs every old revision.
    storage.pack(-2208988800, referencesf)
    assert storage.history(oid, 10) == before
    newest = TimeStamp(storage.lastTransaction()).timeTime() + 1
    storage.pack(newest, referencesf)
    assert len(storage.history(oid, 10)) == 1
    _still_usable(instance, oid)


def test_tid_bounds_past_the_columns(factory, site):
    """Listing bounds past what a column holds: the undo log and the
    iterator read to the newest transaction, a start past it finds
    nothing, record iteration past it is at its end."""
    storage, _, instance, oid = site
    every = [t.tid for t in storage.iterator()]
    assert every
    for stop in PAST_COLUMNS:
        assert [t.tid for t in storage.iterator(None, stop)] == every
    for start in PAST_COLUMNS:
        assert list(storage.iterator(start)) == []
        with pytest.raises(ValueError, match='no more records'):
            instance.record_iternext(start)
    log = instance.undoLog(0, 1 << 70)
    assert len(log) == (len(every) if factory.keep_history else 0)
    assert instance.undoLog(-5, -(1 << 70)) == log
    _still_usable(instance, oid)
