"""``cache-local-dir``: the process-wide cache kept between runs.

A storage that closes writes the entries its cache can prove current; one
that opens on the same database reads them back, keeping only those
whose object still has that revision (checked in one snapshot). What
changed, was deleted or packed away while the process was down is never
served; a damaged, truncated or foreign file is ignored with a warning.
"""
import io
import logging
import os
import subprocess
import sys
import time

import pytest
import ZODB

from relstorage.cache import persist
from relstorage.exceptions import CacheFileUnusable
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env

from .cache_files import cached
from .cache_files import fill
from .cache_files import mode_factories
from .cache_files import open_db

N = 50


factory = mode_factories()


_open = open_db


def _fill(factory):
    fill(factory, N)


def _read_all(db):
    """Read every object; return how many loads reached the database."""
    storage = db.storage
    before = storage._cache.stats()['misses']
    with db.transaction() as conn:
        root = conn.root()
        values = [root['o%d' % n]['n'] for n in range(N) if 'o%d' % n in root]
    return values, storage._cache.stats()['misses'] - before


_cached = cached


def _cache_file(tmp_path):
    (name,) = [n for n in os.listdir(tmp_path / 'cache')
               if n.endswith('.cache')]
    return tmp_path / 'cache' / name


def test_a_restarted_storage_starts_warm_and_never_stale(factory, tmp_path):
    _fill(factory)
    cache_dir = tmp_path / 'cache'
    db = _open(factory, cache_dir)
    values, _ = _read_all(db)
    assert values == list(range(N))
    db.close()
    assert _cache_file(tmp_path).stat().st_size > N * 20

    # While the process is down, another one changes some objects, and
    # removes one (a pack collects it).
    other = ZODB.DB(factory.storage())
    with other.transaction() as conn:
        conn.root()['o3']['n'] = 'changed'
        conn.root()['o7']['n'] = 'changed too'
        del conn.root()['o9']
    other.pack(time.time() + 1)
    other.close()

    db = _open(factory, cache_dir)
    try:
        # Everything but the three objects was kept.
        assert _cached(db) == N - 3
        values, misses = _read_all(db)
        expected = list(range(N))
        expected[3], expected[7] = 'changed', 'changed too'
        del expected[9]
        assert values == expected
        # Only the two changed objects were read from the database (the
        # root, changed too, was read when the DB opened).
        assert misses == 2
    finally:
        db.close()


def test_without_the_option_nothing_is_written(factory, tmp_path):
    _fill(factory)
    db = ZODB.DB(factory.storage())
    _read_all(db)
    db.close()
    assert not os.path.exists(tmp_path / 'cache')


def test_an_emptied_and_refilled_database_drops_the_file(factory, tmp_path):
    _fill(factory)
    db = _open(factory, tmp_path / 'cache')
    _read_all(db)
    db.close()
    _fill(factory)     # zapped and filled again: same oids, new tids
    db = _open(factory, tmp_path / 'cache')
    try:
        assert _cached(db) == 0
        values, misses = _read_all(db)
        assert values == list(range(N)) and misses > 0
    finally:
        db.close()


@pytest.mark.parametrize('damage', ['truncated', 'garbage', 'flipped',
                                    'other-database'])
def test_a_bad_file_is_ignored_with_a_warning(tmp_path, caplog, damage):
    factory = DatabaseFactory('sqlite', False)
    try:
        _fill(factory)
        db = _open(factory, tmp_path / 'cache')
        _read_all(db)
        db.close()
        path = _cache_file(tmp_path)
        data = path.read_bytes()
        if damage == 'truncated':
            path.write_bytes(data[:len(data) // 2])
        elif damage == 'garbage':
            path.write_bytes(os.urandom(len(data)))
        elif damage == 'flipped':
            middle = len(data) // 2
            path.write_bytes(data[:middle] + bytes([data[middle] ^ 1])
                             + data[middle + 1:])
        else:
            other = DatabaseFactory('sqlite', False)
            _fill(other)
            db = _open(other, tmp_path / 'other')
            _read_all(db)
            db.close()
            other.cleanup()
            (name,) = os.listdir(tmp_path / 'other')
            os.replace(tmp_path / 'other' / name, path)
        with caplog.at_level(logging.WARNING, 'relstorage.cache.persist'):
            db = _open(factory, tmp_path / 'cache')
        try:
            assert _cached(db) == 0
            assert 'ignoring %s' % path in caplog.text
            assert _read_all(db)[0] == list(range(N))
        finally:
            db.close()
    finally:
        factory.cleanup()


def test_cache_prefix_names_the_file(tmp_path):
    factory = DatabaseFactory('sqlite', True)
    try:
        _fill(factory)
        db = _open(factory, tmp_path / 'cache', cache_prefix='site/main')
        _read_all(db)
        db.close()
        assert os.listdir(tmp_path / 'cache') == ['relstorage-site_main.cache']
    finally:
        factory.cleanup()


WRITER = '''
import sys, ZODB
from relstorage.testing.dbs import DatabaseFactory
factory = DatabaseFactory.in_child('sqlite', False, sys.argv[1])
db = ZODB.DB(factory.storage(cache_local_dir=sys.argv[2]))
with db.transaction() as conn:
    print(sum(conn.root()['o%d' % n]['n'] for n in range(50)))
if sys.argv[3] == 'close':
    db.close()
else:
    import os
    os._exit(0)      # dies without closing: nothing is written
'''


def test_processes_share_the_directory(tmp_path):
    """A process that exits writes the file; one killed before closing
    leaves the last whole file; the next process starts from it."""
    factory = DatabaseFactory('sqlite', False)
    try:
        _fill(factory)
        cache_dir = str(tmp_path / 'cache')

        def child(how):
            done = subprocess.run(
                [sys.executable, '-c', WRITER, factory.data_dir(), cache_dir,
                 how], capture_output=True, text=True, env=child_env(),
                timeout=120)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == str(sum(range(N)))
        child('close')
        first = _cache_file(tmp_path).read_bytes()
        child('die')
        assert _cache_file(tmp_path).read_bytes() == first
        assert not [n for n in os.listdir(cache_dir) if n.startswith('.')]
        db = _open(factory, tmp_path / 'cache')
        try:
            assert _cached(db) == N
            assert _read_all(db)[1] == 0
        finally:
            db.close()
    finally:
        factory.cleanup()


def test_file_round_trip():
    entries = [(1, 10, b'one'), (2, 11, b''), (1 << 62, 12, b'x' * 1000)]
    key = b'k' * 32
    f = io.BytesIO()
    assert persist.dump(f, key, 'db', 12, entries, 10 ** 6) == 3
    data = f.getvalue()
    assert persist.parse(data, key, 'db') == (12, entries)
    for key, identity in ((key, 'another db'), (b'K' * 32, 'db')):
        with pytest.raises(CacheFileUnusable):
            persist.parse(data, key, identity)
    # Only the newest entries that fit are written.
    f = io.BytesIO()
    assert persist.dump(f, key, 'db', 12, entries, 1030) == 1
    assert persist.parse(f.getvalue(), key, 'db') == (12, entries[2:])
