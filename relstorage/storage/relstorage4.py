"""A RelStorage 4 database as the source of a copy (zodbconvert): its
transactions, records and blobs, read as they are, changing nothing. The
SQL is in ``adapters.relstorage4``."""
import os
import shutil
import tempfile

import ZODB.blob
import ZODB.interfaces
from ZODB.BaseStorage import DataRecord
from ZODB.BaseStorage import TransactionRecord
from ZODB.POSException import POSKeyError
from ZODB.utils import p64
from ZODB.utils import u64
from zope.interface import implementer

from ..blobs.files import missing_blob
from .iteration import tid_bounds
from .iteration import PAGE


@implementer(ZODB.interfaces.IStorageIteration, ZODB.interfaces.IBlobStorage)
class RelStorage4Source:
    """Read-only: iterator(), lastTransaction(), loadBlob()."""

    def __init__(self, adapter):
        self._adapter = adapter
        self._reader = adapter.open_relstorage4_reader()
        self._blob_dir = tempfile.mkdtemp(prefix='relstorage4-blobs-')
        self._name = 'RelStorage 4 (%s) in the %s' % (
            self._reader.mode, adapter.describe())

    def getName(self):
        return self._name

    describe = sortKey = getName

    def isReadOnly(self):
        return True

    def lastTransaction(self):
        return p64(self._reader.last_tid())

    def iterator(self, start=None, stop=None):
        reader = self._reader
        next_tid, stop = tid_bounds(start, stop)
        while next_tid <= stop:
            page = reader.transactions(next_tid, stop, PAGE)
            for tid, user, description, extension, packed in page:
                # The copy has restored the blobs of the transaction before
                # (a transaction with blobs is restored on its own).
                self._forget_blobs()
                yield _Transaction(reader, tid, user, description, extension,
                                   packed)
            if len(page) < PAGE:
                return
            next_tid = page[-1][0] + 1

    def loadBlob(self, oid, serial):
        ioid, itid = u64(oid), u64(serial)
        chunks = self._reader.blob_chunks(ioid, itid)
        if not chunks:
            raise missing_blob(ioid, itid, 'RelStorage 4 holds no blob for '
                               'that revision')
        path = os.path.join(self._blob_dir, '%x-%x.blob' % (ioid, itid))
        with open(path, 'wb') as f:
            for num in chunks:
                for piece in self._reader.blob_pieces(ioid, itid, num):
                    f.write(piece)
        return path

    def _forget_blobs(self):
        for name in os.listdir(self._blob_dir):
            os.remove(os.path.join(self._blob_dir, name))

    def openCommittedBlobFile(self, oid, serial, blob=None):
        path = self.loadBlob(oid, serial)
        if blob is None:
            return open(path, 'rb')
        return ZODB.blob.BlobFile(path, 'r', blob)

    def temporaryDirectory(self):
        return self._blob_dir

    def load(self, oid, version=''):
        raise POSKeyError(oid)  # a copy reads through the iterator

    def close(self):
        self._reader.close()
        self._adapter.close()
        shutil.rmtree(self._blob_dir, ignore_errors=True)


class _Transaction(TransactionRecord):

    def __init__(self, reader, tid, user, description, extension, packed):
        super().__init__(p64(tid), 'p' if packed else ' ', user, description,
                         extension)
        self._reader = reader
        self._itid = tid

    def __iter__(self):
        for oid, state in self._reader.records(self._itid):
            yield DataRecord(p64(oid), self.tid, state, None)
