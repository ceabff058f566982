"""``shared-blob-dir true``: the blob directory, shared by every client
(NFS, say), is the only home of the blobs; the database holds none."""
import os

from .files import BlobFiles
from .files import missing_blob


class SharedBlobs(BlobFiles):

    def load(self, read, oid, tid):
        """The path of the blob file of *(oid, tid)* (*read*, which a
        blob cache reads the database with, is of no use here)."""
        path = self.filename(oid, tid)
        if not os.path.exists(path):
            raise missing_blob(oid, tid, 'no file %s in the shared blob-dir'
                               % path)
        return path

    def before_commit(self, tpc):
        if not tpc.blobs:
            return None

        def place(tid):
            # The files get their final names while the commit lock is
            # held, before the rows are committed: a reader who sees the
            # revision finds its file. Should the commit fail, abort()
            # removes them again.
            for oid, staged in list(tpc.blobs.items()):
                tpc.placed.append(self.place(staged, oid, tid))
                del tpc.blobs[oid]
        return place

    def abort(self, tpc):
        super().abort(tpc)
        self.discard(tpc.placed)
        del tpc.placed[:]

    def after_commit(self, tpc, tid):
        del tpc.placed[:]
