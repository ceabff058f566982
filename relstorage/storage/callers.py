"""What ZODB does not tell a storage, read from who called it: the one
module that looks at the call stack.

ZODB calls the same storage methods (poll_invalidations, afterCompletion)
at a transaction's end, when a connection closes and when one reopens,
and tells the storage nothing else of why; and it tells a storage that
provides IMVCCStorage nothing of the DB it serves, which a pack of one
database of a multi-database must know. Looking at the callers is the
only way to tell; everything that looks is here."""
import sys

from ZODB.DB import DB


def _frame(skip):
    """The frame *skip* frames above the function calling this one (0:
    that function's own), or None near the top of a program."""
    try:
        return sys._getframe(skip + 1)
    except ValueError:
        return None


def _zodb_caller(skip):
    """The name of the function *skip* frames above the one asking, if it
    is ZODB's, else None."""
    frame = _frame(skip + 1)
    if frame is None:
        return None
    code = frame.f_code
    return code.co_name if 'ZODB' in code.co_filename else None


def called_by_zodb(*names):
    """Whether the caller of the function asking was called by ZODB's
    functions *names*, innermost first."""
    # Frames above _zodb_caller: 1 this function, 2 the function asking,
    # 3 its caller... (a loop: a generator would add a frame).
    for i, name in enumerate(names):
        if _zodb_caller(2 + i) != name:
            return False
    return True


def zodb_polls_next():
    """Whether the function asking was called by ZODB's
    Connection.afterCompletion for a connection whose transactions are
    implicit: that polls (newTransaction) as soon as the storage's
    afterCompletion returns, with nothing in between."""
    frame = _frame(2)
    if frame is None or _zodb_caller(2) != 'afterCompletion':
        return False
    connection = frame.f_locals.get('self')
    return getattr(connection, 'explicit_transactions', True) is False


def calling_db(storage):
    """The ZODB.DB whose own method called the function asking, when that
    DB's storage is *storage* (``DB.pack`` calling ``storage.pack``),
    else None."""
    # Frames above _frame: 1 this function, 2 the function asking, 3
    # its caller.
    frame = _frame(2)
    caller = frame.f_locals.get('self') if frame is not None else None
    if isinstance(caller, DB) and caller.storage is storage:
        return caller
    return None
