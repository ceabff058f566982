"""The database-independent part of an adapter.

An adapter builds load sessions (read-only, one snapshot at a time) and
store sessions (vote and commit) out of the shared mover, locker and
schema, with the pieces a database overrides.
"""
import contextlib
import logging
import secrets

from zope.interface import implementer

from ..exceptions import CacheKeyUnavailable
from ..exceptions import NoSchema
from ..exceptions import PermissionDenied
from ..exceptions import ReadOnlyError
from ..exceptions import SchemaError
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
from .packsession import PackKeeper
from .packsession import PackReads
from .packsession import PackSession
from .relstorage4 import RelStorage4Reader
from . import replicas
from .schema import Schema
from .session import first_line as _first_line
from .schema import Types
from .sql import EMPTY_TABLE
from .votes import VoteClaims
from .votes import VoteWatch

log = logging.getLogger(__name__)

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
    #: The IPackSession class (a cluster's may run a batch again).
    pack_session_class = PackSession
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
        self._prepared = False
        if self.replicas is None:
            self.replicas = replicas.Replicas.configure(self, options)
        #: The highest oid this process knows to be allocated or stored;
        #: storing above it means raising the allocator first.
        self.max_known_oid = 0

    # Connections: the database module supplies open_connection() and
    # describe(); with replicas, server_params() and is_read_only_server().

    #: Whether replica-conf and ro-replica-conf apply (see replicas).
    supports_replicas = False
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
        raise NotImplementedError

    def describe(self, server=None):
        """The database, for messages: on *server*, or on the read-write
        server in use."""
        raise NotImplementedError

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

    def server_params(self, line):
        """The connection parameters of one line of a server file."""
        raise NotImplementedError

    def is_read_only_server(self, session):
        """Whether the server of *session* refuses writes (a standby)."""
        return False

    def write_position(self, session):
        """Where the read-write server of *session* has written up to
        (a WAL position, a GTID set), for replayed()."""
        raise NotImplementedError

    def replayed(self, session, position):
        """Whether the replica of *session* has replayed up to
        *position*."""
        raise NotImplementedError

    def wrote_outside_commits(self, session):
        """Called on the read-write *session* after it changed the
        database without a new tid (a pack, emptying it): replicas are
        read from only once they have replayed that too."""
        if self.replicas is not None:
            self.replicas.mark_position(session)

    def location(self):
        """A hashable key naming the database this adapter opens: two
        adapters with equal keys open one database (see config)."""
        raise NotImplementedError

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

    # Schema

    def prepare(self):
        if self._prepared:
            return
        if not self._schema_made():
            self._prepare_taking_turns()
        self._prepared = True

    def _schema_made(self):
        """Whether the schema is there, complete, and of this release and
        mode, looked at without the schema lock (by which processes
        opening a new database take turns: many opening a made one at
        once, processes or greenlets, would queue on it for nothing).
        False when it is missing or being made (see
        _prepare_taking_turns); an error when it cannot be used."""
        try:
            with self._schema_transaction(False) as session:
                meta = self.schema.read_meta(session)
        except SchemaError:
            return False  # made as we looked, or to be told of in turn
        if not meta or not ({'schema_version', 'upgrade_step'} & set(meta)):
            return False
        self.schema.verify(meta)
        return True

    def _prepare_taking_turns(self):
        may_create = (self.options.create_schema
                      and not self.options.read_only)
        with self._schema_transaction(may_create) as session:
            meta = self.schema.read_meta(session)
            if meta is None:
                if not may_create:
                    raise NoSchema(
                        '%s holds no relstorage schema, and %s'
                        % (self.describe(),
                           'the storage is read-only' if self.options.read_only
                           else 'create-schema is false'))
                log.info('creating the relstorage schema in %s',
                         self.describe())
                try:
                    self.schema.create(session)
                except PermissionDenied as e:
                    session.rollback_quietly()
                    lacking = session.missing_create_privilege(
                        e.__cause__ or e)
                    raise PermissionDenied(
                        'the database user may not create the relstorage '
                        'schema in %s: %s' % (self.describe(), lacking)
                    ) from e
            else:
                self.schema.verify(meta)
            session.commit()
            if meta is None:
                self.wrote_outside_commits(session)

    @contextlib.contextmanager
    def _schema_transaction(self, may_create):
        """A transaction on the read-write server in which, with
        *may_create*, the schema (or a relstorage_meta row) may be
        created: processes that start together on a new database take
        turns, so that one creates and the others find it made. The
        caller commits; anything else is rolled back."""
        session = self.connect(for_store=True)
        try:
            session.begin(self.schema_begin_sql if may_create else None)
            if may_create:
                # Taken before the first look (PostgreSQL would remember,
                # for the rest of the transaction, that the table was
                # missing).
                self.locker.hold_schema_lock(session)
            yield session
        finally:
            session.rollback_quietly()
            if may_create:
                try:
                    self.locker.release_schema_lock(session)
                except Exception:  # noqa: BLE001 -- a lost connection
                    pass           # has released it already
            session.close()

    def cache_key(self):
        """The persistent cache's key (see IRelStorageAdapter): read from
        relstorage_meta, and created there by the first process that
        needs it (taking turns, as for the schema)."""
        where = self.describe()
        try:
            value = self._read_cache_key()
            if value is None and not self.options.read_only:
                try:
                    with self._schema_transaction(True) as session:
                        value = self.schema.read_cache_key(session)
                        if value is None:
                            value = secrets.token_hex(32)
                            self.schema.store_cache_key(session, value)
                            session.commit()
                except Exception:
                    # Another process may have made it meanwhile (where
                    # no schema lock makes creators take turns).
                    value = self._read_cache_key()
                    if value is None:
                        raise
        except PermissionDenied as e:
            raise CacheKeyUnavailable(
                'the database user may not create the cache key in %s (%s); '
                'a storage whose user may write creates it once for all'
                % (where, _first_line(e.__cause__ or e))) from e
        except Exception as e:  # noqa: BLE001 -- reported as the reason
            raise CacheKeyUnavailable(
                'could not read or create the cache key in %s: %s: %s'
                % (where, type(e).__name__, _first_line(e))) from e
        if value is None:
            raise CacheKeyUnavailable(
                '%s holds no cache key yet, and the storage is read-only '
                '(a storage that may write creates it)' % where)
        try:
            key = bytes.fromhex(value)
        except ValueError:
            key = b''
        if len(key) < 16:
            raise CacheKeyUnavailable(
                'the cache key in %s is malformed (relstorage_meta row %r)'
                % (where, self.schema.cache_key_name))
        return key

    def _read_cache_key(self):
        with self._schema_transaction(False) as session:
            return self.schema.read_cache_key(session)

    def _in_transaction(self, func):
        if self.options.read_only:
            raise ReadOnlyError()
        session = self.connect(for_store=True)
        try:
            session.begin()
            func(session)
            session.commit()
            self.wrote_outside_commits(session)
        finally:
            session.rollback_quietly()
            session.close()

    def zap_all(self):
        replicas.forget(self.location())
        self._in_transaction(self.empty_tables)

    def drop_all(self):
        """Remove the relstorage schema entirely (both modes' tables)."""
        replicas.forget(self.location())
        self._in_transaction(self.schema.drop)
        self._prepared = False
        self.oids.reset_after_drop()

    def empty_tables(self, session):
        for table in self.schema.tables:
            session.execute(EMPTY_TABLE.format(table=table))
        if not self.keep_history:
            session.execute(
                'INSERT INTO last_transaction (id, tid) VALUES (0, 0)')
        self.oids.reset(session)
        self.max_known_oid = 0
        self.packer.forget_prepack(session)
        self.packer.forget_pack(session)
        if session.table_exists('state_refs'):
            session.execute(EMPTY_TABLE.format(table='state_refs'))

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

    def open_pack_session(self):
        """The IPackSession a pack writes (and holds the pack lock)
        with."""
        return self.pack_session_class(self)

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

    def announce_commit(self):
        """Statements, run with each commit, that tell listening load
        sessions a commit happened (see commits_announced)."""
        return []

    def commits_announced(self, session):
        """Whether a commit was announced to the load *session* since the
        last call; None: this database announces nothing."""
        return None

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
