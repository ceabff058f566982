"""Table definitions shared by every database, per history mode.

Each adapter supplies its column types (``Types``); the statements here name
them with ``{bigint}``, ``{blob}``, ``{bool}`` and ``{text}`` placeholders,
which are filled once when the adapter is built -- never with user data.
"""
import contextlib
import logging
import secrets

from zope.interface import implementer

from ..exceptions import CacheKeyUnavailable
from ..exceptions import HistoryModeMismatch
from ..exceptions import NoSchema
from ..exceptions import PermissionDenied
from ..exceptions import ReadOnlyError
from ..exceptions import RelStorage4Database
from ..exceptions import SchemaError
from .session import first_line
from .sql import DROP_TABLE
from .sql import EMPTY_TABLE
from .sql import SQL
from .components import ISchema

log = logging.getLogger(__name__)

#: Bumped whenever a table changes shape; stored in ``relstorage_meta``.
SCHEMA_VERSION = 2


class Types:
    bigint = 'BIGINT'
    blob = 'BYTEA'
    bool = 'BOOLEAN'
    text = 'TEXT'
    true = 'TRUE'
    false = 'FALSE'
    # Appended to CREATE TABLE (MySQL uses it for the engine).
    table_suffix = ''
    #: The constraint on byte columns that are never NULL; empty where the
    #: database stores zero bytes as NULL (Oracle), so that an empty
    #: username or an empty blob still fits.
    bytes_not_null = ' NOT NULL'


META_TABLE = SQL("""
CREATE TABLE relstorage_meta (
    name    VARCHAR(64) NOT NULL PRIMARY KEY,
    value   VARCHAR(255) NOT NULL
){table_suffix}
""")

#: Blob contents, in pieces of blob-chunk-size bytes. A revision refers to
#: its blob by ``object_state.blob_id``, a random key chosen when the blob
#: is uploaded at vote; so making a revision current never copies blob data.
BLOB_TABLE = SQL("""
CREATE TABLE blob_chunk (
    blob_id     {bigint} NOT NULL,
    chunk_num   {bigint} NOT NULL,
    chunk       {blob}{bytes_not_null},
    PRIMARY KEY (blob_id, chunk_num)
){table_suffix}
""")

#: The garbage a pre-pack found (``zodbpack --prepack``), for a later
#: ``--use-prepack-state`` pack; its pack tid and snapshot are kept in
#: relstorage_meta. Created when first needed (Schema.ensure_pack_garbage).
PACK_GARBAGE_TABLE = SQL("""
CREATE TABLE pack_garbage (
    zoid        {bigint} NOT NULL PRIMARY KEY
){table_suffix}
""")

#: Each object's references, as read from one of its revisions by a
#: pre-pack (the one current at that pack's time), so that later packs
#: need not unpickle the objects that have not changed since: ``refs`` is
#: the oids referred to, each as 8 bytes big-endian, in increasing order,
#: then a CRC-32 of the state and those oids (see storage.pack.keptrefs).
#: Valid for the revision ``tid`` only: a newer revision is read again.
#: Created with the other tables, and in a database made before it by its
#: first pack (Schema.ensure_state_refs).
STATE_REFS_TABLE = SQL("""
CREATE TABLE state_refs (
    zoid        {bigint} NOT NULL PRIMARY KEY,
    tid         {bigint} NOT NULL,
    refs        {blob}
){table_suffix}
""")

HISTORY_PRESERVING_TABLES = (
    SQL("""
    CREATE TABLE transactions (
        tid         {bigint} NOT NULL PRIMARY KEY,
        packed      {bool} DEFAULT {false} NOT NULL,
        is_empty    {bool} DEFAULT {false} NOT NULL,
        username    {blob}{bytes_not_null},
        description {blob}{bytes_not_null},
        extension   {blob}
    ){table_suffix}
    """),
    SQL("""
    CREATE TABLE object_state (
        zoid        {bigint} NOT NULL,
        tid         {bigint} NOT NULL,
        prev_tid    {bigint} NOT NULL,
        state_size  {bigint} NOT NULL,
        state       {blob},
        blob_id     {bigint},
        PRIMARY KEY (zoid, tid)
    ){table_suffix}
    """),
    SQL("CREATE INDEX object_state_tid ON object_state (tid)"),
    SQL("""
    CREATE TABLE current_object (
        zoid        {bigint} NOT NULL PRIMARY KEY,
        tid         {bigint} NOT NULL
    ){table_suffix}
    """),
    SQL("CREATE INDEX current_object_tid ON current_object (tid)"),
)

HISTORY_FREE_TABLES = (
    SQL("""
    CREATE TABLE object_state (
        zoid        {bigint} NOT NULL PRIMARY KEY,
        tid         {bigint} NOT NULL,
        state_size  {bigint} NOT NULL,
        state       {blob},
        blob_id     {bigint}
    ){table_suffix}
    """),
    SQL("CREATE INDEX object_state_tid ON object_state (tid)"),
    SQL("""
    CREATE TABLE last_transaction (
        id          {bigint} NOT NULL PRIMARY KEY,
        tid         {bigint} NOT NULL
    ){table_suffix}
    """),
    SQL("INSERT INTO last_transaction (id, tid) VALUES (0, 0)"),
)


def typed(ddl, types):
    """The statement *ddl* with each of its slots filled by the
    attribute of *types* of that name."""
    return ddl.format(**{slot: getattr(types, slot) for slot in ddl.slots})


def relstorage4_mode(table_exists):
    """``'history-preserving'`` or ``'history-free'`` when the database
    whose tables *table_exists(name)* tells holds RelStorage 4's tables
    (its commit_row_lock table marks them; only its history-preserving
    schema has ``transaction``), else None."""
    if not (table_exists('commit_row_lock') and table_exists('object_state')):
        return None
    if table_exists('transaction'):
        return 'history-preserving'
    return 'history-free'


#: Every table either mode may have created.
ALL_TABLES = ('relstorage_meta', 'transactions', 'object_state',
              'current_object', 'last_transaction', 'blob_chunk',
              'pack_garbage', 'state_refs')


@implementer(ISchema)
class Schema:
    """Creates, verifies, empties and drops the tables of one mode."""

    #: Statements an adapter adds after the tables (sequences, ...).
    extra_ddl = ()
    #: Statements that undo extra_ddl.
    drop_extra_ddl = ()

    def __init__(self, adapter, types):
        self.adapter = adapter
        self.keep_history = adapter.keep_history
        tables = (HISTORY_PRESERVING_TABLES if self.keep_history
                  else HISTORY_FREE_TABLES)
        self.ddl = [typed(stmt, types) for stmt in
                    (META_TABLE, BLOB_TABLE) + tables + (STATE_REFS_TABLE,)]
        self.pack_garbage_ddl = typed(PACK_GARBAGE_TABLE, types)
        self.state_refs_ddl = typed(STATE_REFS_TABLE, types)
        self.tables = (('transactions', 'object_state', 'current_object',
                        'blob_chunk')
                       if self.keep_history
                       else ('object_state', 'last_transaction', 'blob_chunk'))

    #: RelStorage 4's transaction table, quoted (a keyword in SQL).
    rs4_transaction_table = '"transaction"'
    #: A piece (1-based offset, length) of one of its blob chunks.
    rs4_piece_query = ('SELECT SUBSTR(chunk, %s, %s) FROM blob_chunk WHERE '
                     'zoid = %s AND tid = %s AND chunk_num = %s')

    def relstorage4_mode(self, session):
        """The mode of a RelStorage 4 database where this one is, or None
        (see relstorage4_mode)."""
        return relstorage4_mode(session.table_exists)

    def relstorage4_session(self):
        """A session that reads RelStorage 4's tables (and creates
        nothing)."""
        return self.adapter.connect(for_store=False)

    def read_meta(self, session):
        """``{name: value}`` from relstorage_meta, or None when the
        database holds no relstorage schema at all."""
        if not session.table_exists('relstorage_meta'):
            old = self.relstorage4_mode(session)
            if old is not None:
                raise RelStorage4Database(
                    '%s holds a RelStorage 4 database (%s); convert it in '
                    'place with `relstorage-upgrade CONFIG` (the same '
                    'config file), which keeps the old tables until '
                    '`relstorage-upgrade --drop-old CONFIG`'
                    % (self.adapter.describe(), old))
            if any(session.table_exists(t) for t in (
                    'object_state', 'current_object', 'transactions')):
                raise SchemaError(
                    '%s holds relstorage-like tables but no relstorage_meta '
                    'table: it was created by another tool or another '
                    'version; refusing to use it'
                    % self.adapter.describe())
            return None
        rows = session.fetchall('SELECT name, value FROM relstorage_meta')
        return dict(rows)

    def verify(self, meta):
        where = self.adapter.describe()
        if 'upgrade_step' in meta:
            raise RelStorage4Database(
                'the upgrade of %s from RelStorage 4 is not finished (it '
                'stopped before step %r): run `relstorage-upgrade CONFIG` '
                'again to finish it' % (where, meta['upgrade_step']))
        version = meta.get('schema_version')
        if version != str(SCHEMA_VERSION):
            raise SchemaError(
                'unknown schema version %r in %s (this release uses %d)'
                % (version, where, SCHEMA_VERSION))
        kept = meta.get('keep_history')
        wanted = 'true' if self.keep_history else 'false'
        if kept != wanted:
            raise HistoryModeMismatch(
                '%s was created with keep-history %s, but the configuration '
                'says keep-history %s; use a database made for that mode '
                '(or convert with zodbconvert)'
                % (where, kept, wanted))

    def create(self, session, complete=True):
        """Create the tables; with *complete* false they are not marked
        usable (an upgrade marks them when it has filled them)."""
        for stmt in self.ddl:
            session.execute(stmt)
        for stmt in self.extra_ddl:
            session.execute(stmt)
        if complete:
            self.mark_complete(session)

    def mark_complete(self, session):
        session.executemany(
            'INSERT INTO relstorage_meta (name, value) VALUES (%s, %s)',
            [('schema_version', str(SCHEMA_VERSION)),
             ('keep_history', 'true' if self.keep_history else 'false')])

    #: The relstorage_meta row holding the persistent cache's key (hex):
    #: a row, not a table, so that databases made before it need no
    #: schema change.
    cache_key_name = 'cache_key'

    def read_cache_key(self, session):
        """The persistent cache's key as stored (hex text), or None."""
        return session.scalar(
            'SELECT value FROM relstorage_meta WHERE name = %s',
            (self.cache_key_name,))

    def store_cache_key(self, session, value):
        session.execute(
            'INSERT INTO relstorage_meta (name, value) VALUES (%s, %s)',
            (self.cache_key_name, value))

    def ensure_pack_garbage(self, session):
        """Create the pack_garbage table unless it exists (outside any
        transaction: on some databases DDL commits)."""
        if not session.table_exists('pack_garbage'):
            session.execute(self.pack_garbage_ddl)

    def ensure_state_refs(self, session):
        """Create the state_refs table unless it exists (outside any
        transaction, as ensure_pack_garbage)."""
        if not session.table_exists('state_refs'):
            session.execute(self.state_refs_ddl)

    def empty(self, session):
        """Empty the tables of the mode (and state_refs)."""
        for table in self.tables:
            session.execute(EMPTY_TABLE.format(table=table))
        if not self.keep_history:
            session.execute(
                'INSERT INTO last_transaction (id, tid) VALUES (0, 0)')
        if session.table_exists('state_refs'):
            session.execute(EMPTY_TABLE.format(table='state_refs'))

    def drop_table(self, session, table):
        session.execute(DROP_TABLE.format(table=table))

    def drop(self, session):
        """Remove every relstorage table of either mode."""
        for table in ALL_TABLES:
            self.drop_table(session, table)
        for stmt in self.drop_extra_ddl:
            session.execute(stmt)


class SchemaSetup:
    """What makes a database ready for the storage and starts it again:
    prepare() (the schema made once, processes that open a new database
    together taking turns), cache_key(), and emptying or dropping it all
    (zap_all, drop_all), each in a transaction of its own on a session
    from *connect* (``connect(for_store)``). The adapter assembles it
    from its schema, locker, oid allocator and packer."""

    def __init__(self, schema, locker, oids, packer, connect, describe,
                 options, begin_sql, wrote_outside_commits):
        self.schema = schema
        self.locker = locker
        self.oids = oids
        self.packer = packer
        self.connect = connect
        self.describe = describe
        self.options = options
        #: Starts the transaction that reads, and may create, the schema
        #: (None: the session's usual BEGIN).
        self.begin_sql = begin_sql
        #: Called on a session that changed the database without a new
        #: tid (see IRelStorageAdapter.wrote_outside_commits).
        self.wrote_outside_commits = wrote_outside_commits
        self.prepared = False

    def prepare(self):
        if self.prepared:
            return
        if not self._schema_made():
            self._prepare_taking_turns()
        self.prepared = True

    def _schema_made(self):
        """Whether the schema is there, complete, and of this release and
        mode, looked at without the schema lock (by which processes
        opening a new database take turns: many opening a made one at
        once, processes or greenlets, would queue on it for nothing).
        False when it is missing or being made (see
        _prepare_taking_turns); an error when it cannot be used."""
        try:
            with self._transaction(False) as session:
                meta = self.schema.read_meta(session)
        except SchemaError:
            return False  # made as we looked, or to be told of in turn
        if not meta or not ({'schema_version', 'upgrade_step'} & set(meta)):
            return False
        self.schema.verify(meta)
        return True

    def _prepare_taking_turns(self):
        options = self.options
        may_create = options.create_schema and not options.read_only
        with self._transaction(may_create) as session:
            meta = self.schema.read_meta(session)
            if meta is None:
                if not may_create:
                    raise NoSchema(
                        '%s holds no relstorage schema, and %s'
                        % (self.describe(),
                           'the storage is read-only' if options.read_only
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
    def _transaction(self, may_create):
        """A transaction on the read-write server in which, with
        *may_create*, the schema (or a relstorage_meta row) may be
        created: processes that start together on a new database take
        turns, so that one creates and the others find it made. The
        caller commits; anything else is rolled back."""
        session = self.connect(for_store=True)
        try:
            session.begin(self.begin_sql if may_create else None)
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
            value = self.read_cache_key()
            if value is None and not self.options.read_only:
                try:
                    with self._transaction(True) as session:
                        value = self.schema.read_cache_key(session)
                        if value is None:
                            value = secrets.token_hex(32)
                            self.schema.store_cache_key(session, value)
                            session.commit()
                except Exception:
                    # Another process may have made it meanwhile (where
                    # no schema lock makes creators take turns).
                    value = self.read_cache_key()
                    if value is None:
                        raise
        except PermissionDenied as e:
            raise CacheKeyUnavailable(
                'the database user may not create the cache key in %s (%s); '
                'a storage whose user may write creates it once for all'
                % (where, first_line(e.__cause__ or e))) from e
        except Exception as e:  # noqa: BLE001 -- reported as the reason
            raise CacheKeyUnavailable(
                'could not read or create the cache key in %s: %s: %s'
                % (where, type(e).__name__, first_line(e))) from e
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

    def read_cache_key(self):
        """The cache key as stored (hex text), or None; creates nothing."""
        with self._transaction(False) as session:
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
        """Empty the database: no object, no transaction, no oid used."""
        self._in_transaction(self._empty)

    def _empty(self, session):
        self.schema.empty(session)
        self.oids.reset(session)
        self.packer.forget_prepack(session)
        self.packer.forget_pack(session)

    def drop_all(self):
        """Remove the relstorage schema entirely (both modes' tables)."""
        self._in_transaction(self.schema.drop)
        self.prepared = False
        self.oids.reset_after_drop()
