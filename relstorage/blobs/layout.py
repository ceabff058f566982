"""The layout of a blob directory, and blob caches other clients left in
one.

ZODB's ``FilesystemHelper`` reads the layout from the directory's
``.layout`` file and knows ``bushy`` and ``lawn`` only. RelStorage 4 (and
ZEO) keep a client's blob cache in a layout of their own, ``zeocache``
(``<oid % 997>/<oid // 997>.<tid hex>.blob``), so a site that kept a blob
cache with RelStorage 4 has a ``blob-dir`` that ZODB cannot open.

Such a directory holds copies only (the database has every blob), and
none of its files could be served here anyway: a cached file is served
only with its signature (see signed), which RelStorage 4 never wrote. So
the cache is begun anew in ZODB's default layout: RelStorage 4's entries
(its oid directories, ``tmp`` and its lock file) are moved into a fresh
directory beside them, ``.layout`` then names the new layout (replaced
in one rename, so that the directory always says which layout it has),
and the old entries are removed. Nothing is followed on the way: the
entries are renamed, never opened, and the removal does not follow
symbolic links. Entries RelStorage 4 does not make are left alone.
Processes opening the directory at once take turns (a lock on the
directory), and a conversion interrupted by a crash is finished by the
next open (``.layout`` still names the old layout until the end).
"""
import fcntl
import logging
import os
import secrets
import shutil

from ZODB.blob import LAYOUT_MARKER
from ZODB.blob import LAYOUTS
from ZODB.blob import FilesystemHelper

from ..cache.safefile import checked_dir
from ..cache.safefile import read_bounded
from ..cache.safefile import replace_file
from ..exceptions import CacheFileUnusable
from ..exceptions import ConfigurationError

log = logging.getLogger(__name__)

#: The layouts of blob caches other clients keep (RelStorage 4, ZEO).
OLD_CACHE_LAYOUTS = ('zeocache',)
#: What RelStorage 4 puts at the top of its blob cache besides the oid
#: directories (all digits).
OLD_CACHE_ENTRIES = ('tmp', 'check_size.lock')
#: The layout a converted cache gets (ZODB's default).
NEW_LAYOUT = 'bushy'
#: The prefix of the directory the old entries are moved into.
ASIDE_PREFIX = '.old-blob-cache-'
#: A layout name is short; a longer .layout is refused unread.
_LAYOUT_LIMIT = 64


def helper(blob_dir):
    """ZODB's FilesystemHelper of *blob_dir*, its layout read from the
    directory (bushy for a new one); ConfigurationError naming the
    layout when ZODB does not know it."""
    try:
        return FilesystemHelper(blob_dir)
    except KeyError as e:
        name = e.args[0] if e.args else '?'
        hint = (' (the layout of a blob cache of RelStorage 4 or ZEO: '
                'with shared-blob-dir false the storage begins such a '
                'cache anew)' if name in OLD_CACHE_LAYOUTS else '')
        raise ConfigurationError(
            'cannot use blob-dir %s: its %s names the layout %r, which '
            'is not one of %s%s' % (blob_dir, LAYOUT_MARKER, name,
                                    ', '.join(sorted(LAYOUTS)), hint)
        ) from None
    except OSError as e:
        raise ConfigurationError('cannot use blob-dir %s: %s'
                                 % (blob_dir, e)) from None


def _layout_of(dir_fd):
    """The layout *dir_fd*'s .layout names, or None without one."""
    data = read_bounded(dir_fd, LAYOUT_MARKER, _LAYOUT_LIMIT)
    if data is None:
        return None
    return data.decode('ascii', 'replace').strip()


def _is_old_entry(name):
    return name.isdigit() or name in OLD_CACHE_ENTRIES


def renew_old_cache(blob_dir):
    """Begin anew the blob cache at *blob_dir* (checked already as the
    process user's own) when another client left its cache there (see
    the module's docstring). Returns the number of entries moved out of
    the way (0: the directory was not such a cache). CacheFileUnusable
    when its .layout may not be read (a symbolic link, not the user's
    own, too long)."""
    with checked_dir(blob_dir, create=False) as dir_fd:
        if _layout_of(dir_fd) not in OLD_CACHE_LAYOUTS:
            return 0
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        try:
            # Another process may have converted it while we waited.
            layout = _layout_of(dir_fd)
            if layout not in OLD_CACHE_LAYOUTS:
                return 0
            moved = _move_aside(dir_fd)
            replace_file(dir_fd, LAYOUT_MARKER,
                         lambda f: f.write(NEW_LAYOUT.encode('ascii')))
        finally:
            fcntl.flock(dir_fd, fcntl.LOCK_UN)
        log.warning('blob-dir %s held a blob cache in the %s layout of '
                    'RelStorage 4 (or ZEO): begun anew in the %s layout '
                    '(%d entries removed; the blobs are in the database)',
                    blob_dir, layout, NEW_LAYOUT, moved)
        _remove_aside(blob_dir, dir_fd)
    return moved


def _move_aside(dir_fd):
    """Rename the old cache's entries into a new directory beside them;
    how many."""
    aside = ASIDE_PREFIX + secrets.token_hex(8)
    os.mkdir(aside, 0o700, dir_fd=dir_fd)
    aside_fd = os.open(aside, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                       dir_fd=dir_fd)
    try:
        moved = 0
        for name in os.listdir(dir_fd):
            if _is_old_entry(name):
                # A rename moves a symbolic link itself, never its target.
                os.rename(name, name, src_dir_fd=dir_fd, dst_dir_fd=aside_fd)
                moved += 1
        return moved
    finally:
        os.close(aside_fd)


def _remove_aside(blob_dir, dir_fd):
    """Remove the directories the old entries were moved into (also
    those of a conversion a crash interrupted)."""
    for name in os.listdir(dir_fd):
        if not name.startswith(ASIDE_PREFIX):
            continue
        try:
            # Symbolic links inside are removed, not followed (fd-based).
            shutil.rmtree(name, dir_fd=dir_fd)
        except OSError as e:
            log.warning('could not remove %s (what a blob cache of '
                        'RelStorage 4 held): %s',
                        os.path.join(blob_dir, name), e)


def open_cache_layout(blob_dir):
    """FilesystemHelper of the blob cache *blob_dir*, an old client's
    cache begun anew first; ConfigurationError when that cannot be
    done."""
    try:
        renew_old_cache(blob_dir)
    except CacheFileUnusable as e:
        raise ConfigurationError(
            'cannot use blob-dir %s as the blob cache: its %s: %s'
            % (blob_dir, LAYOUT_MARKER, e)) from None
    except OSError as e:
        raise ConfigurationError(
            'cannot begin anew the blob cache of RelStorage 4 in blob-dir '
            '%s: %s' % (blob_dir, e)) from None
    return helper(blob_dir)
