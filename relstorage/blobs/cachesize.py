"""Keeping the local blob cache under ``blob-cache-size``.

Every process counts the bytes it adds to the cache; once they reach
``blob-cache-size-check`` percent of the limit, a check runs (in a thread,
or with ``blob-cache-size-check-external`` in a separate process) that
removes the least recently used blob files until the cache holds at most
``100 - blob-cache-size-check`` percent of the limit. A lock file keeps
processes sharing the directory from checking it at the same time.

Run as ``python -m relstorage.blobs.cachesize DIR LIMIT [TARGET]`` to shrink
a cache by hand (that is also how the external check runs).
"""
import fcntl
import logging
import os
import subprocess
import sys
import threading

from ZODB.blob import BLOB_SUFFIX

from ..children import child_env
from ..children import python_command
from .signed import remove_blob_file

log = logging.getLogger(__name__)

LOCK_NAME = '.cache-check.lock'


def cache_files(directory):
    """``[(last use, size, path)]`` of the committed blob files in
    *directory*, a cache or a shared blob-dir (not the temporary files
    of transactions)."""
    found = []
    temp = os.path.join(directory, 'tmp')
    for path, dirs, files in os.walk(directory):
        if path == temp:
            dirs[:] = []
            continue
        for name in files:
            if name.endswith(BLOB_SUFFIX):
                full = os.path.join(path, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue  # removed meanwhile
                found.append((max(st.st_atime_ns, st.st_mtime_ns),
                              st.st_size, full))
    return found


def shrink(directory, target):
    """Remove least recently used blob files of *directory* until at most
    *target* bytes remain. Returns ``(bytes before, bytes after)``, or None
    when another process is checking the same directory."""
    lock_path = os.path.join(directory, LOCK_NAME)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None
        files = cache_files(directory)
        before = total = sum(size for _, size, _ in files)
        if total > target:
            files.sort()
            for _, size, path in files:
                if total <= target:
                    break
                try:
                    # A reader that has the file open keeps reading it.
                    remove_blob_file(path)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    log.warning('could not remove cached blob %s: %s',
                                path, e)
                    continue
                total -= size
                try:
                    os.rmdir(os.path.dirname(path))
                except OSError:
                    pass
            log.info('blob cache %s shrunk from %d to %d bytes',
                     directory, before, total)
        return before, total
    finally:
        os.close(fd)


class CacheSizeChecker:
    """Counts bytes added to one cache directory and starts checks."""

    def __init__(self, directory, limit, check_percent, external):
        self.directory = directory
        self.limit = limit
        self.external = external
        if limit is None:
            self.threshold = None
        else:
            self.threshold = limit * check_percent // 100
            self.target = limit - self.threshold
        self._added = 0
        self._lock = threading.Lock()
        self._running = None

    def added(self, size):
        if self.threshold is None:
            return
        with self._lock:
            self._added += size
            if self._added < self.threshold:
                return
            self._added = 0
            if self._running is not None and self._running.is_alive():
                return
            self._running = threading.Thread(
                target=self.check, name='relstorage blob cache check',
                daemon=True)
            self._running.start()

    def check(self):
        """Shrink the cache now (in this thread, or a child process)."""
        try:
            if self.external:
                done = subprocess.run(
                    python_command(__name__, self.directory, self.limit,
                                   self.target),
                    check=True, stdin=subprocess.DEVNULL,
                    capture_output=True, text=True, env=child_env())
                log.info('%s', done.stdout.strip())
            else:
                shrink(self.directory, self.target)
        except Exception:  # noqa: BLE001 -- never break the application
            log.exception('checking the size of blob cache %s failed',
                          self.directory)

    def wait(self):
        """Wait for a running check to end (tests, close)."""
        running = self._running
        if running is not None:
            running.join()


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print('usage: python -m relstorage.blobs.cachesize DIR LIMIT '
              '[TARGET]', file=sys.stderr)
        return 2
    directory, limit = args[0], int(args[1])
    target = int(args[2]) if len(args) == 3 else limit
    result = shrink(directory, target)
    if result is None:
        print('another process is checking %s' % directory)
    else:
        print('%s: %d bytes before, %d after' % ((directory,) + result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
