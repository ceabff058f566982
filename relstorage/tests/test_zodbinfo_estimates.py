"""zodbinfo's estimated state bytes follow the rows there are: after a
pack that removed half of the data and after a zodbconvert, on every
database and history mode, they are within TOLERANCE of the exact sums
(where the server keeps statistics, the figures are estimates; SQLite
counts). The tables' size on disk does not shrink when rows are deleted,
and counts their indexes and free space: that is not the figure."""
import random

import ZODB
from persistent.mapping import PersistentMapping
from ZODB.FileStorage import FileStorage

from relstorage import zodbinfo
from relstorage import zodbconvert
from relstorage.testing.dbs import admin_query

from .inspecting import run_json
from .inspecting import run_main
from .inspecting import write_config
from .test_zodbconvert import relstorage_section

#: How far an estimate may be from the exact figure, as a share of it.
TOLERANCE = 0.15
#: Objects written, in batches of BATCH, kept and dropped batches in
#: turn (a deleted subtree takes a run of oids, as on a real site).
OBJECTS = 6000
BATCH = 250


def build(db):
    """OBJECTS mappings of 20 to 1,000 random bytes each, under the
    root's ``keep`` and ``drop``; a third of the kept ones changed twice
    (history, where it is kept)."""
    rng = random.Random(7)
    with db.transaction() as conn:
        conn.root()['keep'] = PersistentMapping()
        conn.root()['drop'] = PersistentMapping()
    for first in range(0, OBJECTS, BATCH):
        with db.transaction() as conn:
            into = conn.root()['keep' if first // BATCH % 2 else 'drop']
            for i in range(first, first + BATCH):
                into[i] = PersistentMapping(
                    data=rng.randbytes(rng.randint(20, 1000)))
    for _ in range(2):
        with db.transaction() as conn:
            for i, kept in enumerate(conn.root()['keep'].values()):
                if i % 3 == 0:
                    kept['data'] = rng.randbytes(rng.randint(20, 1000))


def analyze(factory):
    """What autovacuum (PostgreSQL) or InnoDB's statistics do to tables
    that grew, so that their estimates are there to be used."""
    tables = ('current_object', 'object_state') if factory.keep_history \
        else ('object_state',)
    if factory.db == 'postgresql':
        admin_query('postgresql', factory.keep_history,
                    'ANALYZE ' + ', '.join(tables))
    elif factory.db == 'mysql':
        admin_query('mysql', factory.keep_history,
                    'ANALYZE TABLE ' + ', '.join(tables))


def assert_close(factory, config):
    status, exact = run_json(zodbinfo, '--exact', config)
    assert status == 0
    status, estimate = run_json(zodbinfo, config)
    assert status == 0
    if factory.db != 'sqlite':
        assert 'current_bytes' in estimate['estimated']
    current = exact['current_bytes']
    assert current > 0
    assert abs(estimate['current_bytes'] - current) <= TOLERANCE * current, (
        estimate['current_bytes'], current)
    # Historical bytes may be none at all: measured against all of them.
    everything = current + exact['historical_bytes']
    assert abs(estimate['historical_bytes'] - exact['historical_bytes']) \
        <= TOLERANCE * everything, (estimate['historical_bytes'],
                                    exact['historical_bytes'])
    return estimate


def test_estimate_after_a_pack_that_removed_half(factory, tmp_path):
    db = ZODB.DB(factory.storage())
    build(db)
    db.close()
    analyze(factory)
    config = write_config(tmp_path, factory)
    assert_close(factory, config)
    db = ZODB.DB(factory.storage())
    with db.transaction() as conn:
        del conn.root()['drop']
    db.pack()
    db.close()
    status, exact = run_json(zodbinfo, '--exact', config)
    assert OBJECTS // 2 <= exact['objects'] <= OBJECTS // 2 + 3
    assert_close(factory, config)


def test_estimate_after_a_zodbconvert(factory, tmp_path):
    fs = str(tmp_path / 'Data.fs')
    db = ZODB.DB(FileStorage(fs))
    build(db)
    db.close()
    config = tmp_path / 'convert.conf'
    config.write_text(
        '%%import relstorage\n<filestorage source>\n path %s\n'
        '</filestorage>\n%s' % (fs, relstorage_section(
            factory, 'destination', tmp_path / 'blobs')))
    status, text = run_main(zodbconvert, str(config))
    assert status == 0, text
    analyze(factory)
    assert_close(factory, write_config(tmp_path, factory))
