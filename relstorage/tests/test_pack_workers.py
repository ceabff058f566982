"""The pre-pack with worker processes reading references (real processes,
started as a large database would start them): the same garbage found as
without them, a damaged state read by a worker named by the pack, and a
worker that cannot start, or that stops answering, leaving its pages to
the packing process; the pack-workers option and zodbpack --workers (and
RELSTORAGE_PACK_WORKERS, which no longer changes anything)."""
import io
import logging
import os
import random
import time

import pytest
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf

from relstorage import pickledrefs
from relstorage import zodbpack
from relstorage.exceptions import CorruptRecord
from relstorage.storage.pack import prepackio
from relstorage.storage.pack import workers as refworkers
from relstorage.testing.dbs import DatabaseFactory

from .test_hostile_rows import _damage
from .test_pack_graph import _pack_and_check

SIZE = 400


@pytest.fixture
def workers(monkeypatch):
    """Small pages, and the options of a storage with two workers,
    started after the first page."""
    monkeypatch.setattr(prepackio, 'PAGE', 20)
    monkeypatch.setattr(refworkers, 'START_AFTER', 1)
    return {'pack_workers': 2}


def _graph(seed):
    rng = random.Random(seed)
    edges = {i: rng.sample(range(SIZE), rng.randint(0, 3))
             for i in range(SIZE) if rng.random() < 0.9}
    return edges, set(rng.sample(range(SIZE), 5))


def test_workers_find_the_same_garbage(factory, workers):
    edges, linked = _graph(7)
    result = _pack_and_check(factory.storage(zap=True, **workers),
                             SIZE, edges, linked)
    assert result['prepack_workers'] == 2
    # Every page went somewhere; the workers read some of them.
    assert result['prepack_worker_pages'] > 0


def test_a_worker_that_cannot_start(workers, monkeypatch, caplog):
    monkeypatch.setattr(refworkers, '_SERVE', 'import sys; sys.exit(3)')
    edges, linked = _graph(8)
    factory = DatabaseFactory('sqlite', True)
    try:
        with caplog.at_level(logging.WARNING, logger=refworkers.__name__):
            result = _pack_and_check(factory.storage(**workers), SIZE,
                                     edges, linked)
    finally:
        factory.cleanup()
    assert result['prepack_worker_pages'] == 0
    assert 'pre-pack worker process failed' in caplog.text


def test_a_worker_that_stops_answering(workers, monkeypatch, caplog):
    """A worker that says it is ready and then never answers (a process
    stuck, or stopped): past PAGE_TIMEOUT it is killed, and its pages
    are read here; the other worker goes on. (The stuck one is ready a
    second before the other, so that it takes the first page.)"""
    hang_second = (
        'import os, sys, time\n'
        'from relstorage.pickledrefs import serve, send, READY\n'
        'lock = sys.argv[1]\n'
        'try:\n'
        '    os.close(os.open(lock, os.O_CREAT | os.O_EXCL))\n'
        'except FileExistsError:\n'
        '    send(sys.stdout.buffer, READY)\n'
        '    time.sleep(3600)\n'
        'time.sleep(1)\n'
        'serve(sys.stdin.buffer, sys.stdout.buffer)\n')
    factory = DatabaseFactory('sqlite', True)
    lock = os.path.join(factory.data_dir('main'), 'first-worker')
    monkeypatch.setattr(refworkers, '_SERVE', 'import sys; exec(%r)'
                        % hang_second)
    monkeypatch.setattr(refworkers, 'PAGE_TIMEOUT', 1.5)
    real_popen = refworkers.subprocess.Popen
    started = []

    def popen(argv, **kw):
        process = real_popen(list(argv) + [lock], **kw)
        started.append(process)
        return process
    monkeypatch.setattr(refworkers.subprocess, 'Popen', popen)
    edges, linked = _graph(9)
    try:
        with caplog.at_level(logging.WARNING, logger=refworkers.__name__):
            began = time.monotonic()
            result = _pack_and_check(factory.storage(**workers), SIZE,
                                     edges, linked)
            took = time.monotonic() - began
    finally:
        factory.cleanup()
    assert len(started) == 2
    assert 'did not answer within 1.5 s' in caplog.text
    assert result['prepack_workers'] == 2
    # The first worker read pages; the stuck one none.
    assert result['prepack_worker_pages'] > 0
    assert took < 60
    # Neither process outlives the pack.
    assert [p.poll() is not None for p in started] == [True, True]


def test_zodbpack_workers_and_the_option(workers, tmp_path, monkeypatch):
    edges, linked = _graph(10)
    # The variable earlier releases read changes nothing any more.
    monkeypatch.setenv('RELSTORAGE_PACK_WORKERS', '2')
    factory = DatabaseFactory('sqlite', True)
    try:
        result = _pack_and_check(factory.storage(pack_workers=0), SIZE,
                                 edges, linked)
        assert result['prepack_workers'] == 0
        assert result['prepack_worker_pages'] == 0
        config = tmp_path / 'pack.conf'
        config.write_text(
            '%%import relstorage\n<relstorage>\n pack-workers 0\n'
            ' <sqlite3>\n  data-dir %s\n </sqlite3>\n</relstorage>\n'
            % factory.data_dir('main'))
        for argv, said in ((['-v', '-d', '0', '--workers', '1'],
                            'with 1 worker process'),
                           (['-v', '-d', '0'], None)):
            _build_more(factory)
            out = io.StringIO()
            assert zodbpack.main(argv + [str(config)], out=out) == 0
            if said:
                assert said in out.getvalue()
            else:
                assert 'worker' not in out.getvalue()
    finally:
        factory.cleanup()


def test_pack_workers_read_from_zconfig_give_the_same_pack(workers,
                                                           monkeypatch):
    """The same database packed with pack-workers 0 and 2, each read from
    a ZConfig string: the same objects are left, and the same counts come
    out; only where the pages were read differs."""
    monkeypatch.setenv('RELSTORAGE_PACK_WORKERS', '1')  # ignored
    edges, linked = _graph(11)
    counts = {}
    for count in (0, 2):
        factory = DatabaseFactory('sqlite', True)
        try:
            storage = ZODB.config.storageFromString(
                '%%import relstorage\n<relstorage>\n pack-workers %d\n'
                ' <sqlite3>\n  data-dir %s\n </sqlite3>\n</relstorage>\n'
                % (count, factory.data_dir('main')))
            assert storage._options.pack_workers == count
            result = _pack_and_check(storage, SIZE, edges, linked)
        finally:
            factory.cleanup()
        assert result['prepack_workers'] == count
        assert (result['prepack_worker_pages'] > 0) == (count > 0)
        counts[count] = {key: result[key] for key in (
            'objects_removed', 'revisions_removed', 'garbage_found')
            if key in result}
    assert counts[0] == counts[2]
    assert counts[0]['objects_removed'] > 0


def test_the_environment_sets_no_default(monkeypatch):
    monkeypatch.delenv('RELSTORAGE_PACK_WORKERS', raising=False)
    unset = refworkers.default_count()
    monkeypatch.setenv('RELSTORAGE_PACK_WORKERS', '7')
    assert refworkers.default_count() == unset
    assert 0 <= unset <= refworkers.MOST


def _build_more(factory):
    """Some new garbage to pack (the pre-pack runs only when there is
    something to pack)."""
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            conn.root()['more'] = [PersistentMapping(i=i) for i in range(50)]
        with db.transaction() as conn:
            del conn.root()['more']
        time.sleep(0.01)
    finally:
        db.close()


def test_a_worker_process_reads_pages_as_this_process_does(workers):
    # One page at a time: the first page always goes to the worker.
    db = ZODB.DB(None)
    with db.transaction() as conn:
        conn.root()['all'] = [PersistentMapping(i=i, peer=conn.root())
                              for i in range(30)]
    with db.transaction() as conn:
        oids = [o._p_oid for o in conn.root()['all']]
    page = [(int.from_bytes(oid, 'big'), db.storage.load(oid)[0])
            for oid in [ZODB.utils.z64] + oids]
    db.close()
    broken = list(page)
    broken[7] = (broken[7][0], broken[7][1][:-9])
    for pages, expected in (
            (page, pickledrefs.page_references(page)),
            (broken, pickledrefs.page_references(broken))):
        assert expected[0]  # references found...
        assert (expected[1] is None) == (pages is page)  # ...and the bad
        with refworkers.Workers(1) as workers:
            assert [tuple(answer) for _, *answer in workers.read([pages])]\
                == [expected]
            assert workers.by_workers == 1
    assert pickledrefs.page_references(broken)[1] == broken[7][0]


def test_a_damaged_state_stops_the_pack(workers):
    factory = DatabaseFactory('sqlite', False)
    try:
        db = ZODB.DB(factory.storage())
        with db.transaction() as conn:
            conn.root()['all'] = [PersistentMapping(i=i)
                                  for i in range(SIZE)]
            conn.root()['garbage'] = PersistentMapping()
        with db.transaction() as conn:
            del conn.root()['garbage']
            last = conn.root()['all'][-1]._p_oid
        state = db.storage.load(last)[0]
        db.close()
        # The last pages go to the workers: the first is read here.
        _damage(factory, last, state[:len(state) // 2], len(state) // 2)
        storage = factory.storage(**workers)
        try:
            with pytest.raises(CorruptRecord,
                               match='0x%x' % int.from_bytes(last, 'big')):
                storage.pack(time.time() + 1, referencesf)
        finally:
            storage.close()
        storage = factory.storage()
        try:  # nothing was removed, not even the garbage
            assert len(storage) == SIZE + 2
        finally:
            storage.close()
    finally:
        factory.cleanup()


def test_state_references_agree_with_zodb():
    # Ordinary references, weak references, references to an object of
    # another database and to a persistent class instance's class: the
    # same oids as ZODB's referencesf, each once, in order.
    from persistent.wref import WeakRef
    from ZODB.utils import u64
    databases = {}
    db = ZODB.DB(None, databases=databases, database_name='main')
    other = ZODB.DB(None, databases=databases, database_name='other')
    with db.transaction() as conn:
        conn.get_connection('other').root()['x'] = PersistentMapping()
    with db.transaction() as conn:
        root = conn.root()
        elsewhere = conn.get_connection('other').root()
        root['a'] = PersistentMapping(peer=root, far=elsewhere['x'])
        root['b'] = PersistentMapping(weak=WeakRef(root['a']),
                                      twice=[root['a'], root['a']])
        root['c'] = PersistentMapping()
    records = []
    for txn in db.storage.iterator():
        records.extend((u64(r.oid), r.data) for r in txn)
    assert len(records) == 5  # the root twice
    for oid, state in records:
        assert pickledrefs.state_references(state) \
            == sorted({u64(ref) for ref in referencesf(state)})
    found, bad, cross = pickledrefs.page_references(records)
    assert bad is None
    assert found == [(oid, pickledrefs.state_references(state))
                     for oid, state in records
                     if pickledrefs.state_references(state)]
    # The reference to the other database, which referencesf leaves out,
    # is found too (and the weak one is not).
    far = u64(elsewhere['x']._p_oid)
    assert cross == [(u64(root['a']._p_oid), [('other', far)])]
    assert [pickledrefs.cross_references(state) for _, state in records
            if pickledrefs.cross_references(state)] == [[('other', far)]]
    # What a vote asks of every state (see adapters.votes) says the same.
    assert [oid for oid, state in records
            if pickledrefs.refers_elsewhere(state)] == [u64(root['a']._p_oid)]
    other.close()
    db.close()


#: Stands where state() writes its persistent id.
MARKER = object()


def state(value, pid=None):
    """A PersistentMapping's record in protocol 3 (as ZODB writes it)
    holding *value* as 'data', MARKER in it pickled as the persistent id
    *pid*."""
    from zodbpickle.pickle import Pickler
    out = io.BytesIO()
    pickler = Pickler(out, 3)
    pickler.persistent_id = lambda obj: pid if obj is MARKER else None
    pickler.dump((PersistentMapping, None))
    pickler.dump({'data': value})
    return out.getvalue()


@pytest.mark.parametrize('kind', ['m', 'n'])
def test_references_elsewhere_in_the_protocol_zodb_writes(kind):
    # Protocol 3. A state holding the letters on their own, not as a
    # persistent id, refers elsewhere no more than a state without them.
    oid = b'\0' * 7 + b'\1'
    ref = [kind, ('catalog', oid, PersistentMapping) if kind == 'm'
           else ('catalog', oid)]
    assert pickledrefs.refers_elsewhere(state(MARKER, ref))
    assert pickledrefs.cross_references(state(MARKER, ref)) == [
        ('catalog', 1)]
    assert not pickledrefs.refers_elsewhere(state({kind: kind}))
    assert not pickledrefs.refers_elsewhere(state('plain'))


@pytest.mark.parametrize('kind', [b'm', b'n'])
def test_references_elsewhere_in_python_2_pickles(kind):
    # Python 2's ZODB wrote protocol 1, its strings as bytes (U): the
    # state {'data': [kind, ('catalog', oid, class)] as a persistent id}.
    oid = b'\0' * 7 + b'\1'
    state = (b'(cpersistent.mapping\nPersistentMapping\nNt.'
             b'}U\x04data(U\x01' + kind + b'(U\x07catalogU\x08' + oid
             + b'cpersistent.mapping\nPersistentMapping\ntlQs.')
    assert pickledrefs.cross_references(state) == [('catalog', 1)]
    assert pickledrefs.refers_elsewhere(state)


@pytest.mark.parametrize('scan_bytes', [1, 300, 1 << 20])
def test_a_commit_s_states_are_scanned_together(scan_bytes, monkeypatch):
    # What a vote asks of the states it writes: the same answer as
    # asking each, in lots of any size, deletions (None) among them.
    monkeypatch.setattr(pickledrefs, '_SCAN_BYTES', scan_bytes)
    far = state(MARKER, ['m', ('catalog', b'\0' * 7 + b'\1',
                               PersistentMapping)])
    # The letters on their own (a false hint), oids whose bytes spell a
    # hint's end, and plain states.
    near = [state({'m': 'n'}), state('plain' * 40), None, b'',
            state(b'\x01m\x01\x00\x00\x00n'),
            state(MARKER, (b'\0' * 6 + b'\x01m', None)),
            state(MARKER, (b'\0' * 6 + b'\x01n', PersistentMapping))]
    assert not pickledrefs.any_refers_elsewhere(near)
    assert not pickledrefs.any_refers_elsewhere([])
    # Only a state holding a hint is read on its own.
    read = []
    refers = pickledrefs.refers_elsewhere
    monkeypatch.setattr(pickledrefs, 'refers_elsewhere',
                        lambda s: read.append(s) or refers(s))
    assert not pickledrefs.any_refers_elsewhere(near * 50)
    assert len(read) == 50
    monkeypatch.setattr(pickledrefs, 'refers_elsewhere', refers)
    for at in range(len(near) + 1):
        states = near[:at] + [far] + near[at:]
        assert pickledrefs.any_refers_elsewhere(states)
        assert pickledrefs.any_refers_elsewhere(states) == any(
            pickledrefs.refers_elsewhere(s) for s in states)
