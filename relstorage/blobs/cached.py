"""``shared-blob-dir false`` (the default): blobs are stored in the database
and the blob directory is this client's cache of them, kept under
``blob-cache-size``."""
import logging
import os
import time

from ZODB.blob import set_not_writable
from ZODB.utils import p64

from ..cache.safefile import FILE_MODE
from ..cache.safefile import check_regular
from ..exceptions import CacheFileUnusable
from ..exceptions import CorruptRecord
from .cachesize import CacheSizeChecker
from .files import BlobFiles
from .files import missing_blob
from .layout import open_cache_layout
from .signed import Signatures

log = logging.getLogger(__name__)


def cached_file_ok(path, size=None):
    """Whether the blob cache's file at *path* may be served for a blob of
    *size* bytes: a regular file (a symbolic link, FIFO or device is not
    even opened), the process user's own, writable by no one else, and
    exactly as long as the blob in the database (a file cut short by a
    crash is not; None: a revision the database no longer holds). A file
    that fails is logged (and downloaded again, where the database still
    has the blob)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    try:
        check_regular(st, 'cached blob file')
        if size is not None and st.st_size != size:
            raise CacheFileUnusable(
                'it holds %d bytes where the blob in the database holds %d'
                % (st.st_size, size))
    except CacheFileUnusable as e:
        log.warning('not using the cached blob file %s: %s', path, e)
        return False
    return True


class DatabaseBlobs(BlobFiles):

    #: A blob cache is served from: a directory others may write is
    #: refused (see BlobFiles).
    trusted_dir = True

    def _open_layout(self, blob_dir):
        # A cache another client (RelStorage 4) left is begun anew.
        return open_cache_layout(blob_dir)

    def __init__(self, blob_dir, options, keep_history, cache_key,
                 open_session, where):
        super().__init__(blob_dir)
        self.open_session = open_session
        self.where = where
        self.signatures = Signatures(cache_key)
        self.keep_history = keep_history
        self.chunk_size = options.blob_chunk_size
        self.checker = CacheSizeChecker(
            self.blob_dir, options.blob_cache_size,
            options.blob_cache_size_check,
            options.blob_cache_size_check_external)

    # Commit

    def vote(self, session, tpc, current):
        if not self.keep_history:
            # Without history the stored revisions replace the current
            # ones, and their blobs go with them (still visible to older
            # snapshots until this commits).
            replaced = [oid for oid in tpc.stores if current.get(oid)]
            if replaced:
                session.drop_replaced_blobs(replaced)
        return {oid: session.upload_blob(path, self.chunk_size)
                for oid, path in sorted(tpc.blobs.items())}

    def after_commit(self, tpc, tid):
        # The committed files become cache entries (the database has the
        # data, so a failure here loses nothing).
        added = 0
        for oid, staged in list(tpc.blobs.items()):
            try:
                added += os.path.getsize(staged)
                # Read-only (as ZODB makes committed blobs) and the
                # owner's only, like the files downloaded.
                target = self.place(staged, oid, tid)
                os.chmod(target, FILE_MODE & ~0o222)
                self.signatures.sign(target, oid, tid)
            except (OSError, CacheFileUnusable):
                # Unsigned, it is downloaded again when loaded.
                self.discard([staged])
            del tpc.blobs[oid]
        self.checker.added(added)

    # Load

    def load(self, read, oid, tid):
        """The path of the cached file of the blob of *(oid, tid)*,
        downloaded if need be; *read(fetch)* returns ``fetch(session)``
        on a load session in the reading instance's snapshot."""
        path = self.filename(oid, tid)
        self.signatures.key()  # read once, not while a snapshot is held
        found = read(lambda session: self._fetch(session, oid, tid, path))
        if not found:
            # Not in this instance's snapshot: a revision committed since
            # (our own, whose cached file was removed meanwhile, say).
            session = self.open_session()
            try:
                session.restart()
                found = self._fetch(session, oid, tid, path)
            finally:
                session.close()
        if not found and not self._usable(path, oid, tid):
            raise missing_blob(oid, tid, 'no such revision in the %s'
                               % self.where)
        # (Without history, a revision replaced or deleted since is gone
        # from the database but still visible to older snapshots: its
        # cached file, if any, is served after the checks that need no
        # database.)
        return path

    def _fetch(self, session, oid, tid, path):
        """Make *path* hold the blob of *(oid, tid)*: the cached file if
        it is _usable for the size *session* gives the blob, else a fresh
        download. False when *session* does not see that revision."""
        found = session.blob_of(oid, tid)
        if found is None:
            return False
        blob_id, count, first, last, size = found
        if blob_id is None:
            raise missing_blob(oid, tid, 'the revision holds no blob')
        if not count:
            raise missing_blob(oid, tid, 'its data (blob %d) is missing '
                               'from the database' % blob_id)
        if first != 0 or last != count - 1:
            raise self._damaged(
                session, oid, tid, blob_id, 'its chunks are numbered %d to '
                '%d, but there are %d of them' % (first, last, count))
        if self._usable(path, oid, tid, size):
            # Record the use: the cache check removes the least recently
            # used files first.
            os.utime(path, ns=(time.time_ns(), os.lstat(path).st_mtime_ns))
        else:
            self._download(session, oid, tid, blob_id, count, path)
        return True

    def _usable(self, path, oid, tid, size=None):
        """Whether the cached file at *path* passes cached_file_ok and its
        signature checks out."""
        if not cached_file_ok(path, size):
            return False
        try:
            self.signatures.check(path, oid, tid)
        except (CacheFileUnusable, OSError) as e:
            log.warning('not using the cached blob file %s: %s', path, e)
            return False
        return True

    def _download(self, session, oid, tid, blob_id, count, path):
        """Copy the *count* chunks of *blob_id* into the cache at *path*
        (a new 0600 file, made read-only), replacing, never following,
        whatever is there."""
        self.create_path(oid)
        fd, temp = self.fshelper.blob_mkstemp(p64(oid), p64(tid))
        size = 0
        mac = self.signatures.start(oid, tid)
        try:
            with os.fdopen(fd, 'wb') as f:
                for num in range(count):
                    data = session.blob_chunk(blob_id, num)
                    if data is None:
                        raise self._damaged(session, oid, tid, blob_id,
                                            'chunk %d is missing' % num)
                    if num == 0:
                        full = len(data)
                    else:
                        self._check_chunk(session, oid, tid, blob_id, num,
                                          count, len(data), full)
                    f.write(data)
                    if mac is not None:
                        mac.update(data)
                    size += len(data)
                # On disk before it gets its name: a crash leaves the old
                # entry or the whole file, never one that merely has the
                # right size.
                f.flush()
                os.fsync(f.fileno())
            set_not_writable(temp)
            # Atomic: a reader sees the whole file or none, and two
            # downloads of the same blob simply replace each other.
            os.replace(temp, path)
        except BaseException:
            self.discard([temp])
            raise
        self.checker.added(size)
        try:
            self.signatures.sign(path, oid, tid, mac)
        except (CacheFileUnusable, OSError) as e:
            # Served all the same (just written); downloaded again when
            # next loaded.
            log.warning('could not sign the cached blob file %s: %s',
                        path, e)

    def _check_chunk(self, session, oid, tid, blob_id, num, count, size,
                     full):
        """Chunks are written full but for the last, which is shorter (see
        upload_blob): anything else means the blob lost data."""
        last = num == count - 1
        if size < full if last else size == full:
            return
        why = 'chunk %d of %d holds %d bytes where chunk 0 holds %d' % (
            num, count, size, full)
        if last and size == full:
            why += ': the chunks after it are missing'
        raise self._damaged(session, oid, tid, blob_id, why)

    @staticmethod
    def _damaged(session, oid, tid, blob_id, why):
        return CorruptRecord(
            'the blob of object 0x%x (transaction %016x) in the %s is '
            'damaged: %s (blob %d)'
            % (oid, tid, session.adapter.describe(), why, blob_id))
