"""The contract between ``relstorage.storage`` (which speaks ZODB) and a
database adapter (which speaks SQL).

Oids and tids cross this boundary as Python ints; pickles as ``bytes``.
The storage asks an adapter (IRelStorageAdapter) for sessions and calls
the methods below on them:

- a *load session* (ILoadSession): one consistent snapshot at a time,
  read only;
- a *store session* (IStoreSession): the connection that votes and
  commits;
- for a pack, a *pack writer* (IPackWriter), which holds the pack lock,
  fills scratch tables and removes in short transactions under the commit
  lock, and the *pack reads* (IPackReads), the snapshot the pre-pack
  reads (both declared in pack_interfaces).

Each session runs its statements on one connection (ISession), which it
names as ``session``. The adapter's components (IMover, ILocker, IPacker,
ISchema, IOIDAllocator, IInspector, IIterator: what a database package
implements, in components) hold the SQL; code outside
``relstorage.adapters`` reaches them only through the members declared
here. ``relstorage/tests/test_interfaces.py`` verifies every adapter,
both history modes, against these declarations.

Capability flags follow one scheme: ``supports_*`` for what a database can
do, ``requires_*`` for what it needs of the storage; all default to False
in the base adapter.
"""
from zope.interface import Attribute
from zope.interface import Interface


class IRelStorageAdapter(Interface):
    """Everything the storage and the tools need from one database."""

    keep_history = Attribute("True when every revision is kept.")
    options = Attribute("The relstorage.options.Options in force.")

    database_name = Attribute(
        "The database's name in messages ('PostgreSQL', 'MySQL', "
        "'Oracle', 'SQLite').")
    upgrade_class = Attribute(
        """The relstorage.adapters.upgrade.Upgrade that converts a
        RelStorage 4 database of this kind in place, or None where there
        is none.""")
    uri_keys = Attribute(
        """The query keys of this database's zodburi URI that belong to
        its adapter section (the others are options or zodburi's own).""")

    def section_from_uri(uri):
        """``{key: value}`` of the adapter section a zodburi URI names
        (*uri*: a relstorage.uriresolver.URI); a class method."""

    supports_commit_announcements = Attribute(
        """Whether load sessions are told of commits without a round trip
        (ILoadSession.commits_announced): poll-interval then delays
        nobody's view of a commit (SQLite, PostgreSQL).""")
    supports_prepare_at_vote = Attribute(
        """Whether the commit transaction is the only writer from vote
        on: the tid may then be chosen at vote, and everything of the
        commit but the COMMIT done there (IStoreSession.prepare; SQLite).
        """)
    requires_snapshot_end_at_vote = Attribute(
        """Whether a reader's snapshot keeps the database from reclaiming
        what commits wrote (SQLite's WAL restarts only when no reader
        holds an older snapshot): vote then ends the instance's snapshot
        before it waits to become the writer.""")
    oids_from_load_session = Attribute(
        """Whether new oids are taken on the instance's load session
        (ILoadSession.new_oid_blocks) rather than its store session: an
        instance in a transaction then needs one connection until vote,
        where a pooler lends each a server session only while its
        transaction lasts.""")
    supports_replicas = Attribute(
        "Whether replica-conf and ro-replica-conf apply.")

    pack_pause_between_batches = Attribute(
        """Seconds a pack waits between batches before it takes the
        commit lock again, so that committers waiting for it go first (0
        where the server queues lock waiters).""")
    reconnects = Attribute(
        "How many lost connections this adapter's sessions reopened.")
    traffic = Attribute(
        """What this adapter's sessions sent the database (an
        adapters.traffic.Traffic: round trips and statements by kind of
        work), open sessions and closed.""")
    max_known_oid = Attribute(
        """The highest oid this process knows to be allocated or stored;
        storing above it means raising the allocator first.""")
    replicas = Attribute(
        "The replicas of replica-conf / ro-replica-conf, or None.")
    polls_may_lag = Attribute(
        """Whether a poll may answer older than this process's own last
        commit: its loads come from read-only replicas (ro-replica-conf),
        which replay commits after they are made. Polls still never go
        back from one to the next.""")
    cooperative = Attribute(
        """Whether this adapter's database waits let other greenlets
        run: asked for by a gevent driver name (``gevent psycopg2``) or
        turned on by gevent's monkey-patching (see
        adapters.cooperative).""")
    types = Attribute("The column types of this database's schema.")
    store_begin_sql = Attribute(
        "The statement that begins a commit transaction.")

    mover = Attribute("The IMover: loads and commits' statements.")
    locker = Attribute("The ILocker: row, commit, pack and schema locks.")
    packer = Attribute("The IPacker: the pack's statements.")
    schema = Attribute("The ISchema: creating and verifying the tables.")
    oids = Attribute("The IOIDAllocator.")
    inspector = Attribute("The IInspector: what zodbinfo reports.")
    iterator = Attribute(
        "The IIterator: history, iteration and undo-log queries.")

    def prepare():
        """Create the schema if allowed and missing, then verify it.

        Raises SchemaError / HistoryModeMismatch for a foreign or
        other-mode schema, DatabaseUnavailable when it cannot connect.
        """

    def connect(for_store):
        """A new ISession on the read-write server (or, without
        *for_store*, where the replicas say reads go)."""

    def open_load_session(primary=False):
        """Return a new ILoadSession; with *primary*, never on a
        read-only replica."""

    def open_store_session():
        """Return a new IStoreSession; ReadOnlyError when the storage is
        read-only."""

    def open_pack_writer():
        """Return a new IPackWriter (the connection a pack writes and
        holds the pack lock with)."""

    def open_pack_keeper():
        """Return a new IPackKeeper."""

    def open_pack_reads():
        """Return a new IPackReads (the snapshot a pre-pack reads, on the
        read-write server)."""

    def open_vote_watch():
        """Return a new adapters.votes.VoteWatch."""

    def open_relstorage4_reader():
        """Return an IRelStorage4Reader over the RelStorage 4 database
        this adapter's database holds; UpgradeRefused when it holds
        none."""

    def new_oid_blocks(store_session, blocks=1):
        """Reserve *blocks* blocks of fresh oids in one round trip, on
        *store_session*; return ``[(first, count)]``."""

    def note_oid(oid):
        """Raise max_known_oid to *oid*, if it is higher."""

    def zap_all():
        """Remove every object and transaction (tests, zodbconvert --clear)."""

    def describe(server=None):
        """A short text naming the database (on *server*, or the
        read-write server in use), without any password."""

    def location():
        """A hashable key naming the database this adapter opens: two
        adapters with equal keys open one database."""

    def cache_key():
        """The database's secret for signing ``cache-local-dir`` files
        (bytes), created on first use where the storage may write.

        Only a process that can read the database can sign a file its
        storage will trust. Raises CacheKeyUnavailable when the key can be
        neither read nor created.
        """

    def close():
        """Release what the adapter itself holds (not its sessions)."""


class ISession(Interface):
    """One DB-API connection. Statements use ``%s`` placeholders; values
    travel as parameters."""

    in_transaction = Attribute(
        "Whether a transaction of this session is open.")
    holds_commit_lock = Attribute(
        "Whether this session's transaction holds the commit lock.")

    def begin(sql=None):
        """Begin a transaction (with *sql*, else the usual BEGIN)."""

    def commit():
        """Commit the open transaction."""

    def rollback_quietly():
        """Roll back whatever is open; False when that failed (the
        connection is then unusable). Never raises."""

    def restart(begin_sql):
        """End the open transaction, if any, and begin another with
        *begin_sql*."""

    def end_read(now=True):
        """End a read-only transaction (*now*: at once, else when the
        next statement is sent, where the driver can defer it)."""

    def execute(stmt, params=()):
        """Run one statement."""

    def execute_script(statements):
        """Run ``[(stmt, params)]`` in order, in as few round trips as
        the driver allows."""

    def fetchone(stmt, params=()):
        """The first row of *stmt*'s result, or None."""

    def fetchall(stmt, params=()):
        """Every row of *stmt*'s result, as a list."""

    def scalar(stmt, params=()):
        """The first column of the first row, or None."""

    def stream(stmt, params=()):
        """*stmt*'s rows read as they are asked for, not all with the
        statement: an object whose ``fetch(size)`` gives the next rows
        (up to *size*; [] at the end) and whose ``close()`` ends it; or
        None where the connection cannot stream. Until the stream ends,
        nothing else may run on the session."""

    def table_exists(name):
        """Whether the table *name* exists."""

    def is_disconnect(error):
        """Whether the driver *error* means the connection is gone."""

    def is_permission_error(error):
        """Whether the driver *error* means the user lacks a privilege."""

    def is_full_error(error):
        """Whether the driver *error* means the database has no room
        left."""

    def missing_create_privilege(error):
        """What the user lacks to create the schema (the driver *error*
        refused it), and how to give it."""

    def close():
        """Close the connection; never raises."""


class IReads(Interface):
    """The reads a load session, and a store session between its
    commits, answer. Each runs in the session's snapshot, beginning one
    where the session has none (and reopening a lost connection then)."""

    adapter = Attribute("The IRelStorageAdapter that opened the session.")
    session = Attribute("The ISession the session runs on.")

    def load_current(oid):
        """``(state, tid)`` in the snapshot (which may be newer than the
        last poll), or ``(None, None)`` when the object does not exist
        (or was deleted: state None, tid set)."""

    def load_revision(oid, tid):
        """``(state, found)``: the state written by *tid* for *oid*, and
        whether that revision exists."""

    def load_before(oid, tid):
        """``(state, start_tid, end_tid)`` of the revision current just
        before *tid*, or None."""

    def current_tids(oids):
        """``{oid: tid}`` of those of *oids* that exist."""

    def blob_of(oid, tid):
        """What the database holds of the blob of revision *(oid, tid)*:
        None when the snapshot does not see that revision, else
        ``(blob_id, chunks, first chunk_num, last chunk_num, bytes)``
        (blob_id None when the revision holds no blob), read in one round
        trip; the blob cache checks a cached file's size against it."""

    def blob_chunk(blob_id, num):
        """The bytes of chunk *num* of *blob_id*, or None past the last."""

    def iter_current_records(start_oid, limit):
        """``((oids, tids, states), resume)``: the current objects among the
        next *limit* oids from *start_oid* on, in oid order (CorruptRecord
        for a damaged state), and the oid to go on from (None at the end)."""

    def stream_current_records(start_oid):
        """The current objects from *start_oid* on, in oid order, as one
        statement read a batch at a time: an object whose ``batch(size)``
        gives ``(oids, tids, states)`` of the current objects among the
        next *size* rows (None after the last) and whose ``close()`` ends
        it; until it ends, the session is the stream's own (close the
        session to abandon it half-way). None where the session cannot
        stream: then iter_current_records reads pages."""

    def transactions(start, stop, newest_first=False, include_packed=True,
                     limit=None):
        """``[(tid, user, description, extension, packed)]`` with *start*
        <= tid <= *stop*, in tid order (or the reverse); without history,
        the tids of current revisions as packed transactions without
        metadata."""

    def records(tid):
        """``(oids, states)`` written by transaction *tid*, in columns, in
        oid order (a deletion's state None, with history; without, the
        objects deleted are left out)."""

    def object_history(oid, limit):
        """``[(tid, size, user, description, extension)]`` of *oid*'s
        revisions, newest first, at most *limit*."""

    def transaction_exists(tid):
        """History-preserving only: None when there is no transaction
        *tid*, else whether it is packed."""

    def states_before(tid):
        """History-preserving only: ``[(oid, state, prev_tid)]`` for
        every object *tid* wrote, the state it held just before *tid*
        (None when *tid* created it)."""

    def object_count():
        """How many objects exist."""

    def size_in_bytes():
        """The bytes of object state kept, all revisions included."""

    def database_size():
        """The bytes the database takes on disk, as its server tells them
        without reading the tables (PostgreSQL: pg_database_size; MySQL:
        information_schema's data and index lengths of the schema's
        tables; SQLite: page_count times page_size); where the server
        cannot tell, size_in_bytes() (a scan)."""

    def close():
        """Close the connection; never raises."""


class ILoadSession(IReads):
    """A read-only connection that sees one snapshot at a time, and none
    between transactions: the first read after poll() begins one."""

    def restart():
        """End the current snapshot, begin a new one, return its tid
        (the newest committed tid it sees, 0 for an empty database)."""

    def poll():
        """End the current snapshot, if any, and return the newest
        committed tid, without beginning another."""

    def snapshot_tid():
        """The newest tid the current snapshot sees (beginning one)."""

    def poll_changes(after_tid):
        """``(newest_tid, [(oid, tid)])``: the newest committed tid and
        every object changed after *after_tid* up to it, read together."""

    def end_snapshot(now=True):
        """End the current snapshot, if one is open: now, or (*now*
        false, where the session defers verbs) with the next statement,
        which must follow at once. With *now*, an end deferred so before
        is sent too."""

    def commits_announced():
        """Whether the database announced a commit since the last call,
        told without a round trip (see supports_commit_announcements);
        None where it cannot tell."""

    def new_oid_blocks(blocks):
        """``[(first, count)]``: *blocks* blocks of fresh oids, taken in
        the snapshot (see IRelStorageAdapter.oids_from_load_session)."""

    def changes(after_tid, upto_tid):
        """``[(oid, tid)]`` naming every object changed in (after, upto],
        with at least its newest tid there; correct outside a snapshot
        too."""

    def load_many(oids):
        """``{oid: (state, tid)}`` for those of *oids* that exist."""

    # What zodbinfo, zodbcheck and the metrics server read.

    def figures(exact=False):
        """A dict of figures about the database (see IInspector.figures);
        counts are the server's estimates unless *exact*."""

    def estimated_object_count():
        """How many objects exist, as the server estimates it where it
        can (cheaply), else counted."""

    def object_headers(after_oid, limit, length):
        """``[(oid, size, the first *length* bytes of the state)]`` of at
        most *limit* current objects above *after_oid*, in oid order
        (state None when deleted)."""

    def object_rows(after_oid, limit):
        """``[(oid, tid, state, size, blob_id)]`` of at most *limit*
        current objects above *after_oid*, in oid order, states as
        stored (unchecked)."""

    def blob_chunk_counts(blob_ids):
        """``{blob_id: (chunks, last chunk_num)}`` of those of
        *blob_ids* that have chunks."""


class IStoreSession(IReads):
    """The connection that takes locks at vote and commits at finish.
    Between commits its reads see the newest committed data."""

    previous_tid = Attribute(
        "The newest tid before the last commit (set when it chose its tid).")
    committing = Attribute(
        "Whether a commit transaction of this session is open (from "
        "lock_and_read_current to the end of commit() or rollback()); its "
        "reads then see the commit's own rows.")

    def lock_and_read_current(store_oids, read_oids):
        """Begin the commit transaction; lock rows in oid order (exclusive
        for *store_oids*, shared for *read_oids*); return
        ``{oid: current_tid}`` for those that exist."""

    def lock_commit_and_read_current(oids):
        """Begin the commit transaction holding the commit lock, its tid
        chosen now; return ``{oid: current_tid}`` of *oids*, locking no
        row. For a transaction that creates the root object, the one
        object processes may create at once: under the commit lock none
        of them is midway through creating it, and a process updating
        it, which holds its row while it waits for the commit lock, is
        not waited for. upload() then writes the rows in place."""

    claims_other_databases = Attribute(
        """Whether claim_other_databases() claims anything (False where
        the commit transaction is claim enough, SQLite's, or where the
        database cannot tell): only then need a vote look for references
        to other databases.""")

    def claim_other_databases():
        """Claim, until the commit transaction ends, that it refers to
        objects of other databases (see adapters.votes)."""

    def new_oid_blocks(blocks):
        """``[(first, count)]``: *blocks* blocks of fresh oids (see
        IRelStorageAdapter.new_oid_blocks, which also notes them)."""

    def upload_blob(path, chunk_size):
        """Send the file *path* in chunks of *chunk_size* bytes; return
        its blob_id (still invisible to others)."""

    def drop_replaced_blobs(oids):
        """History-free: delete the blobs the commit replaces of
        *oids*."""

    def upload(rows, tid_free=False):
        """Send ``[(oid, prev_tid, state, blob_id)]`` to the server (still
        invisible to others). *tid_free*: no tid is imposed, so a database
        whose commit transaction is already the only writer may choose
        the tid now and write the rows in place."""

    def prepare(meta, restore_tid=None, packed=False, empty=False,
                max_oid=None, before_commit=None, first_row_tid=None):
        """Only where ``supports_prepare_at_vote``: at vote, do everything
        of commit() but the COMMIT (choose the tid, make the rows current,
        record the transaction, and take the room the COMMIT needs), so
        that commit() only makes it visible. Arguments as for commit().
        Return the tid; raises (DatabaseFull...) with nothing committed."""

    def commit(meta, restore_tid=None, packed=False, empty=False,
               max_oid=None, before_commit=None, first_row_tid=None,
               probe_oid=None):
        """Take the commit lock, choose the tid (> every earlier one; the
        given *restore_tid* when restoring), make the uploaded rows
        current, record the transaction (*meta*: ``(user, description,
        extension)``; *packed*, *empty* as recorded), commit and release
        the lock. Return the tid.

        *max_oid*: raise the oid allocator past it in the same
        transaction. *before_commit(tid)*: called with the tid chosen and
        the lock held, before the rows are written. *first_row_tid*
        (history-free copies only): each row keeps the tid uploaded in its
        prev_tid column, the oldest being *first_row_tid*. *probe_oid*: an
        object the commit writes, so that a connection lost during the
        COMMIT can ask whether it happened (CommitOutcomeUnknown when that
        cannot be told). After prepare(), only the COMMIT is left."""

    def rollback():
        """Abandon the commit transaction and every lock it holds; False
        when the connection could not roll back."""


class IRelStorage4Reader(Interface):
    """A RelStorage 4 database, read as it is in one snapshot (the source
    of zodbconvert's upgrade copy)."""

    mode = Attribute("'history-preserving' or 'history-free'.")

    def last_tid():
        """The newest tid, 0 for an empty database."""

    def transactions(start, stop, limit):
        """``[(tid, user, description, extension, packed)]`` in order."""

    def records(tid):
        """``[(oid, state)]`` written by *tid*, sizes checked."""

    def blob_chunks(oid, tid):
        """The chunk numbers of the blob of revision *(oid, tid)*."""

    def blob_pieces(oid, tid, num):
        """The bytes of chunk *num* of that blob, piece by piece."""

    def close():
        """End the snapshot and close the connection."""
