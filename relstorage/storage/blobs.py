"""IBlobStorage and IBlobStorageRestoreable: the ZODB side of blobs. Files
and the cache are handled by ``relstorage.blobs``."""
import ZODB.blob
from ZODB.POSException import Unsupported
from ZODB.utils import p64
from ZODB.utils import u64

from ..blobs.files import copy_into
from .load import stored_id


class BlobMethods:
    """Mixin of RelStorage; active when ``blob-dir`` is set."""

    _blobs = None

    def _blob_helper(self):
        if self._blobs is None:
            raise Unsupported('%s has no blob-dir configured, so it cannot '
                              'store blobs' % self._name)
        return self._blobs

    @property
    def fshelper(self):
        """ZODB's FilesystemHelper of the blob directory (ZODB's blob
        copying and tests look files up through it)."""
        if self._blobs is None:
            raise AttributeError('fshelper')  # not a blob storage
        return self._blobs.fshelper

    def temporaryDirectory(self):
        return self._blob_helper().temporary_directory()

    def storeBlob(self, oid, oldserial, data, blobfilename, version,
                  transaction):
        blobs = self._blob_helper()
        self.store(oid, oldserial, data, version, transaction)
        self._buffer_for(transaction).blobs[u64(oid)] = blobs.stage(
            blobfilename)

    def restoreBlob(self, oid, serial, data, blobfilename, prev_txn,
                    transaction):
        blobs = self._blob_helper()
        self.restore(oid, serial, data, '', prev_txn, transaction)
        self._buffer_for(transaction).blobs[u64(oid)] = blobs.stage(
            blobfilename)

    def loadBlob(self, oid, serial):
        return self._blob_helper().load(self, stored_id(oid), u64(serial))

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

    def _copy_blob_for_undo(self, tpc, oid, tid):
        """Give *oid* in this transaction a copy of the blob of its
        revision *tid* (undo restores an earlier revision)."""
        tpc.blobs[oid] = copy_into(
            self.loadBlob(p64(oid), p64(tid)),
            self._blob_helper().temporary_directory(), 'undo-')
