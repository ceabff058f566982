"""Reading and writing a file in a directory that must be the process's own.

The persistent cache (``cache-local-dir``) and the blob cache (``blob-dir``
with ``shared-blob-dir false``) are read back into the process and served,
so their directories and files are checked the way OpenSSH checks its
files: owned by the process's user, writable by no one else,
and the file a regular file of bounded size. The checks are made on open
descriptors (``fstat``), and every name is opened relative to the
checked directory's descriptor without following a symbolic link, so
nothing can be swapped in between a check and its use. A file that fails
a check is refused (CacheFileUnusable, naming the reason); it is never
read, let alone whole.
"""
import contextlib
import errno
import os
import secrets
import stat

from ..exceptions import CacheFileUnusable

#: The mode of the directory when it has to be created, and of every file.
DIR_MODE = 0o700
FILE_MODE = 0o600

_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)
_DIR_FLAGS = (os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0) | os.O_NONBLOCK
              | _CLOEXEC)
# O_NONBLOCK: a FIFO put where the file belongs opens at once (and is then
# refused) instead of waiting forever for a writer.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_WRITE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                | _CLOEXEC)
_KINDS = ((stat.S_ISDIR, 'a directory'), (stat.S_ISLNK, 'a symbolic link'),
          (stat.S_ISFIFO, 'a FIFO'), (stat.S_ISSOCK, 'a socket'),
          (stat.S_ISCHR, 'a character device'),
          (stat.S_ISBLK, 'a block device'))


def _kind(mode):
    for test, name in _KINDS:
        if test(mode):
            return name
    return 'not a regular file'


def check_owner_and_mode(st, what):
    """Refuse what *st* describes unless the process's user owns it and
    neither its group nor others may write to it."""
    uid = os.geteuid()
    if st.st_uid != uid:
        raise CacheFileUnusable(
            'the %s is owned by uid %d, not by this process\'s user (uid %d)'
            % (what, st.st_uid, uid))
    writable = st.st_mode & 0o022
    if writable:
        raise CacheFileUnusable(
            'the %s is writable by %s (mode %04o); it must be writable by '
            'its owner only' % (
                what, 'its group and others' if writable == 0o022
                else 'its group' if writable == 0o020 else 'others',
                stat.S_IMODE(st.st_mode)))


def check_regular(st, what='file'):
    """Refuse what *st* (of ``lstat`` or ``fstat``) describes unless it is
    a regular file that passes check_owner_and_mode."""
    if not stat.S_ISREG(st.st_mode):
        raise CacheFileUnusable('it is %s, not a regular file'
                                % _kind(st.st_mode))
    check_owner_and_mode(st, what)


def _make_dirs(path):
    """Create *path* and its missing parents, each DIR_MODE; True when
    *path* itself was created here."""
    parent = os.path.dirname(path)
    if parent and parent != path and not os.path.isdir(parent):
        _make_dirs(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return False
    return True


@contextlib.contextmanager
def checked_dir(path, create):
    """A descriptor of the directory *path*, after the checks; with
    *create* a missing one is made DIR_MODE (whatever the umask)."""
    created = _make_dirs(path) if create else False
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as e:
        raise CacheFileUnusable('cannot open the directory: %s'
                                % (e.strerror or e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise CacheFileUnusable('it is not a directory')
        if created:
            os.fchmod(fd, DIR_MODE)
            st = os.fstat(fd)
        check_owner_and_mode(st, 'directory')
        yield fd
    finally:
        os.close(fd)


def read_bounded(dir_fd, name, limit):
    """The bytes of the file *name* in the directory *dir_fd*, or None
    when there is none; refused unless it is a regular file of at most
    *limit* bytes that passes check_owner_and_mode."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    # Not even opened unless it passes: opening a device can have effects.
    check_regular(st)
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CacheFileUnusable('it is a symbolic link') from None
        raise CacheFileUnusable('cannot open it: %s'
                                % (e.strerror or e)) from None
    try:
        # What was opened is what counts (it may have been swapped since
        # the look above).
        st = os.fstat(fd)
        check_regular(st)
        if st.st_size > limit:
            raise CacheFileUnusable(
                'it holds %d bytes, more than the %d allowed'
                % (st.st_size, limit))
        parts = []
        left = limit + 1
        while left > 0:
            part = os.read(fd, min(left, 1 << 20))
            if not part:
                break
            parts.append(part)
            left -= len(part)
        if left <= 0:
            raise CacheFileUnusable(
                'it grew past the %d bytes allowed while being read'
                % limit)
        return b''.join(parts)
    finally:
        os.close(fd)


def replace_file(dir_fd, name, write, durable=True):
    """Make *name* in the directory *dir_fd* a new FILE_MODE file that
    ``write(fileobj)`` fills: written under a fresh name, made durable
    (unless not *durable*: a file that may be lost in a crash), then
    renamed over *name* (which is replaced, never followed)."""
    temp = '.relstorage-cache-%s' % secrets.token_hex(8)
    fd = os.open(temp, _WRITE_FLAGS, FILE_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, 'wb') as f:
            fd = None
            result = write(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    if durable:
        os.fsync(dir_fd)
    return result
