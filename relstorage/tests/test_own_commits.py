"""An instance reads back what it has just committed: after its own
``tpc_finish``, ``loadBefore(oid, tid)`` for a tid past its snapshot
answers from data at least that new, before any poll moves the snapshot
(every database, both modes)."""
import pytest
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.tests.StorageTestBase import zodb_unpickle
from ZODB.utils import load_current
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64


def _commit(storage, oid, serial, value):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, serial, zodb_pickle(MinPO(value)), '', t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def _value(data):
    return zodb_unpickle(data).value


def _just_past_last(storage):
    return p64(u64(storage.lastTransaction()) + 1)


@pytest.fixture
def root(factory):
    storage = factory.storage()
    yield storage
    storage.close()


def test_new_object_is_loadable_right_after_its_commit(root):
    inst = root.new_instance()
    inst.poll_invalidations()
    oid = inst.new_oid()
    tid = _commit(inst, oid, z64, 1)
    assert inst.lastTransaction() == tid
    data, serial = load_current(inst, oid)
    assert (serial, _value(data)) == (tid, 1)
    data, start, end = inst.loadBefore(oid, _just_past_last(inst))
    assert (start, end, _value(data)) == (tid, None, 1)
    inst.release()


def test_changed_object_reads_back_new_state_and_stores_on_it(root):
    inst = root.new_instance()
    inst.poll_invalidations()
    oid = inst.new_oid()
    first = _commit(inst, oid, z64, 1)
    inst.poll_invalidations()
    second = _commit(inst, oid, first, 2)
    data, serial = load_current(inst, oid)
    assert (serial, _value(data)) == (second, 2)
    # Storing on the serial just read is no conflict with itself.
    third = _commit(inst, oid, serial, 3)
    data, serial = load_current(inst, oid)
    assert (serial, _value(data)) == (third, 3)
    inst.release()


def test_read_past_the_view_sees_others_commits_too(root):
    """Data *at least* as new as the tid asked for: what another instance
    committed between this one's view and its own commit is there."""
    mine, other = root.new_instance(), root.new_instance()
    mine.poll_invalidations()
    other.poll_invalidations()
    theirs = other.new_oid()
    their_tid = _commit(other, theirs, z64, 'theirs')
    own_tid = _commit(mine, mine.new_oid(), z64, 'mine')
    assert own_tid > their_tid
    data, serial = load_current(mine, theirs)
    assert (serial, _value(data)) == (their_tid, 'theirs')
    for inst in (mine, other):
        inst.release()


def test_reads_within_the_view_keep_the_snapshot(root):
    """A loadBefore that does not ask past the view answers as of the
    view: another instance's later commit is not seen."""
    inst, other = root.new_instance(), root.new_instance()
    other.poll_invalidations()
    oid = other.new_oid()
    first = _commit(other, oid, z64, 1)
    inst.poll_invalidations()
    view = inst.lastTransaction()
    _commit(other, oid, first, 2)
    data, start, _ = inst.loadBefore(oid, p64(u64(view) + 1))
    assert (start, _value(data)) == (first, 1)
    for i in (inst, other):
        i.release()


def test_object_unknown_past_the_view_is_still_a_poskeyerror(root):
    inst = root.new_instance()
    inst.poll_invalidations()
    _commit(inst, inst.new_oid(), z64, 1)
    with pytest.raises(POSKeyError):
        load_current(inst, p64(0x7fff0000))
    inst.release()
