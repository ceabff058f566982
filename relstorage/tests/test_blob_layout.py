"""A blob-dir that another client's blob cache is in (RelStorage 4's
``zeocache`` layout), or whose ``.layout`` ZODB does not know: begun
anew as a cache, without following anything planted there; refused with
a clear error where it cannot be (see relstorage.blobs.layout). The
upgrade tests (test_relstorage4_upgrade) open caches RelStorage 4.3 made
itself."""
import os

import pytest
from ZODB.blob import Blob

from relstorage.blobs.layout import ASIDE_PREFIX
from relstorage.exceptions import ConfigurationError
from relstorage.testing.atonce import at_once
from relstorage.testing.dbs import DatabaseFactory

from .test_blob_cache_trust import _db

PAYLOAD = b'a blob of the database ' * 100


@pytest.fixture
def sqlite():
    f = DatabaseFactory('sqlite', True)
    yield f
    f.cleanup()


def _old_cache(blob_dir, layout='zeocache'):
    """A blob cache as RelStorage 4 leaves one: its .layout, oid
    directories (oid % 997) of files ``<oid // 997>.<tid hex>.blob``
    with their lock files, ``tmp`` and its size-check lock."""
    blob_dir.mkdir(mode=0o700)
    (blob_dir / '.layout').write_text(layout)
    for rem in ('0', '23'):
        (blob_dir / rem).mkdir()
        (blob_dir / rem / ('0.03d167f919308700.blob')).write_bytes(b'old')
        (blob_dir / rem / '.lock').write_text('1234')
    (blob_dir / 'tmp').mkdir()
    (blob_dir / 'check_size.lock').write_text('1234')


def _commit_and_read(factory, blob_dir, **kw):
    with _db(factory, blob_dir, **kw) as db:
        with db.transaction() as conn:
            conn.root()['b'] = Blob(PAYLOAD)
    with _db(factory, blob_dir, **kw) as db:
        with db.transaction() as conn:
            with conn.root()['b'].open('r') as f:
                return f.read()


def test_a_relstorage4_cache_is_begun_anew(sqlite, tmp_path, caplog):
    blob_dir = tmp_path / 'blobs'
    _old_cache(blob_dir)
    # What RelStorage 4 does not make is left alone.
    (blob_dir / 'README.txt').write_text('notes of the site')
    assert _commit_and_read(sqlite, blob_dir) == PAYLOAD
    assert (blob_dir / '.layout').read_text() == 'bushy'
    assert sorted(os.listdir(blob_dir)) == [
        '.layout', '0x00', 'README.txt', 'tmp'], os.listdir(blob_dir)
    assert not list((blob_dir / 'tmp').iterdir())
    assert 'begun anew in the bushy layout (4 entries removed' in caplog.text
    # Once only: opened again, the cache is kept.
    files = sorted(blob_dir.rglob('*.blob'))
    assert files
    caplog.clear()
    assert _commit_and_read(sqlite, blob_dir) == PAYLOAD
    assert set(files) <= set(blob_dir.rglob('*.blob'))
    assert 'begun anew' not in caplog.text


def test_planted_links_are_removed_not_followed(sqlite, tmp_path):
    """Symbolic links where RelStorage 4's entries are, and inside its
    directories: the links go, what they point at stays."""
    outside = tmp_path / 'precious'
    outside.mkdir()
    (outside / 'data.fs').write_bytes(b'not a cache')
    (outside / 'inner').mkdir()
    (outside / 'inner' / 'file').write_bytes(b'also not')
    blob_dir = tmp_path / 'blobs'
    _old_cache(blob_dir)
    os.symlink(outside, blob_dir / '5')
    os.symlink(outside / 'data.fs', blob_dir / 'check_size.lock.x')
    os.symlink(outside, blob_dir / '23' / 'inside')
    os.symlink(outside / 'data.fs', blob_dir / '0' / '5.00.blob')
    assert _commit_and_read(sqlite, blob_dir) == PAYLOAD
    assert (outside / 'data.fs').read_bytes() == b'not a cache'
    assert (outside / 'inner' / 'file').read_bytes() == b'also not'
    for name in ('5', '23', '0'):
        assert not os.path.lexists(blob_dir / name)
    # Not one of RelStorage 4's names: left as it is.
    assert os.path.islink(blob_dir / 'check_size.lock.x')


def test_a_conversion_a_crash_interrupted_is_finished(sqlite, tmp_path):
    """Stopped after moving some entries aside (.layout still names the
    old layout): the next open moves the rest and removes them all."""
    blob_dir = tmp_path / 'blobs'
    _old_cache(blob_dir)
    aside = blob_dir / (ASIDE_PREFIX + 'feedc0de')
    aside.mkdir()
    os.rename(blob_dir / '0', aside / '0')
    assert _commit_and_read(sqlite, blob_dir) == PAYLOAD
    assert sorted(os.listdir(blob_dir)) == ['.layout', '0x00', 'tmp']


def test_a_layout_file_that_is_a_link_is_refused(sqlite, tmp_path):
    target = tmp_path / 'elsewhere'
    target.write_text('zeocache')
    blob_dir = tmp_path / 'blobs'
    _old_cache(blob_dir)
    os.remove(blob_dir / '.layout')
    os.symlink(target, blob_dir / '.layout')
    with pytest.raises(ConfigurationError,
                       match=r'blob-dir .*blobs as the blob cache: its '
                             r'\.layout: it is a symbolic link'):
        sqlite.storage(blob_dir=str(blob_dir))
    assert target.read_text() == 'zeocache'
    assert os.path.isdir(blob_dir / '23')


@pytest.mark.parametrize('shared', [False, True])
def test_an_unknown_layout_is_named(sqlite, tmp_path, shared):
    blob_dir = tmp_path / 'blobs'
    _old_cache(blob_dir, layout='sideways')
    with pytest.raises(ConfigurationError,
                       match=r"blob-dir .*blobs: its \.layout names the "
                             r"layout 'sideways', which is not one of "
                             r"bushy, lawn"):
        sqlite.storage(blob_dir=str(blob_dir), shared_blob_dir=shared)
    assert os.path.isdir(blob_dir / '23')


def test_a_relstorage4_cache_as_a_shared_blob_dir_is_refused(sqlite,
                                                             tmp_path):
    """A shared blob-dir is the blobs' only home: never emptied; a blob
    cache there is named as one."""
    blob_dir = tmp_path / 'blobs'
    _old_cache(blob_dir)
    with pytest.raises(ConfigurationError,
                       match="layout 'zeocache'.*blob cache of "
                             "RelStorage 4 or ZEO"):
        sqlite.storage(blob_dir=str(blob_dir), shared_blob_dir=True)
    assert (blob_dir / '.layout').read_text() == 'zeocache'
    assert os.path.isdir(blob_dir / '23')


def test_storages_opening_an_old_cache_at_once_take_turns(sqlite, tmp_path):
    """Storages opened at once on the same RelStorage 4 cache: one
    begins it anew, the others open what it made."""
    blob_dir = tmp_path / 'blobs'
    _old_cache(blob_dir)
    for rem in range(30, 200):
        (blob_dir / str(rem)).mkdir()
    opened = at_once([lambda: sqlite.storage(blob_dir=str(blob_dir))] * 4)
    failed = [e for e in opened if isinstance(e, Exception)]
    for storage in opened:
        if storage not in failed:
            storage.close()
    assert not failed, failed
    assert sorted(os.listdir(blob_dir)) == ['.layout', 'tmp']
    assert _commit_and_read(sqlite, blob_dir) == PAYLOAD
