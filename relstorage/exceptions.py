"""Every error relstorage raises on purpose, in one place.

Each class says what went wrong in words a site operator can act on; none of
them carries a driver traceback as its only explanation.
"""
from transaction.interfaces import TransientError
from ZODB.POSException import ConflictError
from ZODB.POSException import ReadConflictError
from ZODB.POSException import ReadOnlyError  # noqa: F401 re-exported
from ZODB.POSException import StorageError
from ZODB.POSException import StorageTransactionError  # noqa: F401


class RelStorageError(StorageError):
    """Base class of relstorage's own errors."""


class ConfigurationError(RelStorageError, ValueError):
    """An option has a wrong name or value; the message names the option."""


class NotSupportedYet(ConfigurationError):
    """An accepted option was set to a value this release cannot honour."""

    def __init__(self, option, detail=''):
        self.option = option
        msg = 'not supported yet: %s' % option
        if detail:
            msg += ' (%s)' % detail
        super().__init__(msg)


class DatabaseUnavailable(RelStorageError):
    """The database server could not be reached or refused the login."""


class DatabaseMissing(DatabaseUnavailable):
    """A storage that may not create its database (read-only) found none
    where it should be (an SQLite data directory or file)."""


class DatabaseDisconnected(DatabaseUnavailable, TransientError):
    """The connection to the database was lost in the middle of a
    transaction that had not committed; retrying it is safe. Between
    transactions a lost connection is reopened without an error."""


class SchemaError(RelStorageError):
    """The database holds no relstorage schema, another version of it, or
    a schema made for the other history mode."""


class NoSchema(SchemaError):
    """The database holds no relstorage schema, and the storage may not
    create one (read-only, or create-schema false)."""


class RelStorage4Database(SchemaError):
    """The database holds RelStorage 4's tables (or an unfinished upgrade
    from them): ``relstorage-upgrade`` converts it."""


class HistoryModeMismatch(SchemaError):
    """The database was created with the other ``keep-history`` setting."""


class CommitLockTimeout(RelStorageError, TransientError):
    """The commit lock could not be had within commit-lock-timeout."""


class OidOutOfRange(RelStorageError, ValueError):
    """An oid above 2**63 - 1 was to be stored: database columns are signed
    64-bit integers. (ZODB allocates oids from 1 upwards; such an oid comes
    from a copy of another storage or from code choosing its own.)"""


class InvalidPackTime(RelStorageError, ValueError):
    """pack() was given a time that no transaction id can name: not a
    finite number of seconds since the epoch, or outside the years a tid
    holds (1900 to 5908)."""


class UnableToLockRows(RelStorageError, ConflictError):
    """Rows to change (or read-current rows) stayed locked by another
    transaction past commit-lock-timeout, or locking them deadlocked.
    A ConflictError, so ZODB's retry machinery tries again."""


class ClusterConflict(RelStorageError, ConflictError):
    """A multi-master cluster (MariaDB Galera) refused this transaction:
    another node committed a conflicting one first (certification failed
    at COMMIT, or the node aborted the transaction to apply the other's).
    Nothing of it was committed. A ConflictError, so ZODB's retry
    machinery tries again."""


class CorruptRecord(RelStorageError):
    """A stored row cannot be what it claims to be."""


class PackAlreadyRunning(RelStorageError):
    """Only one pack may run per database at a time."""


class PackLockLost(RelStorageError):
    """A pack whose pack lock is a lease (behind a transaction pooler, on
    a Galera cluster) was stopped past it, and another pack took the lock: this one stops
    before its next batch, removing nothing more, and the other one
    finishes the job."""


class PackedFurtherAlready(RelStorageError):
    """A pack to a time before an earlier pack's: the older states it
    would keep are gone already, and there is nothing to pack."""


class CommitOutcomeUnknown(RelStorageError):
    """The connection was lost while the commit was being sent, and the
    database could not be asked afterwards whether it happened. Not a
    TransientError: retrying could apply the transaction twice."""


class StaleDatabase(RelStorageError, ReadConflictError):
    """The database's newest transaction is older than one this process
    has already seen of it: the transactions after it were lost (a
    failover to a standby that had not received them, or a restore from
    a backup). Raised by the poll of each connection that had seen them,
    after every cache of them was dropped; a retry reads what the
    database has now."""


class UpgradeRefused(SchemaError):
    """The upgrade cannot start (the database is in use, or holds no
    RelStorage 4 tables of the configured mode)."""


class CopyError(RelStorageError):
    """A copy cannot start or continue (what is wrong is named)."""


class UsageError(RelStorageError):
    """A console script was given bad arguments or a configuration it
    cannot use (the message names what is wrong); scripts exit with
    status 2."""


class DatabaseFull(RelStorageError):
    """The database has no room for the transaction (disk full, or a
    configured size limit reached); nothing of it was written."""


class PermissionDenied(RelStorageError):
    """The database user lacks a privilege the storage needs (typically:
    a read-only user, without ``read-only true``; or, creating the schema,
    one that may not create tables there: the message names the privilege
    where the database tells it)."""


class CacheKeyUnavailable(RelStorageError):
    """The key that signs ``cache-local-dir`` files could not be read from
    the database, nor created there (a read-only user or server, or
    ``read-only true`` on a database that has none yet); the storage then
    runs without the persistent cache."""


class CacheFileUnusable(RelStorageError):
    """A ``cache-local-dir`` directory or file, or a file of the blob
    cache, that is refused (not the process user's own, writable by
    others, not a regular file, of the wrong size, damaged, or not signed
    with the database's key); the message says why. The storage logs it
    and goes on without that file (a blob is downloaded again)."""
