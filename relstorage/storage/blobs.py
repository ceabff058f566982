"""IBlobStorage and IBlobStorageRestoreable: the ZODB side of blobs. Files
and the cache are handled by ``relstorage.blobs``."""
import ZODB.blob
from ZODB.POSException import Unsupported
from ZODB.utils import u64

from .load import stored_id


class BlobMethods:
    """The blob methods of one storage instance: *blobs* is the storage's
    blob helper (None without ``blob-dir``: every method says so),
    *commit* its tpc.Commit and *read* its view's read (see
    view.View.read)."""

    def __init__(self, name, blobs, commit, read):
        self.name = name
        self.blobs = blobs
        self.commit = commit
        self.read = read

    def _blob_helper(self):
        if self.blobs is None:
            raise Unsupported('%s has no blob-dir configured, so it cannot '
                              'store blobs' % self.name)
        return self.blobs

    def temporaryDirectory(self):
        return self._blob_helper().temporary_directory()

    def storeBlob(self, oid, oldserial, data, blobfilename, version,
                  transaction):
        blobs = self._blob_helper()
        self.commit.store(oid, oldserial, data, version, transaction)
        self.commit.buffer_for(transaction).blobs[u64(oid)] = blobs.stage(
            blobfilename)

    def restoreBlob(self, oid, serial, data, blobfilename, prev_txn,
                    transaction):
        blobs = self._blob_helper()
        self.commit.restore(oid, serial, data, '', prev_txn, transaction)
        self.commit.buffer_for(transaction).blobs[u64(oid)] = blobs.stage(
            blobfilename)

    def loadBlob(self, oid, serial):
        return self._blob_helper().load(self.read, stored_id(oid),
                                        u64(serial))

    def openCommittedBlobFile(self, oid, serial, blob=None):
        # The cache check may remove a cached file between loadBlob and
        # open; loading again downloads it anew.
        for attempt in range(3):
            path = self.loadBlob(oid, serial)
            try:
                if blob is None:
                    return open(path, 'rb')
                return ZODB.blob.BlobFile(path, 'r', blob)
            except FileNotFoundError:
                if attempt == 2:
                    raise
