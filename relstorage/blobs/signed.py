"""The blob cache's signatures: what proves a cached file holds the blob.

Each file the storage puts in the blob cache (downloaded, or committed by
this process) gets a signature beside it, ``<file>.sig``: an HMAC-SHA256
of the oid, the tid and the file's bytes, keyed with a key derived from
the database's cache key (IRelStorageAdapter.cache_key, the one that signs
``cache-local-dir`` files). A cached file is served only when its
signature checks out, so a file of the right size whose bytes changed
(damaged, or written by anyone who cannot read the database) is
downloaded again. The check reads the file once per process: a file whose
identity, size and modification time have not changed since is not read
again (only its owner could change it without changing those).

Without the key (a storage that may only read, on a database that has
none yet) files are neither signed nor checked beyond their size.
"""
import hashlib
import hmac
import logging
import os
import threading

from ZODB.blob import remove_committed

from ..cache import safefile
from ..exceptions import CacheFileUnusable
from ..exceptions import CacheKeyUnavailable

log = logging.getLogger(__name__)

SUFFIX = '.sig'
#: At most this many checked files are remembered (then all forgotten).
REMEMBERED = 100000


def _identity(st):
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Signatures:
    """The signatures of one blob cache (shared by a storage's instances);
    *get_key* returns the database's cache key."""

    def __init__(self, get_key):
        self._get_key = get_key
        self._key = None
        self._tried = False
        self._lock = threading.Lock()
        #: path -> identity of the file when its signature last checked out
        self._checked = {}

    def key(self):
        """The signing key, or None without one (said once)."""
        if not self._tried:
            with self._lock:
                if not self._tried:
                    try:
                        self._key = hmac.new(self._get_key(), b'blob cache',
                                             hashlib.sha256).digest()
                    except CacheKeyUnavailable as e:
                        log.warning('the blob cache checks cached files by '
                                    'their size only: %s', e)
                    self._tried = True
        return self._key

    def start(self, oid, tid):
        """A new HMAC object for the bytes of *(oid, tid)*, or None."""
        key = self.key()
        if key is None:
            return None
        return hmac.new(key, b'relstorage blob %d %d\n' % (oid, tid),
                        hashlib.sha256)

    def _digest_of(self, fd, oid, tid):
        mac = self.start(oid, tid)
        while True:
            data = os.read(fd, 1 << 20)
            if not data:
                return mac.hexdigest()
            mac.update(data)

    def _remember(self, path, st):
        if len(self._checked) >= REMEMBERED:
            self._checked.clear()
        self._checked[path] = _identity(st)

    def sign(self, path, oid, tid, mac=None):
        """Write the signature of the file at *path* (*mac* holding its
        bytes already, or read here)."""
        if self.key() is None:
            return
        directory, name = os.path.split(path)
        with safefile.checked_dir(directory, create=False) as dir_fd:
            fd = os.open(name, safefile.READ_FLAGS, dir_fd=dir_fd)
            try:
                st = os.fstat(fd)
                digest = (mac.hexdigest() if mac is not None
                          else self._digest_of(fd, oid, tid))
            finally:
                os.close(fd)
            safefile.replace_file(dir_fd, name + SUFFIX,
                                  lambda f: f.write(digest.encode('ascii')),
                                  durable=False)
        self._remember(path, st)

    def check(self, path, oid, tid):
        """Refuse (CacheFileUnusable) the cached file at *path* unless its
        signature checks out; nothing to check without a key."""
        if self.key() is None:
            return
        directory, name = os.path.split(path)
        with safefile.checked_dir(directory, create=False) as dir_fd:
            signature = safefile.read_bounded(dir_fd, name + SUFFIX, 64)
            if signature is None:
                raise CacheFileUnusable('it has no signature')
            try:
                fd = os.open(name, safefile.READ_FLAGS, dir_fd=dir_fd)
            except OSError as e:
                raise CacheFileUnusable('cannot open it: %s'
                                        % (e.strerror or e)) from None
            try:
                st = os.fstat(fd)
                safefile.check_regular(st, 'cached blob file')
                if self._checked.get(path) == _identity(st):
                    return
                digest = self._digest_of(fd, oid, tid)
            finally:
                os.close(fd)
        if not hmac.compare_digest(digest.encode('ascii'), signature):
            raise CacheFileUnusable('its bytes do not match its signature')
        self._remember(path, st)


def remove_blob_file(path):
    """Remove the committed blob file *path* (FileNotFoundError when it is
    gone) and its signature, if any."""
    remove_committed(path)
    try:
        os.remove(path + SUFFIX)
    except FileNotFoundError:
        pass
