"""What an SQLite error means to the storage, told by SQLite's result
code (``sqlite_errorcode``), never by the wording of its message."""
import sqlite3

from ...exceptions import CommitLockTimeout
from ...exceptions import DatabaseFull

#: Another connection holds the lock this one needs (SQLITE_BUSY: another
#: connection or process; SQLITE_LOCKED: one sharing this connection's
#: cache or a statement of the same connection).
BUSY = 'busy'
#: No room: the disk (or the file system's quota) is full, or the
#: max_page_count pragma was reached.
FULL = 'full'

_KINDS = {
    sqlite3.SQLITE_BUSY: BUSY,
    sqlite3.SQLITE_LOCKED: BUSY,
    sqlite3.SQLITE_FULL: FULL,
}
#: Extended codes that mean more than their primary one: the WAL index
#: (the -shm file) could not be made or grown, which on a full disk is
#: how a first write after opening fails.
_EXTENDED_KINDS = {
    sqlite3.SQLITE_IOERR_SHMSIZE: FULL,
}


def kind(error):
    """``BUSY``, ``FULL`` or None (any other error, or not SQLite's) for
    *error*. Extended result codes (``SQLITE_BUSY_SNAPSHOT``...) count as
    their primary code, the low byte."""
    code = getattr(error, 'sqlite_errorcode', None)
    if not isinstance(error, sqlite3.Error) or code is None:
        return None
    return _EXTENDED_KINDS.get(code) or _KINDS.get(code & 0xff)


def database_full(what, error):
    """The DatabaseFull for the SQLite *error* met writing to *what* (a
    description naming the database)."""
    return DatabaseFull(
        'the %s is full (no space left on its disk, or its max_page_count '
        'pragma reached): %s; nothing of this transaction was written'
        % (what, error))


def writer_timeout(what, seconds):
    """The CommitLockTimeout of a writer that waited *seconds*
    (commit-lock-timeout) for the lock of *what*."""
    return CommitLockTimeout(
        'the %s stayed locked by another writer longer than '
        'commit-lock-timeout (%ss)' % (what, seconds))


def raise_classified(error, what, seconds):
    """Raise what the SQLite *error* met on *what* means to the storage,
    when it means more than itself: the writer_timeout() for another
    writer's lock (*seconds*: commit-lock-timeout), DatabaseFull for no
    room."""
    found = kind(error)
    if found == BUSY:
        raise writer_timeout(what, seconds) from None
    if found == FULL:
        raise database_full(what, error) from None
