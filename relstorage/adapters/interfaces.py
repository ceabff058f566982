"""The contract between ``relstorage.storage`` (which speaks ZODB) and a
database adapter (which speaks SQL).

Oids and tids cross this boundary as Python ints; pickles as ``bytes``.
The storage asks an adapter (IRelStorageAdapter) for sessions and calls
the methods below on them:

- a *load session* (ILoadSession): one consistent snapshot at a time,
  read only;
- a *store session* (IStoreSession): the connection that votes and
  commits;
- for a pack, a *pack session* (IPackSession), which holds the pack lock,
  fills scratch tables and removes in short transactions under the commit
  lock, and the *pack reads* (IPackReads), the snapshot the pre-pack
  reads.

Each session runs its statements on one connection (ISession), which it
names as ``session``. The adapter's components (IMover, ILocker, IPacker,
ISchema, IOIDAllocator, IInspector, IIterator) hold the SQL; code outside
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

    def open_pack_session():
        """Return a new IPackSession (the connection a pack writes and
        holds the pack lock with)."""

    def open_pack_keeper():
        """Return a new IPackKeeper."""

    def open_pack_reads():
        """Return a new IPackReads (the snapshot a pre-pack reads, on the
        read-write server)."""

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

    def table_exists(name):
        """Whether the table *name* exists."""

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

    def transactions(start, stop, newest_first=False, include_packed=True,
                     limit=None):
        """``[(tid, user, description, extension, packed)]`` with *start*
        <= tid <= *stop*, in tid order (or the reverse); without history,
        the tids of current revisions as packed transactions without
        metadata."""

    def records(tid):
        """``[(oid, state, prev_tid)]`` written by transaction *tid*, in
        oid order (prev_tid None without history)."""

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

    def end_snapshot():
        """End the current snapshot now, if one is open."""

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


class IPackReads(ILoadSession):
    """The snapshot a pre-pack reads, on the read-write server."""

    def last_pack_tid():
        """The tid the last pack went to, or None."""

    checks_kept_references = Attribute(
        "Whether the database checks kept references itself when the "
        "pages are read checked (see states_at).")

    def states_at(pack_tid, after_oid, limit, deleted=None, checked=False):
        """``[(oid, state, tid, kept_tid, kept)]``: a page of at most
        *limit* states current at *pack_tid*, with oid > *after_oid*, in
        oid order, each with its tid and the references a pack kept for
        the object (``kept``: 8 bytes per oid, then a digest; see
        relstorage.storage.keptrefs) with the tid of the revision they
        were read from (None, None: none kept); the oids deleted as of
        *pack_tid* are appended to *deleted* (a list), if given. With
        *checked*, where checks_kept_references, a row whose kept
        references the database found were read from that very state
        comes with an empty state (b'') instead of the state, and
        either as it is otherwise or lean: ``(oid, b'', None, None,
        kept)``, no tids (which no other row lacks), and ``kept`` None
        where it holds no oid."""

    def states_after(after_tid):
        """``(oid, state)`` of every revision committed after
        *after_tid*."""

    def count_old_revisions(pack_tid):
        """How many objects hold revisions a pack to *pack_tid* removes
        (0 without history)."""


class IPackKeeper(Interface):
    """The connection a pre-pack keeps the references it read with, for
    later packs (see IPackReads.states_at)."""

    session = Attribute("The ISession it runs on.")

    def keep_references(rows, stale=()):
        """Keep ``[(oid, tid, refs)]``, in place of those kept for the
        oids *stale*, in a short transaction of its own (it waits for
        the database's writer, as a commit does, where there is one)."""

    def close():
        """Close the connection."""


class IPackSession(Interface):
    """The connection a pack writes with. It holds the pack lock for its
    life; it fills the pack's scratch tables in one transaction, and then
    removes in batches, each a transaction of its own under the commit
    lock."""

    BUSY = Attribute("What begin_batch() returns when the lock stays busy.")

    def lock_pack():
        """Take the pack lock for the life of the session; False when
        another pack holds it."""

    def before_pack():
        """Refresh what the query planner knows before the pre-pack's big
        reads (a nightly pack often follows heavy writes)."""

    def begin_scratch():
        """Begin the transaction that fills the scratch tables (taking no
        write lock on the tables commits use), and empty them."""

    def commit():
        """Commit the scratch transaction."""

    def rollback():
        """Roll back the scratch transaction, if one is open."""

    def end_reads():
        """Called once the pre-pack's long read has ended."""

    def save_prepack(pack_tid, checked_tid):
        """Commit the scratch transaction, then keep its garbage for a
        later pack to *pack_tid* that skips the pre-pack (commits up to
        *checked_tid* taken into account), in a transaction of its own."""

    def load_prepack():
        """Restore the garbage a pre-pack kept: ``(pack_tid,
        checked_tid)``, or None when none was kept."""

    def garbage_count():
        """How many objects the scratch tables name as garbage."""

    def find_garbage(pack_tid, gc, deleted=None):
        """Fill the garbage: with *gc*, the objects the graph's roots do
        not reach and those *deleted* as of *pack_tid*; without, only
        deleted ones."""

    def add_references(pairs):
        """Add ``[(oid, referenced oid)]`` to the scratch graph."""

    def add_roots(oids):
        """Add the graph's roots."""

    def mark():
        """Mark what the roots reach, through the scratch graph."""

    def add_garbage(oids):
        """Add *oids* to the garbage."""

    def begin_batch(wait=0):
        """Begin a batch: a transaction holding the commit lock, waiting
        at most *wait* seconds for it. Return the newest tid, or BUSY
        (and no transaction)."""

    def states_after(after_tid):
        """``(oid, state)`` of every revision committed after *after_tid*
        (in the batch, so with the commit lock held)."""

    def still_garbage(oids):
        """Those of *oids* still in the garbage."""

    def spare(oids):
        """Take *oids* out of the garbage."""

    def load_many(oids):
        """``{oid: (state, tid)}`` of the current states of *oids*."""

    def garbage_after(after, limit):
        """At most *limit* garbage oids above *after*, in order."""

    def remove_garbage(oids):
        """Remove the objects *oids*; ``(revisions, bytes)`` removed."""

    def old_revisions_after(pack_tid, after, limit):
        """``[(oid, tid kept)]``: at most *limit* objects above *after*
        whose revisions older than their state at *pack_tid* go."""

    def remove_old_revisions(keep):
        """Remove those revisions; ``(revisions, bytes)`` removed."""

    def finish(pack_tid):
        """In the last batch: forget any kept pre-pack, record the pack
        to *pack_tid*, and remove or mark what the pack leaves behind
        (emptied transactions). Return how many transactions were
        removed."""

    def commit_batch():
        """Commit the batch and release the commit lock."""

    def abort_batch():
        """Roll back a batch whose commit failed (a cluster refused it:
        ClusterConflict) and release the commit lock; the batch may be
        done again."""

    def wrote_outside_commits():
        """Called when the pack is done: replicas are read from only once
        they have replayed it too."""

    def close():
        """Roll back whatever is open, release the pack lock and close
        the connection."""


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


# The components. Each method takes the ISession to run on first.

class IMover(Interface):
    """Object states between Python and the tables, per history mode."""

    last_tid_sql = Attribute("A statement giving the newest tid.")
    poll_sql = Attribute(
        """One statement giving the newest tid (on the row whose oid is
        -1) and each object changed after ``%s`` up to it.""")
    changes_sql = Attribute(
        "``(oid, tid)`` of changes in (``%s``, ``%s``].")
    chunk_length_clause = Attribute("The byte length of a blob chunk.")
    blob_of_sql = Attribute(
        "adapters.blobs.BLOB_OF measuring chunks by chunk_length_clause.")

    def load_current(session, oid):
        """As ILoadSession.load_current."""

    def load_many(session, oids):
        """As ILoadSession.load_many."""

    def current_tids(session, oids):
        """As IReads.current_tids."""

    def load_revision(session, oid, tid):
        """As IReads.load_revision."""

    def load_before(session, oid, tid):
        """As IReads.load_before."""

    def checked(oid, state, tid, size):
        """``(state, size)``, CorruptRecord when *state* is not *size*
        bytes long."""

    def out_of_range(oid, tid):
        """Raise CorruptRecord for a tid no transaction can have."""

    def upload(session, rows):
        """Put ``[(oid, prev_tid, state, blob_id)]`` into temp_store."""

    def split_direct(rows):
        """``(direct, rest)``: the rows copy_into_place() writes, and
        those that go through temp_store."""

    def copy_into_place(session, rows, tid):
        """Write *rows* as revisions of *tid*."""

    def after_copy(tid):
        """Statements that complete copy_into_place() for *tid*."""

    def clear_temp(session):
        """Empty temp_store."""

    def write_in_place(session, rows, tid):
        """Write *rows* as current revisions of *tid* at once."""

    def move_into_place(tid, own_tids=False):
        """Statements that make temp_store's rows current as of *tid*
        (*own_tids*: each row keeps the tid in its prev_tid column)."""

    def add_transaction(tid, meta, packed=False, empty=False):
        """Statements that record transaction *tid*."""

    def committed_probe(tid, oid):
        """``(stmt, params)`` whose value tells whether *tid* committed,
        or None when that cannot be asked."""


class ILocker(Interface):
    """Row, commit, pack and schema locks."""

    BUSY = Attribute("What try_commit_lock returns when the lock is busy.")

    def lock_rows(session, store_oids, read_oids):
        """As IStoreSession.lock_and_read_current, in the open
        transaction."""

    def hold_commit_lock(session, last_tid_sql):
        """Take the commit lock for the rest of the transaction (up to
        commit-lock-timeout: CommitLockTimeout); return the value of
        *last_tid_sql*."""

    def try_commit_lock(session, last_tid_sql, wait=0):
        """Like hold_commit_lock, waiting at most *wait* seconds: BUSY
        when another transaction holds the lock until then."""

    def begin_with_commit_lock(session, last_tid_sql, wait=0):
        """Begin a transaction holding the commit lock: the value of
        *last_tid_sql*, or BUSY (and no transaction)."""

    def release_commit_lock():
        """Statements that release the commit lock after COMMIT."""

    def end_commit():
        """Statements that end a transaction holding the commit lock
        (COMMIT, and what goes with it: release_commit_lock's after it)."""

    def try_pack_lock(session):
        """Take the pack lock for the life of *session*; False when
        another pack holds it."""

    def release_pack_lock(session):
        """Release the pack lock before *session* closes."""

    def hold_schema_lock(session):
        """Wait for the lock that creators of the schema take in turn."""

    def release_schema_lock(session):
        """Release what hold_schema_lock took."""

    def after_rollback(session):
        """Release what a rollback does not (session-level locks)."""


class IPacker(Interface):
    """The pack's statements; see IPackSession and IPackReads, which run
    them on their sessions."""

    checks_kept_references = Attribute(
        "As IPackReads.checks_kept_references.")

    def states_at(session, pack_tid, after_oid, limit, deleted=None,
                  checked=False):
        """As IPackReads.states_at."""

    def states_after(session, after_tid):
        """As IPackReads.states_after."""

    def last_pack_tid(session):
        """As IPackReads.last_pack_tid."""

    def count_old_revisions(session, pack_tid):
        """As IPackReads.count_old_revisions."""

    def start_graph(session):
        """Create or empty the scratch tables."""

    def add_roots(session, oids):
        """As IPackSession.add_roots."""

    def add_references(session, pairs):
        """As IPackSession.add_references."""

    def keep_references(session, rows, stale=()):
        """As IPackKeeper.keep_references, in the transaction open on
        *session*."""

    def forget_kept(session, oids):
        """Remove the references kept for *oids*."""

    def add_garbage(session, oids):
        """As IPackSession.add_garbage."""

    def mark(session):
        """As IPackSession.mark."""

    def find_garbage(session, pack_tid, gc, deleted=None):
        """As IPackSession.find_garbage."""

    def garbage_count(session):
        """As IPackSession.garbage_count."""

    def garbage_after(session, after, limit):
        """As IPackSession.garbage_after."""

    def still_garbage(session, oids):
        """As IPackSession.still_garbage."""

    def spare(session, oids):
        """As IPackSession.spare."""

    def save_prepack(session, pack_tid, checked_tid):
        """Keep the garbage for a later pack."""

    def load_prepack(session):
        """As IPackSession.load_prepack."""

    def forget_prepack(session):
        """Drop a kept pre-pack."""

    def record_pack(session, pack_tid):
        """Record that a pack went to *pack_tid*."""

    def last_pack(session):
        """What record_pack() recorded last, or None."""

    def forget_pack(session):
        """Forget every recorded pack."""

    def remove_garbage(session, oids):
        """As IPackSession.remove_garbage."""

    def old_revisions_after(session, pack_tid, after, limit):
        """As IPackSession.old_revisions_after."""

    def remove_old_revisions(session, keep):
        """As IPackSession.remove_old_revisions."""

    def finish(session, pack_tid):
        """What the last batch does; the transactions removed."""


class ISchema(Interface):
    """Creating, verifying and dropping the relstorage tables."""

    tables = Attribute("The tables of the schema, in the order to empty.")
    cache_key_name = Attribute("The relstorage_meta row of the cache key.")

    def read_meta(session):
        """The relstorage_meta rows as a dict, or None without schema."""

    def verify(meta):
        """Raise SchemaError / HistoryModeMismatch when *meta* does not
        describe this version and mode."""

    def create(session, complete=True):
        """Create the tables."""

    def read_cache_key(session):
        """The cache key's text, or None."""

    def store_cache_key(session, value):
        """Store the cache key's text."""

    def ensure_pack_garbage(session):
        """Create the table a kept pre-pack lives in, if missing."""

    def ensure_state_refs(session):
        """Create the table of the references packs keep, if missing."""

    def relstorage4_mode(session):
        """The history mode of a RelStorage 4 database there, or None."""

    def relstorage4_session():
        """An ISession on the RelStorage 4 database."""

    def drop(session):
        """Drop every relstorage table."""


class IOIDAllocator(Interface):
    """Fresh oids, in blocks."""

    def new_blocks(session, blocks):
        """``[(first, count)]``: *blocks* blocks of fresh oids."""

    def raise_to(max_oid):
        """Statements that make every later oid greater than
        *max_oid*."""

    def reset(session):
        """Start again from the first oid (the tables are empty)."""

    def reset_after_drop():
        """Forget what is known of the allocator once its tables went."""


class IInspector(Interface):
    """What zodbinfo, zodbcheck and the metrics server read."""

    objects_table = Attribute("The table with one row per object.")

    def server_version(session):
        """The server's name and version (``PostgreSQL 15.19``)."""

    def count(session, exact, table, count_sql):
        """``(count, estimated)``: the server's estimate of *table*'s
        rows, unless *exact* or there is none, else *count_sql*'s."""

    def figures(session, exact=False):
        """A dict of figures about the database; ``estimated`` lists the
        names of those that are the server's estimates."""

    def headers(session, after_oid, limit, length):
        """As ILoadSession.object_headers."""

    def records(session, after_oid, limit):
        """As ILoadSession.object_rows."""

    def blob_chunks(session, blob_ids):
        """As ILoadSession.blob_chunk_counts."""


class IIterator(Interface):
    """History, iteration and undo-log queries; each method takes the
    session to run on first (see IReads for what they return)."""

    object_count_sql = Attribute("Counts the objects that exist.")

    def iter_current_records(session, start_oid, limit):
        """As IReads.iter_current_records."""

    def transactions(session, start, stop, newest_first=False,
                     include_packed=True, limit=None):
        """As IReads.transactions."""

    def records(session, tid):
        """As IReads.records."""

    def object_history(session, oid, limit):
        """As IReads.object_history."""

    def object_count(session):
        """As IReads.object_count."""

    def size_in_bytes(session):
        """As IReads.size_in_bytes."""


class IHistoryPreservingIterator(IIterator):
    """What undo needs besides."""

    def transaction_exists(session, tid):
        """As IReads.transaction_exists."""

    def states_before(session, tid):
        """As IReads.states_before."""
