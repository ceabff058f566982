"""Packing on every database and mode: what goes, what stays, batches."""
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.POSException import POSKeyError
from ZODB.POSException import StorageError
from ZODB.serialize import referencesf

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env


def _build(db):
    """A root with two children; one child later unlinked (garbage); the
    other changed three times (old revisions)."""
    with db.transaction() as conn:
        conn.root()['keep'] = PersistentMapping(n=0)
        conn.root()['drop'] = PersistentMapping(n=0)
    for n in (1, 2, 3):
        with db.transaction() as conn:
            conn.root()['keep']['n'] = n
    with db.transaction() as conn:
        keep = conn.root()['keep']
        drop = conn.root()['drop']
        keep_oid, drop_oid = keep._p_oid, drop._p_oid
        keep_tid = keep._p_serial
        del conn.root()['drop']
    return keep_oid, keep_tid, drop_oid


@pytest.mark.parametrize('batch_timeout', [1.0, 0.0])
def test_pack_removes_garbage_and_old_revisions(factory, batch_timeout):
    storage = factory.storage(pack_batch_timeout=batch_timeout)
    db = ZODB.DB(storage)
    try:
        keep_oid, keep_tid, drop_oid = _build(db)
        before = len(storage)
        old_serials = [h['tid'] for h in storage.history(keep_oid, 10)]
        rows_before = _state_rows(storage)
        time.sleep(0.01)
        result = storage.pack_with_result(time.time(), referencesf)
        assert result['objects_removed'] == 1
        # What the pack says it removed is what went.
        gone = set(rows_before) - set(_state_rows(storage))
        assert result['revisions_removed'] == len(gone)
        assert result['bytes_removed'] == sum(
            rows_before[key] for key in gone) > 0
        assert result['batches'] >= 1
        assert len(storage) == before - 1
        with pytest.raises(POSKeyError):
            storage.load(drop_oid)
        with db.transaction() as conn:
            assert conn.root()['keep']['n'] == 3
            assert 'drop' not in conn.root()
        if factory.keep_history:
            assert len(old_serials) == 4
            assert [h['tid'] for h in storage.history(keep_oid, 10)] == [
                keep_tid]
            for serial in old_serials[1:]:
                with pytest.raises(POSKeyError):
                    storage.loadSerial(keep_oid, serial)
            # Packed transactions are no longer offered for undo.
            assert all(d['id'] > keep_tid for d in storage.undoLog())
        # A second pack finds nothing more to do.
        again = storage.pack_with_result(time.time(), referencesf)
        assert again['objects_removed'] == 0
    finally:
        db.close()


def test_pack_without_gc_keeps_unreachable_objects(factory):
    storage = factory.storage(pack_gc=False)
    db = ZODB.DB(storage)
    try:
        keep_oid, keep_tid, drop_oid = _build(db)
        storage.pack(time.time(), referencesf)
        assert storage.load(drop_oid)
        if factory.keep_history:
            assert len(storage.history(keep_oid, 10)) == 1
    finally:
        db.close()


def test_pack_to_a_time_before_an_earlier_pack_is_refused(hp_factory):
    storage = hp_factory.storage()
    db = ZODB.DB(storage)
    try:
        _build(db)
        early = time.time()
        time.sleep(0.01)
        with db.transaction() as conn:
            conn.root()['later'] = 1
        storage.pack(time.time(), referencesf)
        with pytest.raises(StorageError) as exc:
            storage.pack(early, referencesf)
        assert 'earlier pack' in str(exc.value)
    finally:
        db.close()
        transaction.abort()


KILLED_PACK = '''
import os, sys, time
from ZODB.serialize import referencesf
from relstorage.storage.pack import pack
from relstorage.testing.dbs import DatabaseFactory
pack.STEP = 100  # two batches of the 600 garbage objects, then the kill
storage = DatabaseFactory.in_child(*sys.argv[1:4]).storage(
    pack_batch_timeout=0)

def die_after_two_batches(done, total):
    print(done, total, flush=True)
    if done >= 200:
        os._exit(9)  # as abrupt as SIGKILL: no cleanup, no rollback

storage.pack(time.time(), referencesf, progress=die_after_two_batches)
print('pack finished?!', flush=True)
'''


def _fill_with_garbage(db, n=600):
    with db.transaction() as conn:
        for i in range(n):
            conn.root()[i] = PersistentMapping(i=i)
        conn.root()['kept'] = PersistentMapping(n=0)
    for n_ in range(3):
        with db.transaction() as conn:
            conn.root()['kept']['n'] = n_
    with db.transaction() as conn:
        for i in range(n):
            del conn.root()[i]


def _contents(storage):
    """oid -> (state, number of revisions): what a pack leaves behind."""
    result = {}
    next_oid = None
    while True:
        oid, tid, data, next_oid = storage.record_iternext(next_oid)
        revisions = (len(storage.history(oid, 100))
                     if storage._adapter.keep_history else 1)
        result[oid] = (data, revisions)
        if next_oid is None:
            return result


def test_killed_pack_then_rerun_equals_uninterrupted_pack(factory):
    import subprocess
    import sys
    # Two identical databases: 'dst' packs in one go, 'main' is killed in
    # the middle of its pack and packed again.
    dst = factory.storage('dst', zap=True)
    main = factory.storage()
    for storage in (main, dst):
        db = ZODB.DB(storage)
        _fill_with_garbage(db)
        db.close()
    time.sleep(0.01)
    reference = factory.storage('dst')
    reference.pack(time.time(), referencesf)
    expected = _contents(reference)
    reference.close()

    env = child_env()
    out = subprocess.run(
        [sys.executable, '-c', KILLED_PACK, factory.db,
         str(factory.keep_history), factory.data_dir()],
        capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 9, out.stderr
    assert '200 ' in out.stdout and 'finished' not in out.stdout
    storage = factory.storage()
    try:
        # Half packed, yet consistent: everything reachable loads.
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            assert conn.root()['kept']['n'] == 2
            assert len(conn.root()) == 1
        db.close()
        storage = factory.storage()
        assert 2 < len(storage) < 603  # some garbage went, not all
        storage.pack(time.time(), referencesf)
        assert _contents(storage) == expected
    finally:
        storage.close()


def test_pack_waits_while_the_commit_lock_is_busy(factory):
    import threading
    storage = factory.storage(pack_commit_busy_delay=0.05)
    db = ZODB.DB(storage)
    try:
        keep_oid, keep_tid, drop_oid = _build(db)
        # A pre-pack keeps every state's references (in transactions of
        # its own, which wait for a writer as commits do): the pack then
        # reads no state again, and its only wait is for its batches.
        storage.pack_with_result(time.time(), referencesf,
                                 prepack_only=True)
        adapter = storage._adapter
        # Another committer holds the commit lock.
        holder = adapter.connect(for_store=True)
        holder.begin(adapter.store_begin_sql)
        adapter.locker.hold_commit_lock(holder, adapter.mover.last_tid_sql)
        results = []
        packer = threading.Thread(target=lambda: results.append(
            storage.pack_with_result(time.time(), referencesf)))
        packer.start()
        packer.join(0.5)
        assert packer.is_alive() and not results  # it yields, retrying
        holder.rollback()
        adapter.locker.after_rollback(holder)
        packer.join(60)
        assert results and results[0]['objects_removed'] == 1
        assert results[0]['prepack_unpickled'] == 0
        # It waited in line for the lock, and says so.
        assert results[0]['busy_waits'] >= 1
        assert results[0]['busy_seconds'] > 0
        holder.close()
    finally:
        db.close()


WRITER = '''
import sys, time, transaction, ZODB
from ZODB.POSException import ConflictError
from relstorage.testing.dbs import DatabaseFactory
name, count = sys.argv[4:6]
db = ZODB.DB(DatabaseFactory.in_child(*sys.argv[1:4]).storage())
tm = transaction.TransactionManager()
conn = db.open(transaction_manager=tm)
done = 0
while done < int(count):
    try:
        tm.begin()
        counter = conn.root()[name]
        counter['n'] += 1
        counter['garbage'] = conn.root().__class__()  # the old one dies
        tm.commit()
        done += 1
    except ConflictError:
        tm.abort()
db.close()
print(name, 'committed', done)
'''


def test_pack_while_other_processes_commit(factory):
    import subprocess
    import sys
    db = ZODB.DB(factory.storage())
    with db.transaction() as conn:
        for name in ('w1', 'w2'):
            conn.root()[name] = PersistentMapping(n=0)
    db.close()
    env = child_env()
    writers = [subprocess.Popen(
        [sys.executable, '-c', WRITER, factory.db, str(factory.keep_history),
         factory.data_dir(), name, '100'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for name in ('w1', 'w2')]
    storage = factory.storage(pack_batch_timeout=0.05)
    packs = 0
    try:
        while any(w.poll() is None for w in writers):
            storage.pack(time.time(), referencesf)
            packs += 1
        outputs = [w.communicate(timeout=120) for w in writers]
        for w, (out, err) in zip(writers, outputs):
            assert w.returncode == 0, err
            assert 'committed 100' in out
        storage.pack(time.time(), referencesf)
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            # No commit was lost, and everything reachable loads.
            assert conn.root()['w1']['n'] == 100
            assert conn.root()['w2']['n'] == 100
            assert conn.root()['w1']['garbage'] is not None
        db.close()
        assert packs >= 1
        # Only the root, the two counters and their current children remain.
        check = factory.storage()
        assert len(check) == 5
        check.close()
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()


def test_prepack_only_then_pack_with_its_state(factory):
    """pack-prepack-only finds the garbage and removes nothing; a later
    pack with pack-skip-prepack removes it, to the pre-pack's time, but
    spares what commits in between made reachable again (a chain of two
    garbage objects, relinked by its head) and keeps what they added."""
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            root = conn.root()
            root['head'] = PersistentMapping(tail=PersistentMapping(n=1))
            root['gone'] = PersistentMapping(n=2)
            root['kept'] = PersistentMapping(n=0)
        with db.transaction() as conn:
            root = conn.root()
            head = root.pop('head')
            gone = root.pop('gone')
            head_oid, tail_oid = head._p_oid, head['tail']._p_oid
            gone_oid = gone._p_oid
            root['kept']['n'] = 1
            keep_oid = root['kept']._p_oid
        before = len(storage)
        time.sleep(0.01)
        prepacked = storage.pack_with_result(time.time(), referencesf,
                                             prepack_only=True)
        assert prepacked['garbage_found'] == 3
        assert prepacked['batches'] == 0
        assert len(storage) == before
        if factory.keep_history:
            assert len(storage.history(keep_oid, 10)) == 2

        # After the pre-pack: the head of the unlinked chain is linked
        # again, and a new object is added and unlinked.
        with db.transaction() as conn:
            head = conn.get(head_oid)
            conn.root()['head'] = head
            conn.root()['new'] = PersistentMapping()
        with db.transaction() as conn:
            del conn.root()['new']
        packer = factory.storage(pack_skip_prepack=True)
        try:
            result = packer.pack_with_result(time.time() + 3600, referencesf)
            assert result['objects_removed'] == 1
            with pytest.raises(POSKeyError):
                packer.load(gone_oid)
            packer.load(tail_oid)  # rescued through its head
            # 'new' came after the pre-pack: not packed yet.
            assert len(packer) == before + 1 - 1
            if factory.keep_history:
                # Packed to the pre-pack's time, not to the time given.
                assert len(packer.history(keep_oid, 10)) == 1
                # The root: its revision current then and the two since.
                assert len(packer.history(b'\0' * 8, 10)) == 3
        finally:
            packer.close()
        with db.transaction() as conn:
            assert conn.root()['head']['tail']['n'] == 1
        # The state is used once; without one, the pack says what to do.
        with pytest.raises(StorageError, match='pre-pack first'):
            storage.pack_with_result(time.time(), referencesf,
                                     use_prepack_state=True)
        with pytest.raises(ValueError, match='both'):
            storage.pack_with_result(time.time(), referencesf,
                                     prepack_only=True,
                                     use_prepack_state=True)
    finally:
        db.close()


def test_full_pack_discards_an_earlier_prepack_state(factory):
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        _build(db)
        time.sleep(0.01)
        storage.pack_with_result(time.time(), referencesf, prepack_only=True)
        storage.pack(time.time(), referencesf)
        with pytest.raises(StorageError, match='pre-pack first'):
            storage.pack_with_result(time.time(), referencesf,
                                     use_prepack_state=True)
    finally:
        db.close()


def test_a_page_of_states_gives_each_state_its_own_references():
    """The pre-pack reads a page of states with one unpickler: each state
    gets exactly what ZODB's referencesf finds in it alone (weak and
    cross-database references left out, as there), and a damaged state
    anywhere in the page stops the pack naming that object."""
    from BTrees.OOBTree import OOBTree
    from persistent.wref import WeakRef
    from ZODB.utils import u64

    from relstorage.exceptions import CorruptRecord
    from relstorage.storage.pack.pack import Pack
    factory = DatabaseFactory('sqlite', True)
    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            root = conn.root()
            root['tree'] = tree = OOBTree()
            for i in range(300):  # several buckets
                tree[i] = PersistentMapping(n=i, text='x' * (i % 7))
            root['weak'] = PersistentMapping(ref=WeakRef(tree[1]))
            root['empty'] = PersistentMapping()
        page = []
        oid = 0
        while True:
            try:
                page.append((oid, storage.load(ZODB.utils.p64(oid))[0]))
            except POSKeyError:
                break
            oid += 1
        page.insert(3, (99999, b''))  # a state-less row (a deletion)
        pack = Pack(storage._adapter, storage._options, storage._cache,
                    storage._blobs, storage._metrics, time.time(),
                    referencesf, gc=True)
        expected = [(o, sorted({u64(r) for r in referencesf(s)}))
                    for o, s in page if s and referencesf(s)]
        assert [(o, list(refs)) for o, refs in pack.referring(page)] \
            == expected
        for damaged in (0, 5, len(page) - 1):
            oid, state = page[damaged]
            for bad in (state[:len(state) // 2], state[:-1], b'\x80\x03\xfe'):
                hurt = list(page)
                hurt[damaged] = (oid, bad)
                with pytest.raises(CorruptRecord, match='0x%x' % oid):
                    list(pack.referring(hurt))
    finally:
        db.close()
        factory.cleanup()


def _state_rows(storage):
    """``{(zoid, tid): state_size}`` of every row of object_state."""
    session = storage._adapter.connect(for_store=False)
    try:
        session.begin()
        return {(zoid, tid): size for zoid, tid, size in session.fetchall(
            'SELECT zoid, tid, state_size FROM object_state')}
    finally:
        session.rollback_quietly()
        session.close()


def _delete(storage, oid, serial):
    from ZODB.Connection import TransactionMetaData
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(oid, serial, t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def _store(storage, oid, serial, state):
    from ZODB.Connection import TransactionMetaData
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, serial, state, '', t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def _rows(storage, oid):
    """How many rows of object_state *oid* has."""
    from ZODB.utils import u64
    zoid = u64(oid)
    return sum(1 for key in _state_rows(storage) if key[0] == zoid)


@pytest.mark.parametrize('gc,graph_mb', [(True, 512), (True, 0), (False, 0)],
                         ids=['gc', 'gc-graph-in-database', 'no-gc'])
def test_pack_removes_objects_deleted_by_the_pack_time(factory, gc,
                                                      graph_mb):
    """deleteObject's deletions current at the pack time go, with or
    without garbage collection (its graph walked in this process or in
    the database): one the root still refers to (a pre-pack finds it
    among the states it reads) and one unlinked first; one deleted after
    the pack time stays until a later pack; one deleted before it and
    stored again after it stays with its new state."""
    storage = factory.storage(pack_graph_mb=graph_mb)
    db = ZODB.DB(storage)
    names = ('kept', 'referred', 'loose', 'late', 'revived')
    try:
        with db.transaction() as conn:
            for name in names:
                conn.root()[name] = PersistentMapping(name=name)
        with db.transaction() as conn:
            objects = {name: (conn.root()[name]._p_oid,
                              conn.root()[name]._p_serial)
                       for name in names}
            state = storage.load(objects['revived'][0])[0]
            del conn.root()['loose']
        _delete(storage, *objects['referred'])
        _delete(storage, *objects['loose'])
        deleted = _delete(storage, *objects['revived'])
        time.sleep(0.02)
        pack_time = time.time()
        time.sleep(0.02)
        _delete(storage, *objects['late'])
        revived = _store(storage, objects['revived'][0], deleted, state)
        storage.pack_with_result(pack_time, referencesf, gc=gc)
        assert _rows(storage, objects['referred'][0]) == 0
        assert _rows(storage, objects['loose'][0]) == 0
        assert _rows(storage, objects['kept'][0]) >= 1
        assert storage.load(objects['revived'][0]) == (state, revived)
        # The late one keeps its state as of the pack time (with history)
        # or its tombstone (without): a pack to now removes it.
        assert _rows(storage, objects['late'][0]) >= 1
        time.sleep(0.02)
        storage.pack_with_result(time.time(), referencesf, gc=gc)
        assert _rows(storage, objects['late'][0]) == 0
        assert _rows(storage, objects['kept'][0]) == 1
        with db.transaction() as conn:
            assert conn.root()['kept']['name'] == 'kept'
    finally:
        db.close()


def test_prepack_pages_of_any_size_give_each_object_once(factory):
    """The pre-pack reads the states current at the pack time a page at
    a time (with history, as runs of every revision up to then): however
    the pages cut an object's revisions, each object comes once, in
    order, with its state at the pack time, and the deletions current
    then and still current are named."""
    from ZODB.utils import u64
    storage = factory.storage()
    db = ZODB.DB(storage)
    session = None
    try:
        with db.transaction() as conn:
            for name in 'abcde':
                conn.root()[name] = PersistentMapping(n=0)
        for n in range(1, 6):  # a has six revisions, b two
            with db.transaction() as conn:
                conn.root()['a']['n'] = n
                if n == 1:
                    conn.root()['b']['n'] = n
        oids = {}
        with db.transaction() as conn:
            for name in 'abcde':
                oids[name] = (conn.root()[name]._p_oid,
                              conn.root()[name]._p_serial)
        _delete(storage, *oids['c'])
        pack_tid = u64(storage.lastTransaction())
        with db.transaction() as conn:  # after the pack time
            conn.root()['b']['n'] = 9
            conn.root()['f'] = PersistentMapping(n=0)
        session = storage._adapter.connect(for_store=False)
        session.begin()
        newest = {}
        for zoid, tid, state in sorted(session.fetchall(
                'SELECT zoid, tid, state FROM object_state')):
            if tid <= pack_tid:
                newest[zoid] = None if state is None else bytes(state)
        # Without history, the root and b were replaced after the pack
        # time.
        assert len(newest) == (6 if factory.keep_history else 4)
        assert newest[u64(oids['c'][0])] is None
        packer = storage._adapter.packer
        for limit in (1, 2, 3, 4, 1000):
            read, deleted, after = [], [], -1
            while True:
                page = packer.states_at(session, pack_tid, after, limit,
                                        deleted)
                if not page:
                    break
                read.extend((oid, state) for oid, state, *_ in page)
                after = page[-1][0]
            assert read == sorted(newest.items()), limit
            assert deleted == [u64(oids['c'][0])], limit
    finally:
        if session is not None:
            session.rollback_quietly()
            session.close()
        db.close()
