"""What a database package implements: one interface per role of an
adapter's components, each method taking the ISession to run on first.
The storage never calls these (see interfaces); the adapter's sessions
do. ``relstorage/tests/test_interfaces.py`` verifies each adapter's
components, both history modes, against them."""
from zope.interface import Attribute
from zope.interface import Interface


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
    """The pack's statements; see IPackWriter and IPackReads, which run
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
        """As IPackWriter.add_roots."""

    def add_references(session, pairs):
        """As IPackWriter.add_references."""

    def keep_references(session, rows, stale=()):
        """As IPackKeeper.keep_references, in the transaction open on
        *session*."""

    def forget_kept(session, oids):
        """Remove the references kept for *oids*."""

    def add_garbage(session, oids):
        """As IPackWriter.add_garbage."""

    def mark(session):
        """As IPackWriter.mark."""

    def find_garbage(session, pack_tid, gc, deleted=None):
        """As IPackWriter.find_garbage."""

    def garbage_count(session):
        """As IPackWriter.garbage_count."""

    def garbage_after(session, after, limit):
        """As IPackWriter.garbage_after."""

    def still_garbage(session, oids):
        """As IPackWriter.still_garbage."""

    def spare(session, oids):
        """As IPackWriter.spare."""

    def save_prepack(session, pack_tid, checked_tid):
        """Keep the garbage for a later pack."""

    def load_prepack(session):
        """As IPackWriter.load_prepack."""

    def forget_prepack(session):
        """Drop a kept pre-pack."""

    def record_pack(session, pack_tid):
        """Record that a pack went to *pack_tid*."""

    def last_pack(session):
        """What record_pack() recorded last, or None."""

    def forget_pack(session):
        """Forget every recorded pack."""

    def remove_garbage(session, oids):
        """As IPackWriter.remove_garbage."""

    def old_revisions_after(session, pack_tid, after, limit):
        """As IPackWriter.old_revisions_after."""

    def remove_old_revisions(session, keep):
        """As IPackWriter.remove_old_revisions."""

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

    def stream_current_records(session, start_oid):
        """As IReads.stream_current_records."""

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


class IConnector(Interface):
    """How a database's sessions begin: its connection parameters, the
    driver's connect within the bounds of network-timeout (a password
    command run for each), and what each new session sets for as long as
    it lasts. Its package's session.py."""

    def open(for_store, server=None):
        """A new ISession, set up for loads and polls or (*for_store*)
        for storing: on *server* (a replicas.Server), or on the server
        the parameters name. DatabaseUnavailable, naming the database
        and never a secret, when it cannot be opened."""

    def describe(server=None):
        """The database (on *server*), for messages: never a secret."""

    def location():
        """As IRelStorageAdapter.location."""


class IReplication(Interface):
    """What replica-conf and ro-replica-conf need of a database that has
    replicas (see adapters.replicas): its package's replication.py."""

    def server_params(line):
        """The connection parameters of one line of a server file."""

    def is_read_only_server(session):
        """Whether the server of *session* refuses writes (a standby)."""

    def write_position(session):
        """Where the read-write server of *session* has written up to
        (a WAL position, a GTID set), for replayed()."""

    def replayed(session, position):
        """Whether the replica of *session* has replayed up to
        *position*."""
