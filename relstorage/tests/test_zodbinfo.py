"""``zodbinfo`` on every database and history mode: exact figures of a
known workload, estimates marked as such, the classes, the last pack."""
import calendar
import json
import time

import pytest
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64

from relstorage import zodbinfo
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import admin_query

from .inspecting import BLOB
from .inspecting import CHUNK
from .inspecting import make_garbage
from .inspecting import open_db
from .inspecting import run_json
from .inspecting import run_main
from .inspecting import run_tool
from .inspecting import workload
from .inspecting import write_config


def expected_bytes(storage, oids):
    """``(current, all revisions)`` bytes of state, from the storage."""
    current = sum(len(storage.load(p64(oid))[0]) for oid in oids)
    total = sum(entry['size'] for oid in oids
                for entry in storage.history(p64(oid), size=1000))
    return current, total


def test_exact_figures_of_a_known_workload(factory, tmp_path):
    blob_dir = tmp_path / 'blobs'
    db = open_db(factory, blob_dir)
    oids = workload(db)
    storage = db.storage
    tids = [u64(t.tid) for t in storage.iterator()]
    current, total = expected_bytes(storage, oids.values())
    db.close()
    config = write_config(tmp_path, factory, blob_dir)
    status, r = run_json(zodbinfo, '--exact', '--classes', config)
    assert status == 0
    assert r['estimated'] == []
    assert r['name'] == 'main'
    assert r['keep_history'] is factory.keep_history
    assert r['schema_version'] == 2
    assert r['server'].split()[0] in {
        'sqlite': ('SQLite',), 'postgresql': ('PostgreSQL',),
        'mysql': ('MariaDB', 'MySQL')}[factory.db]
    assert any(c.isdigit() for c in r['server'])
    assert r['objects'] == 6
    if factory.keep_history:
        # root twice, a twice, b, c, d and the blob once each
        assert r['revisions'] == 8
        assert r['transactions'] == 3
    else:
        assert 'revisions' not in r
        # Only the tids current objects carry: the root's creation is gone.
        assert r['transactions'] == 2
    assert len(tids) == r['transactions']
    assert (r['first_tid'], r['last_tid']) == (tids[0], tids[-1])
    assert r['current_bytes'] == current
    assert r['historical_bytes'] == total - current
    if not factory.keep_history:
        assert r['historical_bytes'] == 0
    assert (r['blobs'], r['blob_bytes'], r['blob_chunks']) == (
        1, len(BLOB), -(-len(BLOB) // CHUNK))
    assert r['last_pack_time'] is None and r['last_pack_tid'] is None
    assert r['database_bytes'] > 0
    classes = {c['class']: (c['objects'], c['bytes']) for c in r['classes']}
    assert set(classes) == {'persistent.mapping.PersistentMapping',
                            'ZODB.blob.Blob'}
    assert classes['persistent.mapping.PersistentMapping'][0] == 5
    assert classes['ZODB.blob.Blob'][0] == 1
    assert sum(b for _, b in classes.values()) == current
    assert r['class_count'] == 2
    # Largest first.
    assert [c['class'] for c in r['classes']][0] == \
        'persistent.mapping.PersistentMapping'


def test_text_report(factory, tmp_path):
    db = open_db(factory, tmp_path / 'blobs')
    workload(db)
    db.close()
    config = write_config(tmp_path, factory, tmp_path / 'blobs')
    status, out, err = run_tool('zodbinfo', '--exact', '--classes',
                                '--top', '1', config)
    assert status == 0, err
    assert out.startswith('main: ')
    assert '  objects         6\n' in out
    assert 'schema version 2' in out
    assert ('preserving (keep-history true)' if factory.keep_history
            else 'free (keep-history false)') in out
    assert '1 in the database, 2.5 kB in 3 chunks' in out
    assert 'last pack       none recorded' in out
    assert 'largest classes (of 2), by bytes:' in out
    assert 'PersistentMapping' in out and 'ZODB.blob.Blob' not in out
    assert '~' not in out


def test_last_pack_is_recorded(factory, tmp_path):
    db = open_db(factory, tmp_path / 'blobs')
    workload(db)
    make_garbage(db)
    time.sleep(0.02)
    before = time.time()
    db.pack()
    db.close()
    config = write_config(tmp_path, factory, tmp_path / 'blobs')
    status, r = run_json(zodbinfo, '--exact', config)
    assert status == 0
    assert r['objects'] == 4  # c and d are gone
    assert r['last_pack_time'] is not None
    ended = calendar.timegm(time.strptime(r['last_pack_time'],
                                          '%Y-%m-%d %H:%M:%S UTC'))
    assert before - 1 <= ended <= time.time() + 1
    assert r['last_pack_to'] is not None
    status, text = run_main(zodbinfo, config)
    assert 'last pack       %s, to ' % r['last_pack_time'] in text


def test_estimates_are_marked(factory, tmp_path):
    db = open_db(factory, tmp_path / 'blobs')
    workload(db)
    db.close()
    if factory.db == 'postgresql':
        # What autovacuum does to a table that grew.
        admin_query('postgresql', factory.keep_history,
                    'ANALYZE current_object, object_state'
                    if factory.keep_history else 'ANALYZE object_state')
    config = write_config(tmp_path, factory, tmp_path / 'blobs')
    status, r = run_json(zodbinfo, config)
    assert status == 0
    if factory.db == 'sqlite':
        # No statistics to use: counted, and counting is cheap there.
        assert r['estimated'] == []
        assert r['objects'] == 6
        return
    assert 'objects' in r['estimated']
    assert 'current_bytes' in r['estimated']
    assert r['objects'] >= 0
    if not factory.keep_history:
        assert r['transactions'] is None
    status, text = run_main(zodbinfo, config)
    assert "~: an estimate, from the server's statistics or a sample; " \
        "--exact counts" in text
    assert '  objects         ~' in text


@pytest.mark.parametrize('keep_history', [True, False])
def test_database_of_the_other_mode_is_reported_as_it_is(keep_history,
                                                          tmp_path):
    made = DatabaseFactory('sqlite', keep_history)
    try:
        db = open_db(made, tmp_path / 'blobs')
        workload(db)
        db.close()
        other = DatabaseFactory('sqlite', not keep_history)
        other._dirs['main'] = made.data_dir()
        status, r = run_json(zodbinfo, '--exact', write_config(
            tmp_path, other, tmp_path / 'blobs'))
    finally:
        made.cleanup()
    assert status == 0
    assert r['keep_history'] is keep_history
    assert r['objects'] == 6


def test_missing_database_and_bad_usage(tmp_path):
    config = tmp_path / 'none.conf'
    config.write_text('%%import relstorage\n<relstorage main>\n<sqlite3>\n'
                      ' data-dir %s\n</sqlite3>\n</relstorage>\n'
                      % (tmp_path / 'nothing'))
    status, out, err = run_tool('zodbinfo', str(config))
    assert status == 1
    assert 'main: DatabaseMissing' in err
    assert not (tmp_path / 'nothing').exists()  # nothing was created
    status, out, err = run_tool('zodbinfo', str(tmp_path / 'missing.conf'))
    assert status == 2 and 'No such file' in err
    config.write_text('<filestorage fs>\n path %s\n</filestorage>\n'
                      % (tmp_path / 'Data.fs'))
    status, out, err = run_tool('zodbinfo', str(config))
    assert status == 2
    assert 'fs is not a <relstorage> section; skipped' in err
    assert 'holds no <relstorage> section' in err
    assert not (tmp_path / 'Data.fs').exists()


def test_class_header_reader():
    from relstorage.pickledclasses import class_name
    from ZODB.serialize import ObjectWriter
    from persistent.mapping import PersistentMapping
    state = ObjectWriter().serialize(PersistentMapping(x=1))
    assert class_name(state) == 'persistent.mapping.PersistentMapping'
    assert referencesf(state) == []
    # Old records: ((module, name), args) with protocol 1 strings.
    old = b'((U\x07mymod.xq\x01U\x03Fooq\x02tq\x03Nt.}.'
    assert class_name(old) == 'mymod.x.Foo'
    # Protocol 4: STACK_GLOBAL.
    import pickle
    assert class_name(pickle.dumps(json.JSONDecoder, 4)) == \
        'json.decoder.JSONDecoder'
    for bad in (b'', b'\x80\x03c', b'garbage', b'\x80\x03}.'):
        with pytest.raises(ValueError):
            class_name(bad)


def test_blobs_in_a_shared_directory(factory, tmp_path):
    blob_dir = tmp_path / 'blobs'
    db = open_db(factory, blob_dir, shared=True)
    workload(db)
    db.close()
    config = write_config(tmp_path, factory, blob_dir, shared=True)
    status, r = run_json(zodbinfo, '--exact', config)
    assert status == 0
    assert (r['blobs'], r['blob_bytes'], r['blob_chunks']) == (
        1, len(BLOB), 0)
    assert r['blob_dir'] == str(blob_dir)
    status, text = run_main(zodbinfo, config)
    assert '1 files, 2.5 kB in the shared blob-dir %s' % blob_dir in text


def test_kept_prepack_is_shown(factory, tmp_path):
    db = open_db(factory, tmp_path / 'blobs')
    workload(db)
    make_garbage(db)
    time.sleep(0.02)
    db.storage.pack_with_result(time.time(), referencesf, prepack_only=True)
    db.close()
    config = write_config(tmp_path, factory, tmp_path / 'blobs')
    status, r = run_json(zodbinfo, '--exact', config)
    assert r['prepack_tid'] is not None and r['last_pack_time'] is None
    status, text = run_main(zodbinfo, config)
    assert 'none recorded; a pre-pack to ' in text
    assert 'awaits --use-prepack-state' in text
