"""Room for an SQLite COMMIT, taken at vote.

In WAL mode the pages a transaction changes stay in its connection's page
cache until the cache is full, when the oldest are written to the WAL
("spilled"), or until COMMIT, which appends the others to the WAL, the
last one marked as the commit (page 1 when no page is left). So after a
vote that wrote every row, the COMMIT still writes at most as many pages
as the cache holds, past the end of the WAL, and may extend the WAL index
(the ``-shm`` file) by a 32 KiB region. On a full disk either fails.

``reserve`` allocates that room at vote: with ``fallocate``'s
``FALLOC_FL_KEEP_SIZE`` the file system gives the blocks past the files'
ends without changing their sizes, so SQLite's view of the files is
unchanged and its COMMIT writes into blocks that are there already. Where
the call does not exist (not Linux) or the file system refuses it, or the
database is not in WAL mode, nothing is reserved (a warning says so, once)
and the COMMIT can still meet a full disk. So can it on a copy-on-write
file system (btrfs, ZFS), where rewriting the WAL takes new blocks
whatever was reserved.
"""
import ctypes
import ctypes.util
import errno
import logging
import os
import threading

from .errors import database_full

log = logging.getLogger(__name__)

WAL_HEADER = 32
FRAME_HEADER = 24
#: The WAL index's regions: 32 KiB, each indexing 4,096 frames (the first
#: 34 fewer: it starts with the index's header).
SHM_REGION = 32768
SHM_REGION_FRAMES = 4096
SHM_HEADER_SLOTS = 34
#: Pages the cache may hold besides its limit: those the B-tree cursors
#: of the last statement pinned, and page 1.
EXTRA_PAGES = 32

FALLOC_FL_KEEP_SIZE = 0x01
_SPACE_ERRORS = (errno.ENOSPC, errno.EDQUOT)


def _libc_fallocate():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)
        func = libc.fallocate64
    except (OSError, AttributeError, TypeError):
        return None
    func.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                     ctypes.c_int64)
    func.restype = ctypes.c_int
    return func


_fallocate = _libc_fallocate()


def keep_size_allocate(fd, offset, length):
    """Allocate the blocks of ``[offset, offset + length)`` of *fd*
    without changing its size. False where that cannot be done here;
    OSError (ENOSPC...) when there is no room."""
    if _fallocate is None:
        return False
    if _fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err))


class _IndexFiles:
    """Descriptors of the WAL index files this process reserved room in.

    They stay open: SQLite locks the ``-shm`` file with POSIX locks, and
    closing any descriptor of a file drops every lock the process holds
    on it. One is closed only once its file was replaced (SQLite removes
    the index when the last connection closes, and makes a new one), and
    SQLite holds no lock on a removed one."""

    def __init__(self):
        self._lock = threading.Lock()
        self._fds = {}

    def descriptor(self, path):
        """An open descriptor of *path*, or None when it does not exist."""
        with self._lock:
            try:
                ino = os.stat(path).st_ino
            except FileNotFoundError:
                return None
            fd = self._fds.get(path)
            if fd is not None and os.fstat(fd).st_ino != ino:
                os.close(fd)
                fd = None
            if fd is None:
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                except FileNotFoundError:
                    return None
                self._fds[path] = fd
            return fd


    def release(self, path):
        """Close the descriptor of *path* if SQLite removed or replaced
        that file (it holds no lock on it then): a closed database keeps
        no removed file, nor its file system, busy."""
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                return
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            if current != os.fstat(fd).st_ino:
                del self._fds[path]
                os.close(fd)


_index_files = _IndexFiles()


def release(main_path):
    """After the connections of this process to *main_path* closed."""
    _index_files.release(main_path + '-shm')
_unsupported_logged = set()


def reserve(main_path, page_size, cache_pages, what):
    """Reserve room for the COMMIT of the write transaction open on the
    SQLite file *main_path* in WAL mode, whose connection's cache holds at
    most *cache_pages* dirty pages of *page_size*. DatabaseFull (naming
    *what*) when there is no room."""
    frame = page_size + FRAME_HEADER
    needed = WAL_HEADER + (cache_pages + EXTRA_PAGES) * frame
    try:
        try:
            fd = os.open(main_path + '-wal', os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            # Not in WAL mode (a journal_mode pragma): the COMMIT writes
            # into the database file, which SQLite locks with POSIX locks
            # that a descriptor of ours, closed, would drop.
            _warn_once(main_path, 'journal_mode is not wal')
            return
        try:
            # SQLite writes the WAL from its start, without holes: what
            # the COMMIT appends lies below its size plus what it writes.
            end = os.fstat(fd).st_size + needed
            done = keep_size_allocate(fd, 0, end)
        finally:
            os.close(fd)    # SQLite locks the index, not the WAL
        if done:
            frames = (end - WAL_HEADER) // frame + 1
            regions = (frames + SHM_HEADER_SLOTS) // SHM_REGION_FRAMES + 1
            fd = _index_files.descriptor(main_path + '-shm')
            if fd is not None:
                done = keep_size_allocate(fd, 0, regions * SHM_REGION)
    except OSError as e:
        if e.errno in _SPACE_ERRORS:
            raise database_full(what, e) from None
        raise
    if not done:
        _warn_once(main_path, 'fallocate is not available on this system '
                   'or file system')


def _warn_once(main_path, why):
    if main_path not in _unsupported_logged:
        _unsupported_logged.add(main_path)
        log.warning(
            'cannot reserve room for commits in %s (%s): a COMMIT can '
            'still fail on a full disk after its vote succeeded',
            os.path.dirname(main_path), why)
