"""The database-independent part of an adapter.

An adapter builds load sessions (read-only, one snapshot at a time) and
store sessions (vote and commit) out of the shared mover, locker and
schema, with the pieces a database overrides.
"""

import functools

from zope.interface import implementer

from ..exceptions import ReadOnlyError
from .dbiter import HistoryFreeIterator
from .dbiter import HistoryPreservingIterator
from .inspect import HistoryFreeInspector
from .inspect import HistoryPreservingInspector
from .inspect import ServerStatistics
from .interfaces import IRelStorageAdapter
from .loadstore import LoadSession  # noqa: F401 -- also imported from here
from .loadstore import StoreSession  # noqa: F401
from .loadstore import tid_for_now  # noqa: F401
from .mover import HistoryFreeMover
from .mover import HistoryPreservingMover
from .packer import HistoryFreePacker
from .packer import HistoryPreservingPacker
from .packwork import PackKeeper
from .packwork import PackReads
from .packwork import PackWriter
from .relstorage4 import RelStorage4Reader
from . import replicas
from .schema import Schema
from .schema import SchemaSetup
from .schema import Types
from .traffic import Traffic
from .votes import VoteClaims
from .votes import VoteWatch


@implementer(IRelStorageAdapter)
class Adapter:
    """Base of every database adapter."""

    types = Types
    schema_class = Schema
    hp_mover_class = HistoryPreservingMover
    hf_mover_class = HistoryFreeMover
    hp_packer_class = HistoryPreservingPacker
    hf_packer_class = HistoryFreePacker
    locker_class = None
    #: The claims of commits voted and not finished (adapters.votes).
    vote_claims_class = VoteClaims
    #: The IPackWriter class (a cluster's may run a batch again).
    pack_writer_class = PackWriter
    oid_allocator_class = None
    #: What the server says of itself, for zodbinfo.
    statistics_class = ServerStatistics
    #: The Upgrade (see adapters.upgrade) that converts a RelStorage 4
    #: database in place; None where there is none yet.
    upgrade_class = None
    #: Whether database waits let other greenlets run (gevent).
    cooperative = False
    #: The database's name in messages ("the SQLite has no replicas").
    database_name = None
    #: The query keys of this database's zodburi URI that belong to its
    #: adapter section (the others are options, or zodburi's own).
    uri_keys = ('driver',)
    #: Starts the snapshot transaction of a load session.
    load_begin_sql = 'BEGIN'
    #: Starts the commit transaction of a store session.
    store_begin_sql = 'BEGIN'
    #: How the pack's removing session begins the transaction in which
    #: it fills its scratch tables (taking no write lock on the tables
    #: commits use: SQLite's store_begin_sql would).
    scratch_begin_sql = 'BEGIN'
    #: Starts the transaction that reads, and may create, the schema
    #: (None: the session's usual BEGIN).
    schema_begin_sql = None
    #: Whether temp_store loses its rows when the transaction ends.
    temp_store_emptied_by_commit = True
    #: Where it does not: a statement that empties it outside any
    #: transaction, run after each commit or rollback that left rows in
    #: it (None: the next upload deletes them inside its transaction).
    empty_temp_store_sql = None
    #: Whether the commit transaction is the only writer from vote on (the
    #: tid may then be chosen at vote, and everything but the COMMIT done
    #: there: see StoreSession.prepare).
    supports_prepare_at_vote = False
    #: Whether a reader's snapshot keeps the database from reclaiming
    #: what commits wrote (SQLite's WAL starts again from its beginning
    #: only when no reader holds an older snapshot): vote then ends the
    #: instance's snapshot before it waits to become the writer.
    requires_snapshot_end_at_vote = False
    #: Whether new oids come through the load session (see the interface).
    oids_from_load_session = False
    #: Whether load sessions are told of commits (commits_announced), so
    #: that poll-interval delays nobody's view of a commit.
    supports_commit_announcements = False
    #: The most parameters one statement may carry.
    max_params = 30000
    #: Seconds a pack waits between batches before taking the commit lock
    #: again, so that committers already waiting for it get it first.
    #: Servers queue lock waiters, so no pause is needed there.
    pack_pause_between_batches = 0.0
    reconnects = 0  # lost connections reopened (at_boundary)

    @functools.cached_property
    def traffic(self):
        """What this adapter's sessions sent (a traffic.Traffic), made
        when the first one opens."""
        return Traffic()

    def __init__(self, options):
        self.options = options
        self.keep_history = options.keep_history
        self.mover = (self.hp_mover_class if self.keep_history
                      else self.hf_mover_class)(self)
        self.locker = self.locker_class(self, self.mover)
        self.vote_claims = self.vote_claims_class(self)
        self.iterator = (HistoryPreservingIterator if self.keep_history
                         else HistoryFreeIterator)(self)
        self.packer = (self.hp_packer_class if self.keep_history
                       else self.hf_packer_class)(self)
        self.schema = self.schema_class(self, self.types)
        self.inspector = (HistoryPreservingInspector if self.keep_history
                          else HistoryFreeInspector)(self)
        self.oids = self.oid_allocator_class(self)
        self.setup = SchemaSetup(
            self.schema, self.locker, self.oids, self.packer, self.connect,
            self.describe, options, self.schema_begin_sql,
            self.wrote_outside_commits)
        self.prepare = self.setup.prepare
        self.cache_key = self.setup.cache_key
        if self.replicas is None:
            self.replicas = replicas.Replicas.configure(self, options)
        #: The highest oid this process knows to be allocated or stored;
        #: storing above it means raising the allocator first.
        self.max_known_oid = 0

    # Connections: the database package's connector (an IConnector, in
    # its session.py) opens them; with replicas, on the servers of its
    # replication (its replication.py).

    #: The IConnector, made by the database's adapter before anything
    #: else (the replicas' configuration asks for its location()).
    connector = None
    #: Whether replica-conf and ro-replica-conf apply (see replicas).
    supports_replicas = False
    #: What replicas need of the database (IReplication), made by the
    #: database's adapter where it supports them.
    replication = None
    #: The Replicas of replica-conf / ro-replica-conf, or None.
    replicas = None

    def connect(self, for_store):
        """A session on the database (the read-write server)."""
        if self.replicas is None:
            return self.open_connection(for_store)
        return self.replicas.connect(for_store)

    def open_connection(self, for_store, server=None):
        """A new session on *server* (a replicas.Server), or on the
        server the adapter's own parameters name."""
        return self.connector.open(for_store, server)

    def describe(self, server=None):
        """The database, for messages: on *server*, or on the read-write
        server in use."""
        return self.connector.describe(server or self.current_server())

    @classmethod
    def section_from_uri(cls, uri):
        """``{key: value}`` of the adapter section that the zodburi URI
        *uri* (a uriresolver.URI: host, port, user, password, path,
        netloc) names, the query's uri_keys aside."""
        raise NotImplementedError

    def current_server(self):
        return None if self.replicas is None else self.replicas.current()

    @property
    def polls_may_lag(self):
        return self.replicas is not None and self.replicas.ro is not None

    def wrote_outside_commits(self, session):
        """Called on the read-write *session* after it changed the
        database without a new tid (a pack, emptying it): replicas are
        read from only once they have replayed that too."""
        if self.replicas is not None:
            self.replicas.mark_position(session)

    def location(self):
        """A hashable key naming the database this adapter opens: two
        adapters with equal keys open one database (see config)."""
        return self.connector.location()

    def prepare_store_session(self, session):
        """Per-connection setup of a store session (temp tables...)."""

    def prepare_pack_session(self, session):
        """Per-connection setup of the session a pack removes with."""

    def after_pack_reads(self, session):
        """Called on the removing session once the pre-pack's long read
        has ended, and after every batch."""

    def before_pack(self, session):
        """Refresh what the query planner knows before the pre-pack's
        big reads (a nightly pack often follows heavy writes)."""

    # Schema: see schema.SchemaSetup (prepare and cache_key are its).

    def zap_all(self):
        replicas.forget(self.location())
        self.setup.zap_all()
        self.max_known_oid = 0

    def drop_all(self):
        """Remove the relstorage schema entirely (both modes' tables)."""
        replicas.forget(self.location())
        self.setup.drop_all()

    # Sessions

    def open_load_session(self, primary=False):
        """A load session; with *primary* (a pack's reads), never on a
        read-only replica."""
        if self.replicas is not None and not primary:
            return replicas.ReplicaLoadSession(self)
        return LoadSession(self)

    def open_store_session(self):
        if self.options.read_only:
            raise ReadOnlyError()
        if self.replicas is not None:
            return replicas.ReplicaStoreSession(self)
        return StoreSession(self)

    def open_pack_writer(self):
        """The IPackWriter a pack writes (and holds the pack lock)
        with."""
        return self.pack_writer_class(self)

    def open_pack_keeper(self):
        """The IPackKeeper a pre-pack keeps references with."""
        return PackKeeper(self)

    def open_vote_watch(self):
        """A VoteWatch of this database (see adapters.votes)."""
        return VoteWatch(self)

    def open_pack_reads(self):
        """The IPackReads a pre-pack reads its snapshot with (on the
        read-write server)."""
        return PackReads(self)

    def open_relstorage4_reader(self):
        """A reader of the RelStorage 4 database this adapter's
        database holds (see IRelStorage4Reader)."""
        return RelStorage4Reader(self)

    def new_oid_blocks(self, store_session, blocks=1):
        """``[(first, count)]``: *blocks* blocks of fresh oids."""
        ranges = store_session.new_oid_blocks(blocks)
        self.note_oid(max(first + count - 1 for first, count in ranges))
        return ranges

    def committed(self, rows, tid):
        """Called after each commit of a store session, with the
        ``(oid, prev_tid, state, blob_id)`` rows it wrote and its tid."""
        if self.replicas is not None:
            self.replicas.saw(tid)

    def reserve_commit(self, session):
        """Called at vote, in the store *session*, when the commit is
        prepared (only where ``supports_prepare_at_vote``): take whatever
        room its COMMIT will need; raise DatabaseFull when there is
        none."""

    def note_oid(self, oid):
        if oid > self.max_known_oid:
            self.max_known_oid = oid

    def close(self):
        """Release resources held by the adapter itself (not sessions)."""
        self.traffic.retire()
