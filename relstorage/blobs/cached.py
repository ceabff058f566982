"""``shared-blob-dir false`` (the default): blobs are stored in the database
and the blob directory is this client's cache of them, kept under
``blob-cache-size``."""
import os
import time

from ZODB.blob import set_not_writable
from ZODB.utils import p64

from ..exceptions import CorruptRecord
from .cachesize import CacheSizeChecker
from .files import BlobFiles
from .files import missing_blob


class DatabaseBlobs(BlobFiles):

    def __init__(self, blob_dir, options, keep_history):
        super().__init__(blob_dir)
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
                self.place(staged, oid, tid)
            except OSError:
                self.discard([staged])
            del tpc.blobs[oid]
        self.checker.added(added)

    # Load

    def load(self, storage, oid, tid):
        path = self.filename(oid, tid)
        try:
            # Record the use: the cache check removes the least recently
            # used files first.
            os.utime(path, ns=(time.time_ns(), os.stat(path).st_mtime_ns))
            return path
        except FileNotFoundError:
            pass
        with storage._reading():
            found = self._download(storage._load_session(), oid, tid, path)
        if not found:
            # Not in this instance's snapshot: a revision committed since
            # (our own, whose cached file was removed meanwhile, say).
            session = storage._adapter.open_load_session()
            try:
                session.restart()
                found = self._download(session, oid, tid, path)
            finally:
                session.close()
        if not found:
            raise missing_blob(oid, tid, 'no such revision in the %s'
                               % storage._adapter.describe())
        return path

    def _download(self, session, oid, tid, path):
        """Copy the blob of *(oid, tid)* into the cache at *path*, chunk by
        chunk; False when *session* does not see that revision."""
        exists, blob_id = session.blob_id(oid, tid)
        if not exists:
            return False
        if blob_id is None:
            raise missing_blob(oid, tid, 'the revision holds no blob')
        count, first, last = session.blob_chunk_span(blob_id)
        if not count:
            raise missing_blob(oid, tid, 'its data (blob %d) is missing '
                               'from the database' % blob_id)
        if first != 0 or last != count - 1:
            raise self._damaged(
                session, oid, tid, blob_id, 'its chunks are numbered %d to '
                '%d, but there are %d of them' % (first, last, count))
        self.create_path(oid)
        fd, temp = self.fshelper.blob_mkstemp(p64(oid), p64(tid))
        size = 0
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
                    size += len(data)
            set_not_writable(temp)
            # Atomic: a reader sees the whole file or none, and two
            # downloads of the same blob simply replace each other.
            os.replace(temp, path)
        except BaseException:
            self.discard([temp])
            raise
        self.checker.added(size)
        return True

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
