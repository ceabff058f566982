"""The contract between ``relstorage.storage`` (which speaks ZODB) and a
database adapter (which speaks SQL).

Oids and tids cross this boundary as Python ints; pickles as ``bytes``.
The storage never sees a cursor: it asks an adapter for a *load session*
(one consistent snapshot, read only) and a *store session* (the connection
that votes and commits), and calls the methods below on them.
"""
from zope.interface import Attribute
from zope.interface import Interface


class IRelStorageAdapter(Interface):
    """Everything the storage needs from one database."""

    keep_history = Attribute("True when every revision is kept.")
    options = Attribute("The relstorage.options.Options in force.")

    def prepare():
        """Create the schema if allowed and missing, then verify it.

        Raises SchemaError / HistoryModeMismatch for a foreign or
        other-mode schema, DatabaseUnavailable when it cannot connect.
        """

    def open_load_session():
        """Return a new ILoadSession."""

    def open_store_session():
        """Return a new IStoreSession."""

    def new_oid_blocks(store_session, blocks=1):
        """Reserve *blocks* blocks of fresh oids in one round trip; return
        ``[(first, count)]``."""

    def zap_all():
        """Remove every object and transaction (tests, zodbconvert --clear)."""

    def describe():
        """A short text naming the database, without any password."""

    def cache_key():
        """The database's secret for signing ``cache-local-dir`` files
        (bytes), created on first use where the storage may write.

        Only a process that can read the database can sign a file its
        storage will trust. Raises CacheKeyUnavailable when the key can be
        neither read nor created.
        """


class ILoadSession(Interface):
    """A read-only connection that sees one snapshot at a time, and none
    between transactions: the first read after poll() begins one."""

    def restart():
        """End the current snapshot, begin a new one, return its tid
        (the newest committed tid it sees, 0 for an empty database)."""

    def poll():
        """End the current snapshot, if any, and return the newest
        committed tid, without beginning another."""

    def poll_changes(after_tid):
        """``(newest_tid, [(oid, tid)])``: the newest committed tid and
        every object changed after *after_tid* up to it, read together."""

    def end_snapshot():
        """End the current snapshot now, if one is open."""

    def commits_announced():
        """Whether the database announced a commit since the last call,
        told without a round trip (PostgreSQL's LISTEN/NOTIFY, with a
        poll-interval); None where it cannot tell."""

    def changes(after_tid, upto_tid):
        """``[(oid, tid)]`` naming every object changed in (after, upto],
        with at least its newest tid there."""

    def load_current(oid):
        """``(state, tid)`` in the snapshot (which may be newer than the
        last poll), or ``(None, None)`` when the object does not exist
        (or was deleted: state None, tid set)."""

    def load_many(oids):
        """``{oid: (state, tid)}`` for those of *oids* that exist."""

    def load_revision(oid, tid):
        """The state written by *tid* for *oid*, or None."""

    def load_before(oid, tid):
        """``(state, start_tid, end_tid)`` of the revision current just
        before *tid*, or None."""

    def blob_of(oid, tid):
        """What the database holds of the blob of revision *(oid, tid)*:
        None when the snapshot does not see that revision, else
        ``(blob_id, chunks, first chunk_num, last chunk_num, bytes)``
        (blob_id None when the revision holds no blob), read in one round
        trip; the blob cache checks a cached file's size against it."""

    def blob_chunk(blob_id, num):
        """The bytes of chunk *num* of *blob_id*, or None past the last."""

    def close():
        """Close the connection; never raises."""


class IStoreSession(Interface):
    """The connection that takes locks at vote and commits at finish."""

    def lock_and_read_current(store_oids, read_oids):
        """Begin the commit transaction; lock rows in oid order (exclusive
        for *store_oids*, shared for *read_oids*); return
        ``{oid: current_tid}`` for those that exist."""

    def upload(rows, tid_free=False):
        """Send ``[(oid, prev_tid, state, blob_id)]`` to the server (still
        invisible to others). *tid_free*: no tid is imposed, so a database
        whose commit transaction is already the only writer may choose
        the tid now and write the rows in place."""

    def prepare(meta, restore_tid=None, packed=False, empty=False,
                max_oid=None, before_commit=None, first_row_tid=None):
        """Only where the commit transaction is the only writer from vote
        on: at vote, do everything of commit() but the COMMIT (and take
        the room the COMMIT needs), so that commit() only makes it
        visible. Return the tid."""

    def commit(tid_hint, meta, restore_tid=None):
        """Take the commit lock, choose the tid (> every earlier one; the
        given *restore_tid* when restoring), make the uploaded rows current,
        commit and release the lock. Return the tid."""

    def rollback():
        """Abandon the commit transaction and every lock it holds."""

    def close():
        """Close the connection; never raises."""
