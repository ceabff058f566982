"""Keeping the process-wide cache between runs (``cache-local-dir``).

When the storage closes, the entries the cache can prove current at the
newest tid it knows are written to a file in the directory; when a
storage of the same database opens, it reads the file back and keeps
only the entries whose object still has that revision as its current one
(asked of the database in one snapshot: an object changed, deleted,
packed away, or a database emptied or replaced, drops its entry). So a
restarted process starts warm and never serves a state that changed
while it was down.

The file: a header line naming the format and the database, then for
each entry its oid, tid, length and state, then a trailer with the count
and a CRC-32 of everything before it. It is written to a temporary file
in the same directory and renamed over the old one, so a reader (or a
process starting while another exits) sees a whole file or the previous
one; a file that is truncated, damaged or of another database is ignored
with a warning. Its size is bounded by ``cache-local-mb``.
"""
import hashlib
import logging
import os
import re
import struct
import tempfile
import zlib

log = logging.getLogger(__name__)

MAGIC = b'relstorage cache 1\n'
_ENTRY = struct.Struct('>qqI')
_TRAILER = struct.Struct('>QI')


def cache_path(directory, prefix, identity):
    """The file of the database *identity* (a string naming it) in
    *directory*: named after ``cache-prefix`` when one is set, else after
    the database."""
    if prefix:
        stem = re.sub(r'[^A-Za-z0-9_.-]', '_', prefix)
    else:
        stem = hashlib.sha256(identity.encode('utf-8')).hexdigest()[:20]
    return os.path.join(directory, 'relstorage-%s.cache' % stem)


def save(path, identity, tid, entries):
    """Write ``[(oid, tid, state)]`` current at *tid* to *path*,
    atomically; returns the number written."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix='.relstorage-cache-', dir=directory)
    crc = 0
    try:
        with os.fdopen(fd, 'wb') as f:
            def write(data):
                nonlocal crc
                crc = zlib.crc32(data, crc)
                f.write(data)
            write(MAGIC)
            write(b'%d %s\n' % (tid, identity.encode('utf-8')))
            count = 0
            for oid, entry_tid, state in entries:
                write(_ENTRY.pack(oid, entry_tid, len(state)))
                write(state)
                count += 1
            f.write(_TRAILER.pack(count, crc))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.remove(temp)
        except OSError:
            pass
        raise
    return count


class Unusable(Exception):
    """The file cannot be used (the reason is the message)."""


def load(path, identity):
    """``(tid, [(oid, tid, state)])`` from the file at *path*, or None
    when there is none or it cannot be used (logged)."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning('cache-local-dir: cannot read %s (%s); starting with '
                    'an empty cache', path, e)
        return None
    try:
        return _parse(data, identity)
    except Unusable as e:
        log.warning('cache-local-dir: ignoring %s: %s', path, e)
        return None


def _parse(data, identity):
    if not data.startswith(MAGIC):
        raise Unusable('not a relstorage cache file')
    if len(data) < len(MAGIC) + _TRAILER.size:
        raise Unusable('truncated')
    body, trailer = data[:-_TRAILER.size], data[-_TRAILER.size:]
    count, crc = _TRAILER.unpack(trailer)
    if zlib.crc32(body) != crc:
        raise Unusable('damaged or truncated (checksum mismatch)')
    end = body.find(b'\n', len(MAGIC))
    try:
        tid_text, name = body[len(MAGIC):end].split(b' ', 1)
        tid = int(tid_text)
    except ValueError:
        raise Unusable('damaged header') from None
    if name.decode('utf-8', 'replace') != identity:
        raise Unusable('it holds the cache of another database')
    entries = []
    pos = end + 1
    while pos < len(body):
        oid, entry_tid, size = _ENTRY.unpack_from(body, pos)
        pos += _ENTRY.size
        entries.append((oid, entry_tid, body[pos:pos + size]))
        pos += size
    if pos != len(body) or len(entries) != count:
        raise Unusable('damaged (entries do not add up)')
    return tid, entries


def _identity(adapter):
    return '%r %s' % (adapter.location(),
                      'history-preserving' if adapter.keep_history
                      else 'history-free')


def warm(cache, adapter, options):
    """Fill the new *cache* from the file of *adapter*'s database, keeping
    only the entries still current in one snapshot; returns how many."""
    identity = _identity(adapter)
    path = cache_path(options.cache_local_dir, options.cache_prefix,
                      identity)
    loaded = load(path, identity)
    if loaded is None:
        return 0
    saved_tid, entries = loaded
    session = adapter.open_load_session()
    try:
        view = session.restart()
        if view < saved_tid:
            log.warning('cache-local-dir: ignoring %s: the database is '
                        'older than the file (emptied or replaced)', path)
            return 0
        current = session.current_tids([oid for oid, _, _ in entries])
    finally:
        session.close()
    kept = cache.restore(view, [entry for entry in entries
                                if current.get(entry[0]) == entry[1]])
    log.info('cache-local-dir: %d of %d cached objects from %s are '
             'current', kept, len(entries), path)
    return kept


def keep(cache, adapter, options):
    """Write *cache*'s current entries to the file of *adapter*'s
    database (never raises: a cache that cannot be kept is only
    logged)."""
    identity = _identity(adapter)
    path = cache_path(options.cache_local_dir, options.cache_prefix,
                      identity)
    try:
        tid, entries = cache.current_entries()
        if tid is None:
            return 0
        return save(path, identity, tid, entries)
    except Exception as e:  # noqa: BLE001 -- closing must go on
        log.warning('cache-local-dir: could not write %s: %s', path, e)
        return 0
