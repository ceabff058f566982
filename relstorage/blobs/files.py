"""What both blob modes do with the blob directory: its layout (ZODB's
``FilesystemHelper``, bushy unless the directory says otherwise), staging
the files a transaction stores, placing committed files, and removing the
files of revisions a pack removed."""
import logging
import os
import shutil
import tempfile

from ZODB.blob import BLOB_SUFFIX
from ZODB.blob import rename_or_copy_blob
from ZODB.POSException import POSKeyError
from ZODB.utils import oid_repr
from ZODB.utils import p64
from ZODB.utils import repr_to_oid
from ZODB.utils import tid_repr
from ZODB.utils import u64

from ..cache.safefile import checked_dir
from ..exceptions import CacheFileUnusable
from ..exceptions import ConfigurationError
from .layout import helper
from .signed import remove_blob_file

log = logging.getLogger(__name__)


def missing_blob(oid, tid, why):
    """The POSKeyError of a blob that cannot be found; names the object
    and the revision."""
    return POSKeyError('no blob for oid %s at tid %s: %s'
                       % (oid_repr(p64(oid)), tid_repr(p64(tid)), why))


def copy_into(path, directory, prefix):
    """A new copy of the file at *path* in *directory* (a storage's
    temporary directory, so the storage may take ownership of it)."""
    fd, copy = tempfile.mkstemp(prefix=prefix, suffix='.tmp', dir=directory)
    with open(fd, 'wb') as out, open(path, 'rb') as src:
        shutil.copyfileobj(src, out, 1 << 20)
    return copy


class BlobFiles:
    """The blob directory of one storage (shared by its instances)."""

    #: Whether the directory is a cache whose files are served (refused
    #: unless the process user's own and writable by no one else) rather
    #: than the blobs' only home (shared-blob-dir: a warning).
    trusted_dir = False

    def __init__(self, blob_dir):
        blob_dir = os.path.abspath(os.path.expanduser(blob_dir))
        # Owner-only, and missing parents too: blobs are application data.
        self._check_dir(blob_dir)
        # The layout is chosen from what the directory holds, so only
        # after it exists and before anything is put in it.
        self.fshelper = self._open_layout(blob_dir)
        try:
            os.makedirs(self.fshelper.temp_dir, mode=0o700, exist_ok=True)
            self.fshelper.create()
        except (OSError, ValueError) as e:
            raise ConfigurationError(
                'cannot use blob-dir %s: %s' % (blob_dir, e)) from e
        self.blob_dir = blob_dir

    def _open_layout(self, blob_dir):
        """The directory's FilesystemHelper (see layout)."""
        return helper(blob_dir)

    def _check_dir(self, blob_dir):
        """Create *blob_dir* (0700) if missing, and check that it is the
        process user's own and writable by no one else (see safefile)."""
        try:
            with checked_dir(blob_dir, create=True):
                pass
        except OSError as e:
            raise ConfigurationError(
                'cannot use blob-dir %s: %s' % (blob_dir, e)) from e
        except CacheFileUnusable as e:
            if self.trusted_dir:
                raise ConfigurationError(
                    'cannot use blob-dir %s as the blob cache: %s (its '
                    'files are served as the database\'s blobs; chmod go-w '
                    'it, or give each user a blob-dir of its own)'
                    % (blob_dir, e)) from None
            log.warning('blob-dir %s: %s; whoever may write to it can '
                        'change the blobs', blob_dir, e)

    def temporary_directory(self):
        return self.fshelper.temp_dir

    def filename(self, oid, tid):
        return self.fshelper.getBlobFilename(p64(oid), p64(tid))

    # Transactions

    def stage(self, path):
        """Take ownership of the file at *path* (ZODB hands it over at
        storeBlob and may delete its directory before vote): move it under
        the blob directory and return its new name."""
        fd, staged = tempfile.mkstemp(prefix='stage-', suffix='.tmp',
                                      dir=self.fshelper.temp_dir)
        os.close(fd)
        rename_or_copy_blob(path, staged, chmod=False)
        return staged

    def create_path(self, oid):
        """Create the directory of *oid*'s blob files, and the ones above
        it, owner-only like the blob directory itself."""
        path = self.fshelper.getPathForOID(p64(oid))
        missing = []
        while not os.path.isdir(path) and path != self.blob_dir:
            missing.append(path)
            path = os.path.dirname(path)
        for path in reversed(missing):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:  # another thread or process was first
                pass

    def place(self, staged, oid, tid):
        """Make *staged* the committed file of revision *(oid, tid)*."""
        self.create_path(oid)
        target = self.filename(oid, tid)
        rename_or_copy_blob(staged, target)
        return target

    def discard(self, paths):
        for path in paths:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning('could not remove blob file %s: %s', path, e)

    def abort(self, tpc):
        self.discard(tpc.blobs.values())
        tpc.blobs.clear()

    # Hooks of the commit; the database mode overrides what it needs.

    def vote(self, session, tpc, current):
        """Upload what the database keeps; ``{oid: blob_id}``."""
        return {}

    def before_commit(self, tpc):
        """A callable run with the new tid before the commit, or None."""
        return None

    def after_commit(self, tpc, tid):
        """The transaction committed as *tid*."""

    # Pack

    def _blob_files(self, oid):
        """``{tid: path}`` of the committed files of *oid* here."""
        path = self.fshelper.getPathForOID(p64(oid))
        try:
            names = os.listdir(path)
        except FileNotFoundError:
            return {}
        found = {}
        for name in names:
            if name.endswith(BLOB_SUFFIX):
                try:
                    tid = u64(repr_to_oid(name[:-len(BLOB_SUFFIX)]))
                except (ValueError, TypeError):
                    continue
                found[tid] = os.path.join(path, name)
        return found

    def _remove_dir_if_empty(self, oid):
        path = self.fshelper.getPathForOID(p64(oid))
        try:
            os.rmdir(path)
        except OSError:
            pass  # not empty, or already gone

    def packed(self, removed_oids, kept):
        """A pack batch committed: every revision of *removed_oids* is
        gone, and the revisions of ``kept`` oids older than the tid mapped
        to them. Remove their files."""
        for oid in removed_oids:
            for path in self._blob_files(oid).values():
                remove_blob_file(path)
            self._remove_dir_if_empty(oid)
        for oid, keep_tid in kept.items():
            for tid, path in self._blob_files(oid).items():
                if tid < keep_tid:
                    remove_blob_file(path)

    def prune_history_free(self, current_tids, pack_tid):
        """History-free: remove files of revisions that are no longer
        current, committed at or before *pack_tid* (newer ones may belong
        to commits the pack did not see). *current_tids(oids)* maps oids
        to their current tids."""
        batch = []
        for oid, _path in self.fshelper.listOIDs():
            old = {tid: p for tid, p in self._blob_files(u64(oid)).items()
                   if tid <= pack_tid}
            if old:
                batch.append((u64(oid), old))
            if len(batch) >= 500:
                self._prune(batch, current_tids)
                batch = []
        self._prune(batch, current_tids)

    def _prune(self, batch, current_tids):
        if not batch:
            return
        current = current_tids([oid for oid, _ in batch])
        for oid, old in batch:
            for tid, path in old.items():
                if tid != current.get(oid):
                    remove_blob_file(path)
            self._remove_dir_if_empty(oid)


def reading_helper(blob_dir):
    """ZODB's FilesystemHelper of an existing blob directory, its layout
    read from the directory, for tools that only look: creates nothing."""
    return helper(os.path.abspath(os.path.expanduser(blob_dir)))
