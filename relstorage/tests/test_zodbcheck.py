"""``zodbcheck`` on every database and history mode: a clean database
passes; a database damaged on purpose in each way fails, naming the
object; ``--unreachable`` lists exactly the garbage."""
import os
import pty
import subprocess
import sys

import pytest
import ZODB
from ZODB.utils import oid_repr
from ZODB.utils import p64
from ZODB.utils import tid_repr

from relstorage import zodbcheck
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env

from .inspecting import BAD_STATE
from .inspecting import delete_object
from .inspecting import execute
from .inspecting import make_garbage
from .inspecting import open_db
from .inspecting import overwrite_state
from .inspecting import run_json
from .inspecting import run_main
from .inspecting import run_tool
from .inspecting import workload
from .inspecting import write_config

MAPPING = 'persistent.mapping.PersistentMapping'


def name(oid):
    return oid_repr(p64(oid))


def prepared(factory, tmp_path, shared=False):
    """The workload in the database; ``(oids, config path)``."""
    blob_dir = tmp_path / 'blobs'
    db = open_db(factory, blob_dir, shared)
    oids = workload(db)
    db.close()
    return oids, write_config(tmp_path, factory, blob_dir, shared)


def test_clean_database_passes(factory, tmp_path):
    oids, config = prepared(factory, tmp_path)
    status, out, err = run_tool('zodbcheck', config)
    assert status == 0, out + err
    assert 'checked 6 objects (6 reachable from the root)' in out
    assert '1 blob' in out
    assert 'no problems found' in out
    assert '\r' not in err  # no progress line without a terminal
    status, r = run_json(zodbcheck, '--unreachable', config)
    assert status == 0
    assert r['broken'] is False
    assert (r['objects'], r['reachable'], r['blobs']) == (6, 6, 1)
    # root -> a, b, c, blob; c -> d
    assert r['references'] == 5
    assert r['unreachable'] == [] and r['unreachable_count'] == 0
    for kind in ('dangling', 'damaged', 'missing_blobs'):
        assert r[kind] == [] and r[kind + '_count'] == 0


def test_reference_to_a_deleted_object(factory, tmp_path):
    oids, config = prepared(factory, tmp_path)
    delete_object(factory, oids['d'])
    status, r = run_json(zodbcheck, config)
    assert status == zodbcheck.EXIT_BROKEN
    assert r['broken'] is True
    assert r['dangling'] == [{'oid': name(oids['c']), 'class': MAPPING,
                              'missing': name(oids['d'])}]
    assert r['dangling_count'] == 1
    assert r['damaged_count'] == r['missing_blobs_count'] == 0
    status, out, err = run_tool('zodbcheck', config)
    assert status == 3
    assert ('dangling reference: %s (%s) refers to %s, which does not '
            'exist' % (name(oids['c']), MAPPING, name(oids['d']))) in out
    assert 'BROKEN: 1 reference to a missing object' in out


def test_missing_root(factory, tmp_path):
    oids, config = prepared(factory, tmp_path)
    delete_object(factory, 0)
    status, text = run_main(zodbcheck, config)
    assert status == 3
    assert 'the root object (0x00) does not exist' in text


def test_state_that_does_not_unpickle(factory, tmp_path):
    oids, config = prepared(factory, tmp_path)
    overwrite_state(factory, oids['a'], BAD_STATE)
    overwrite_state(factory, oids['b'], b'not a pickle at all')
    status, r = run_json(zodbcheck, config)
    assert status == 3
    damaged = {entry['oid']: entry for entry in r['damaged']}
    assert set(damaged) == {name(oids['a']), name(oids['b'])}
    assert damaged[name(oids['a'])]['class'] == MAPPING
    assert 'the state does not unpickle' in damaged[name(oids['a'])]['error']
    assert damaged[name(oids['b'])]['class'] is None
    assert damaged[name(oids['b'])]['reachable'] is True
    assert r['dangling_count'] == 0
    status, text = run_main(zodbcheck, config)
    assert 'damaged state: %s (%s), transaction' % (
        name(oids['a']), MAPPING) in text
    assert 'BROKEN: 2 damaged states' in text


def test_state_of_the_wrong_length(factory, tmp_path):
    oids, config = prepared(factory, tmp_path)
    execute(factory, ('UPDATE object_state SET state_size = state_size + 1 '
                      'WHERE zoid = %s', (oids['b'],)))
    status, r = run_json(zodbcheck, config)
    assert status == 3
    assert [e['oid'] for e in r['damaged']] == [name(oids['b'])]
    assert 'were written' in r['damaged'][0]['error']


@pytest.mark.parametrize('chunks, why', [
    ('chunk_num = 1', 'lacks 1 of its chunks 0 to 2'),
    ('chunk_num >= 0', 'has no chunk in the database'),
])
def test_missing_blob_chunks(factory, tmp_path, chunks, why):
    oids, config = prepared(factory, tmp_path)
    execute(factory, ('DELETE FROM blob_chunk WHERE %s' % chunks, ()))
    status, r = run_json(zodbcheck, config)
    assert status == 3
    assert r['missing_blobs_count'] == 1
    entry, = r['missing_blobs']
    assert entry['oid'] == name(oids['blob'])
    assert entry['class'] == 'ZODB.blob.Blob'
    assert why in entry['why']
    status, text = run_main(zodbcheck, config)
    assert 'missing blob: %s (ZODB.blob.Blob)' % name(oids['blob']) in text


def test_missing_blob_file_in_a_shared_directory(factory, tmp_path):
    oids, config = prepared(factory, tmp_path, shared=True)
    status, r = run_json(zodbcheck, config)
    assert status == 0 and r['blobs'] == 1
    files = [os.path.join(path, f) for path, _, names in
             os.walk(tmp_path / 'blobs') for f in names
             if f.endswith('.blob')]
    assert len(files) == 1
    os.remove(files[0])
    status, r = run_json(zodbcheck, config)
    assert status == 3
    entry, = r['missing_blobs']
    assert entry['oid'] == name(oids['blob'])
    assert files[0] in entry['why']


def test_unreachable_lists_exactly_the_garbage(factory, tmp_path):
    blob_dir = tmp_path / 'blobs'
    db = open_db(factory, blob_dir)
    oids = workload(db)
    make_garbage(db)
    db.close()
    config = write_config(tmp_path, factory, blob_dir)
    status, r = run_json(zodbcheck, '--unreachable', config)
    assert status == 0  # garbage is not damage
    assert r['unreachable'] == [
        {'oid': name(oids[n]), 'class': MAPPING} for n in ('c', 'd')]
    assert (r['objects'], r['reachable']) == (6, 4)
    status, text = run_main(zodbcheck, '--unreachable', config)
    assert 'unreachable: %s (%s)' % (name(oids['d']), MAPPING) in text
    assert '2 objects unreachable' in text
    status, r = run_json(zodbcheck, '--unreachable', '--limit', '1', config)
    assert (r['unreachable_count'], len(r['unreachable'])) == (2, 1)
    # A pack removes exactly those.
    db = ZODB.DB(factory.storage(blob_dir=str(blob_dir)))
    db.pack()
    db.close()
    status, r = run_json(zodbcheck, '--unreachable', config)
    assert (status, r['objects'], r['unreachable']) == (0, 4, [])


def test_empty_database_passes(factory, tmp_path):
    config = write_config(tmp_path, factory)
    factory.storage().close()
    status, r = run_json(zodbcheck, config)
    assert status == 0 and r['objects'] == 0


def test_progress_on_a_terminal(tmp_path):
    factory = DatabaseFactory('sqlite', True)
    try:
        oids, config = prepared(factory, tmp_path)
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, '-m', 'relstorage.zodbcheck', config],
            stdout=subprocess.PIPE, stderr=slave, env=child_env())
        os.close(slave)
        seen = b''
        while True:
            try:
                data = os.read(master, 1024)
            except OSError:  # the child closed its end
                break
            if not data:
                break
            seen += data
        out, _ = proc.communicate(timeout=120)
        os.close(master)
    finally:
        factory.cleanup()
    assert proc.returncode == 0
    assert b'\r  6/6 objects (100%)' in seen
    assert b'no problems found' in out


def test_bad_usage(tmp_path):
    status, out, err = run_tool('zodbcheck', str(tmp_path / 'missing.conf'))
    assert status == 2 and 'No such file' in err


def test_writers_commit_while_the_check_reads(factory, tmp_path):
    """The check's snapshot takes no lock: a commit made while it reads
    goes through at once (within a commit-lock-timeout of 2 s, or it
    fails), and the check reports the snapshot it began with."""
    from persistent.mapping import PersistentMapping
    from relstorage.storage.check import Check
    oids, config = prepared(factory, tmp_path)
    writer = ZODB.DB(factory.storage(blob_dir=str(tmp_path / 'blobs'),
                                     commit_lock_timeout=2))
    committed = []

    def commit_meanwhile(done, total):
        if not committed:
            with writer.transaction() as conn:
                conn.root()['new'] = PersistentMapping()
                del conn.root()['b']
            committed.append(done)

    adapter = factory.adapter(read_only=True)
    try:
        result = Check(adapter, progress=commit_meanwhile).run()
    finally:
        adapter.close()
        writer.close()
    assert committed
    assert (result['objects'], result['reachable']) == (6, 6)
    assert not result.broken
    status, r = run_json(zodbcheck, '--unreachable', config)
    assert (r['objects'], r['reachable']) == (7, 6)
    assert r['unreachable'] == [{'oid': name(oids['b']), 'class': MAPPING}]


def _delete_through_the_storage(factory, tmp_path, oid):
    from ZODB.Connection import TransactionMetaData
    storage = factory.storage(blob_dir=str(tmp_path / 'blobs'),
                              blob_chunk_size=1000)
    try:
        _, serial = storage.load(p64(oid))
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.deleteObject(p64(oid), serial, t)
        storage.tpc_vote(t)
        storage.tpc_finish(t)
    finally:
        storage.close()


def test_reference_to_an_object_deleted_through_the_storage(factory,
                                                            tmp_path):
    """deleteObject (IExternalGC) leaves a deletion record (history) or a
    tombstone (no history): the object is gone all the same."""
    oids, config = prepared(factory, tmp_path)
    _delete_through_the_storage(factory, tmp_path, oids['d'])
    status, r = run_json(zodbcheck, config)
    assert status == 3
    assert r['objects'] == 5
    assert r['dangling'] == [{'oid': name(oids['c']), 'class': MAPPING,
                              'missing': name(oids['d'])}]
    from relstorage import zodbinfo
    status, info = run_json(zodbinfo, '--exact', '--classes', config)
    assert info['objects'] == 5
    assert sum(c['objects'] for c in info['classes']) == 5


@pytest.mark.parametrize('deleted', [False, True], ids=['live', 'deleted'])
def test_revision_newer_than_the_last_transaction(factory, tmp_path,
                                                  deleted):
    """A current revision (or deletion) whose tid no transaction reached
    (a restore that wrote rows but not the transaction, a hand-made
    fix): polls never announce it and the next commit would get an
    older tid."""
    oids, config = prepared(factory, tmp_path)
    oid = oids['d'] if deleted else oids['b']
    if deleted:
        _delete_through_the_storage(factory, tmp_path, oid)
    adapter = factory.adapter()
    session = adapter.connect(for_store=False)
    try:
        session.begin()
        last = session.scalar(adapter.mover.last_tid_sql)
        old = session.scalar('SELECT tid FROM object_state WHERE zoid = %s '
                             'ORDER BY tid DESC LIMIT 1', (oid,))
    finally:
        session.rollback_quietly()
        session.close()
        adapter.close()
    future = last + (1 << 32)
    if factory.keep_history:
        execute(factory,
                ('INSERT INTO object_state (zoid, tid, prev_tid, state_size, '
                 'state) SELECT zoid, %s, tid, state_size, state FROM '
                 'object_state WHERE zoid = %s AND tid = %s',
                 (future, oid, old)),
                ('UPDATE current_object SET tid = %s WHERE zoid = %s',
                 (future, oid)))
    else:
        execute(factory, ('UPDATE object_state SET tid = %s WHERE zoid = %s',
                          (future, oid)))
    status, r = run_json(zodbcheck, config)
    assert status == zodbcheck.EXIT_BROKEN
    assert r['broken'] is True
    what = None if deleted else MAPPING
    assert r['future'] == [{'oid': name(oid), 'class': what,
                            'tid': tid_repr(p64(future)),
                            'last': tid_repr(p64(last)),
                            'reachable': not deleted}]
    assert r['future_count'] == 1
    assert r['dangling_count'] == (1 if deleted else 0)
    assert r['damaged_count'] == 0
    status, out, err = run_tool('zodbcheck', config)
    assert status == 3, out + err
    assert ('revision newer than the last transaction: %s (%s), transaction '
            '%s%s, while the last transaction is %s' % (
                name(oid), what or 'class unknown', tid_repr(p64(future)),
                ' (unreachable)' if deleted else '',
                tid_repr(p64(last)))) in out
    assert '1 revision newer than the last transaction' in out
