"""Keeping the process-wide cache between runs (``cache-local-dir``).

When the storage closes, the entries the cache can prove current at the
newest tid it knows are written to a file in the directory; when a
storage of the same database opens, it reads the file back and keeps
only the entries whose object still has that revision as its current one
(asked of the database in one snapshot: an object changed, deleted,
packed away, or a database emptied or replaced, drops its entry). So a
restarted process starts warm and never serves a state that changed
while it was down.

The file is not trusted for the states it holds: it is signed with an
HMAC-SHA256 whose key lives in the database (a relstorage_meta row, read
once when the storage opens, see IRelStorageAdapter.cache_key), so a
file that anyone without access to the database wrote or changed, down
to one byte of one state, is ignored before anything in it is used. The
directory and the file must also be the process user's own and writable
by no one else, and the file a regular file no bigger than
``cache-local-mb`` allows (see safefile); the directory is created 0700
and the file written 0600, through a temporary file renamed over it, so
a reader sees a whole file or the previous one.

The file: a header line naming the format, then a line with the tid and
the database, then for each entry its oid, tid, length and state, then a
trailer with the count, a CRC-32 (telling a damaged file from a forged
one) and the HMAC of everything before it.
"""
import hashlib
import hmac
import logging
import os
import re
import struct
import zlib

from ..exceptions import CacheFileUnusable
from ..exceptions import CacheKeyUnavailable
from . import safefile

log = logging.getLogger(__name__)

MAGIC = b'relstorage cache 2\n'
_ENTRY = struct.Struct('>qqI')
_TRAILER = struct.Struct('>QI32s')
#: Room for the header's tid line besides the database's name.
_HEADER_SLACK = 64


def cache_name(prefix, identity):
    """The file name of the database *identity* (a string naming it):
    after ``cache-prefix`` when one is set, else after the database."""
    if prefix:
        stem = re.sub(r'[^A-Za-z0-9_.-]', '_', prefix)
    else:
        stem = hashlib.sha256(identity.encode('utf-8')).hexdigest()[:20]
    return 'relstorage-%s.cache' % stem


def file_bound(limit_bytes, identity):
    """The most bytes a file of a cache of *limit_bytes* can hold: each
    entry is charged more in the cache (lru.ENTRY_OVERHEAD) than its
    header takes in the file, so the entries fit in *limit_bytes*."""
    return (len(MAGIC) + _HEADER_SLACK + len(identity.encode('utf-8'))
            + limit_bytes + _TRAILER.size)


def dump(f, key, identity, tid, entries, limit_bytes):
    """Write ``[(oid, tid, state)]`` (least recently used first) current
    at *tid* to the file object *f*, signed with *key*; the newest that
    fit in *limit_bytes*. Returns how many were written."""
    sizes = [_ENTRY.size + len(state) for _, _, state in entries]
    total = sum(sizes)
    first = 0
    while total > limit_bytes:
        total -= sizes[first]
        first += 1
    crc = 0
    mac = hmac.new(key, digestmod=hashlib.sha256)

    def write(data):
        nonlocal crc
        crc = zlib.crc32(data, crc)
        mac.update(data)
        f.write(data)
    write(MAGIC)
    write(b'%d %s\n' % (tid, identity.encode('utf-8')))
    for oid, entry_tid, state in entries[first:]:
        write(_ENTRY.pack(oid, entry_tid, len(state)))
        write(state)
    count = len(entries) - first
    f.write(_TRAILER.pack(count, crc, mac.digest()))
    return count


def parse(data, key, identity):
    """``(tid, [(oid, tid, state)])`` from the bytes of a file, which must
    be whole, of the database *identity* and signed with *key*; else
    CacheFileUnusable."""
    if not data.startswith(MAGIC):
        if data.startswith(b'relstorage cache '):
            raise CacheFileUnusable('it was written in another format (an '
                                    'older version, unsigned)')
        raise CacheFileUnusable('not a relstorage cache file')
    if len(data) < len(MAGIC) + _TRAILER.size:
        raise CacheFileUnusable('truncated')
    body, trailer = data[:-_TRAILER.size], data[-_TRAILER.size:]
    count, crc, signature = _TRAILER.unpack(trailer)
    if zlib.crc32(body) != crc:
        raise CacheFileUnusable('damaged or truncated (checksum mismatch)')
    end = body.find(b'\n', len(MAGIC))
    try:
        tid_text, name = body[len(MAGIC):end].split(b' ', 1)
        tid = int(tid_text)
    except ValueError:
        raise CacheFileUnusable('damaged header') from None
    if name.decode('utf-8', 'replace') != identity:
        raise CacheFileUnusable('it holds the cache of another database')
    expected = hmac.new(key, body, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, signature):
        raise CacheFileUnusable(
            'its signature does not match the database\'s cache key (it was '
            'changed or written elsewhere, or the database was recreated); '
            'nothing in it was used')
    entries = []
    pos = end + 1
    while pos + _ENTRY.size <= len(body):
        oid, entry_tid, size = _ENTRY.unpack_from(body, pos)
        pos += _ENTRY.size
        entries.append((oid, entry_tid, body[pos:pos + size]))
        pos += size
    if pos != len(body) or len(entries) != count:
        raise CacheFileUnusable('damaged (entries do not add up)')
    return tid, entries


def _identity(adapter):
    return '%r %s' % (adapter.location(),
                      'history-preserving' if adapter.keep_history
                      else 'history-free')


class PersistentCache:
    """The file of one database in ``cache-local-dir``, and the key that
    signs it. Made by :meth:`open` (None when the directory or the key
    is refused: the storage then runs without)."""

    def __init__(self, directory, name, identity, key, limit_bytes):
        self.directory = directory
        self.name = name
        self.identity = identity
        self.limit_bytes = limit_bytes
        self.bound = file_bound(limit_bytes, identity)
        self.path = os.path.join(directory, name)
        self._key = key

    def __repr__(self):
        # Never the key.
        return '<%s %s>' % (type(self).__name__, self.path)

    @classmethod
    def open(cls, adapter, options, limit_bytes):
        """The persistent cache of *adapter*'s database, or None (with a
        warning saying why) when its directory is refused or the
        database's key can be neither read nor created."""
        directory = options.cache_local_dir
        try:
            with safefile.checked_dir(directory, create=True):
                pass
        except (CacheFileUnusable, OSError) as e:
            log.warning('cache-local-dir: not using %s: %s; running without '
                        'the persistent cache', directory, e)
            return None
        try:
            key = adapter.cache_key()
        except CacheKeyUnavailable as e:
            log.warning('cache-local-dir: not using %s: %s; running without '
                        'the persistent cache', directory, e)
            return None
        identity = _identity(adapter)
        return cls(directory, cache_name(options.cache_prefix, identity),
                   identity, key, limit_bytes)

    def load(self):
        """``(tid, [(oid, tid, state)])`` from the file, or None when there
        is none or it is refused (logged)."""
        try:
            with safefile.checked_dir(self.directory, create=False) as dfd:
                data = safefile.read_bounded(dfd, self.name, self.bound)
            if data is None:
                return None
            return parse(data, self._key, self.identity)
        except (CacheFileUnusable, OSError) as e:
            log.warning('cache-local-dir: ignoring %s: %s; starting with an '
                        'empty cache', self.path, e)
            return None

    def warm(self, cache, adapter):
        """Fill the new *cache* from the file, keeping only the entries
        still current in one snapshot; returns how many."""
        loaded = self.load()
        if loaded is None:
            return 0
        saved_tid, entries = loaded
        session = adapter.open_load_session()
        try:
            view = session.restart()
            if view < saved_tid:
                log.warning('cache-local-dir: ignoring %s: the database is '
                            'older than the file (emptied or replaced)',
                            self.path)
                return 0
            current = session.current_tids([oid for oid, _, _ in entries])
        finally:
            session.close()
        kept = cache.restore(view, [entry for entry in entries
                                    if current.get(entry[0]) == entry[1]])
        log.info('cache-local-dir: %d of %d cached objects from %s are '
                 'current', kept, len(entries), self.path)
        return kept

    def keep(self, cache):
        """Write *cache*'s current entries to the file (never raises: a
        cache that cannot be kept is only logged); returns how many."""
        try:
            tid, entries = cache.current_entries()
            if tid is None:
                return 0
            with safefile.checked_dir(self.directory, create=True) as dfd:
                return safefile.replace_file(
                    dfd, self.name,
                    lambda f: dump(f, self._key, self.identity, tid, entries,
                                   self.limit_bytes))
        except Exception as e:  # noqa: BLE001 -- closing must go on
            log.warning('cache-local-dir: could not write %s: %s',
                        self.path, e)
            return 0
