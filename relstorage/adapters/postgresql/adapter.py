"""What PostgreSQL does differently: psycopg2 or psycopg connections,
advisory locks, a sequence for oids, bulk upload with a binary COPY."""
import logging
import re
import struct

from ZODB.POSException import ConflictError
from ZODB.utils import p64

from ...exceptions import ConfigurationError
from ...exceptions import DatabaseUnavailable
from ..oidallocator import OID_BLOCK
from ..adapter import Adapter
from ..locker import Locker
from ..mover import HistoryFreeMover
from ..mover import Mover
from ..mover import HistoryPreservingMover
from ..packer import GARBAGE_RANGE
from ..packer import PAGE_JOIN
from ..packer import HistoryFreePacker
from ..packer import HistoryPreservingPacker
from ..packer import Packer
from ..packer import removed_rows
from ..oidallocator import SequenceOIDAllocator
from ..schema import Schema
from .inspect import PostgreSQLStatistics
from ..session import Session
from ..sql import SQL
from ..sql import Identifier
from ..sql import numbered
from ..sql import script
from ..sql import without_parameters
from ..keepalive import Keepalive
from .dsn import describe_dsn
from .dsn import make_dsn
from .dsn import RELSTORAGE4_KEYWORDS
from .dsn import TLS_KEYWORDS
from ..replicas import split_host_port
from .dsn import dsn_location
from .dsn import scrub_dsn
from ..credentials import command_argv
from ..credentials import run_password_command
from ..redact import scrub
from .drivers import select_driver
from .dsn import parse_dsn
from .pooler import pooler_mode
from .pooler import without_sessions
from .upgrade import PostgreSQLUpgrade
from .votes import PostgreSQLVoteClaims
from . import pooler
from . import errors as pg_errors

log = logging.getLogger(__name__)

TRUNCATE = SQL('TRUNCATE {tables}')
ANALYZE = SQL('ANALYZE {tables}')
#: Those of a list of tables (of the current schema) never analyzed, or
#: with more than a tenth of their rows changed since.
STALE_STATISTICS = (
    'SELECT relname FROM pg_stat_user_tables WHERE schemaname = '
    'current_schema() AND relname = ANY(%s) AND (COALESCE(last_analyze, '
    'last_autoanalyze) IS NULL OR n_mod_since_analyze > 50 + 0.1 * '
    'n_live_tup) ORDER BY relname')
#: Deletes the revisions in a GARBAGE_RANGE, returning their sizes and
#: blobs.
DELETE_GARBAGE_RETURNING = SQL(
    'DELETE FROM object_state WHERE {range} RETURNING state_size, '
    'blob_id').format(range=GARBAGE_RANGE)

#: The advisory lock keys used as the commit lock and the pack lock (any
#: constants will do; these spell "RelS" and "RelP").
COMMIT_LOCK_KEY = 0x52656c53
PACK_LOCK_KEY = 0x52656c50
SCHEMA_LOCK_KEY = 0x52656c44

#: Every commit notifies this channel (NOTIFY is scoped to the database);
#: load sessions with a poll-interval listen on it.
COMMIT_CHANNEL = Identifier('relstorage_commits')
LISTEN_COMMITS = SQL('LISTEN {channel}').format(channel=COMMIT_CHANNEL)
NOTIFY_COMMIT = SQL('NOTIFY {channel}').format(channel=COMMIT_CHANNEL)

#: What every session sets, and a session on a TCP connection too when
#: network-timeout is set (the server's keepalives; their parameters in
#: the order of Keepalive's fields).
SESSION_SETUP = 'SET lock_timeout = %s'
KEEPALIVE_SETUP = script(
    SESSION_SETUP, 'SET tcp_keepalives_idle = %s',
    'SET tcp_keepalives_interval = %s', 'SET tcp_keepalives_count = %s',
    'SET tcp_user_timeout = %s')
#: What a session that writes sets, and what each transaction it begins
#: sets again. A backend drops its session's temporary tables (temp_store,
#: the pack's) when it exits, in a transaction of its own that commits
#: with the session's synchronous_commit. Under a fast shutdown or a
#: pg_terminate_backend while no synchronous standby answers (a failover
#: under way), that commit would wait for the standby for good, and the
#: server could not stop: the drop has nothing worth waiting for, so the
#: session's own setting is local, and each of its transactions commits
#: as the server says (synchronous_commit's default: the configuration's,
#: the role's or the database's).
WRITER_SETUP = 'SET synchronous_commit = local'
COMMITS_AS_CONFIGURED = 'SET LOCAL synchronous_commit TO DEFAULT'
#: What a load session sets; and with LISTEN.
LOAD_SETUP = script('SET jit = off', 'SET max_parallel_workers_per_gather = 0')
LISTENING_LOAD_SETUP = script(LOAD_SETUP, LISTEN_COMMITS)

#: No primary key: the rows of an upload are unique already, and nothing
#: looks one up (the index cost 1 ms of a 1,000-row COPY's 4). Emptied at
#: each commit where the session keeps it; dropped there behind a
#: transaction pooler, where each store transaction creates it.
TEMP_STORE_TEMPLATE = SQL("""
CREATE TEMPORARY TABLE IF NOT EXISTS temp_store (
    zoid        BIGINT NOT NULL,
    prev_tid    BIGINT NOT NULL,
    state       BYTEA,
    blob_id     BIGINT
) ON COMMIT {end}
""")
TEMP_STORE_DDL = TEMP_STORE_TEMPLATE.format(end='DELETE ROWS')
POOLED_TEMP_STORE_DDL = TEMP_STORE_TEMPLATE.format(end='DROP')


class PostgreSQLSession(Session):

    defers_verbs = True
    #: Whether this connection has the load statement prepared.
    load_prepared = False
    #: Whether the session's own synchronous_commit is local, its
    #: transactions setting the server's (see WRITER_SETUP).
    commits_locally = False

    def begin(self, sql=None):
        if self.commits_locally:
            sql = script(sql or self.begin_sql, COMMITS_AS_CONFIGURED)
        super().begin(sql)

    def execute_script(self, statements):
        # The driver binds parameters on the client, so a whole script
        # travels to the server in one message.
        with self.lock:
            cursor = self.live_cursor()
            mogrify = self.adapter.driver.mogrify
            script = '; '.join(mogrify(cursor, stmt, params)
                               for stmt, params in statements)
            self.execute(without_parameters(script))

    def table_exists(self, name):
        return self.scalar(
            "SELECT to_regclass(%s) IS NOT NULL", (name,))


class PsycopgSession(PostgreSQLSession):
    """psycopg leaves the cursor on the first result of a message of
    several statements (a deferred BEGIN and the statement after it, a
    script); the statement that matters is the last."""

    def execute(self, stmt, params=()):
        with self.lock:
            cursor = super().execute(stmt, params)
            while cursor.nextset():
                pass
            return cursor


class PostgreSQLSchema(Schema):
    extra_ddl = (
        'CREATE SEQUENCE zoid_seq INCREMENT BY %d START WITH 1' % OID_BLOCK,
    )
    # (The pack's scratch tables are the database's behind a transaction
    # pooler.)
    drop_extra_ddl = ('DROP SEQUENCE IF EXISTS zoid_seq',
                      pooler.DROP_SCRATCH)
    # RelStorage 4 keeps each blob chunk in a large object.
    rs4_piece_query = ('SELECT lo_get(chunk, %s - 1, %s) FROM blob_chunk '
                     'WHERE zoid = %s AND tid = %s AND chunk_num = %s')


#: Runs of consecutive oids at least this long are locked as a range; at
#: most LOCK_RANGES of them per statement (each is one more index scan,
#: OR'd together: 250 ranges took 14 ms for 1,000 rows).
LONG_RUN = 32
LOCK_RANGES = 16


class PostgreSQLLocker(Locker):

    # One statement, whatever the number. The oids that are not in a long
    # run travel as one array literal: the server parses a string, not an
    # expression of one node per oid (what psycopg2 makes of a list).
    # 1,000 rows locked: 8 ms as ARRAY[...], 5 ms as a literal, 2.7 ms as
    # a range.
    min_range = LONG_RUN
    max_ranges = LOCK_RANGES

    def singles_where(self, singles):
        return ('zoid = ANY(%s::bigint[])',
                ['{%s}' % ','.join(map(str, singles))])

    def singles_params(self, count):
        return 1 if count else 0

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        if wait <= 0:
            if not session.scalar('SELECT pg_try_advisory_xact_lock(%s)',
                                  (COMMIT_LOCK_KEY,)):
                return self.BUSY
            return session.scalar(last_tid_sql)
        session.execute('SET LOCAL lock_timeout = %s', (int(wait * 1000),))
        try:
            session.execute('SELECT pg_advisory_xact_lock(%s)',
                            (COMMIT_LOCK_KEY,))
        except self.adapter.driver.errors.LockNotAvailable:
            return self.BUSY
        session.execute('SET LOCAL lock_timeout = %s', (
            int(self.adapter.options.commit_lock_timeout * 1000),))
        return session.scalar(last_tid_sql)

    def try_pack_lock(self, session):
        # A session-level advisory lock: the server drops it with the
        # connection.
        return session.scalar('SELECT pg_try_advisory_lock(%s)',
                              (PACK_LOCK_KEY,))

    def release_pack_lock(self, session):
        session.execute('SELECT pg_advisory_unlock(%s)', (PACK_LOCK_KEY,))

    def hold_schema_lock(self, session):
        # Released with the transaction; the session's lock_timeout bounds
        # the wait.
        try:
            session.execute('SELECT pg_advisory_xact_lock(%s)',
                            (SCHEMA_LOCK_KEY,))
        except self.adapter.driver.errors.LockNotAvailable:
            raise self.schema_lock_timeout() from None

    def is_lock_error(self, error):
        errors = self.adapter.driver.errors
        return isinstance(error, (errors.LockNotAvailable,
                                  errors.DeadlockDetected))

    def hold_commit_lock(self, session, last_tid_sql):
        try:
            # One message; the second statement's snapshot is taken after
            # the lock is granted, so it sees the newest commit.
            return session.scalar(
                script('SELECT pg_advisory_xact_lock(%s)', last_tid_sql),
                (COMMIT_LOCK_KEY,))
        except self.adapter.driver.errors.LockNotAvailable:
            raise self.timeout_error() from None


_COPY_HEADER = b'PGCOPY\n\xff\r\n\x00' + struct.pack('!ii', 0, 0)
# Each row: the field count, then (length, value) pairs up to the state's
# length; the state and blob_id follow.
_COPY_TEMP_ROW = struct.Struct('!hiqiqi')     # zoid, prev_tid
_COPY_HF_ROW = struct.Struct('!hiqiqiqi')     # zoid, tid, state_size
_COPY_HP_ROW = struct.Struct('!hiqiqiqiqi')   # zoid, tid, prev_tid, size
_COPY_BIGINT = struct.Struct('!iq')           # blob_id
_COPY_NULL = struct.pack('!i', -1)


def _binary_copy(rows, tid=None, with_prev=False):
    """``[(zoid, prev_tid, state, blob_id)]`` as a binary COPY stream:
    temp_store's columns, or with *tid* object_state's (*with_prev*: the
    history-preserving one's). A NULL state has length -1, size 0."""
    if tid is None:
        pack = _COPY_TEMP_ROW.pack

        def head(zoid, prev_tid, length):
            return pack(4, 8, zoid, 8, prev_tid, length)
    elif with_prev:
        pack = _COPY_HP_ROW.pack

        def head(zoid, prev_tid, length):
            return pack(6, 8, zoid, 8, tid, 8, prev_tid, 8,
                        max(length, 0), length)
    else:
        pack = _COPY_HF_ROW.pack

        def head(zoid, prev_tid, length):
            return pack(5, 8, zoid, 8, tid, 8, max(length, 0), length)
    parts = [_COPY_HEADER]
    append = parts.append
    bigint = _COPY_BIGINT.pack
    for zoid, prev_tid, state, blob_id in rows:
        if state is None:
            append(head(zoid, prev_tid, -1))
        else:
            append(head(zoid, prev_tid, len(state)))
            append(state)
        append(_COPY_NULL if blob_id is None else bigint(8, blob_id))
    append(b'\xff\xff')
    return b''.join(parts)


def _copy(session, sql, data):
    with session.lock, session.guarded():
        session.flush()
        session.round_trips += 1
        session.adapter.driver.copy_in(session.live_cursor(), sql, data)


class PostgreSQLMoverMixin:

    def fetch_current(self, session, oid):
        # The most frequent statement, planned once per connection (a
        # prepared statement outlives transactions and their rollbacks).
        try:
            if not session.load_prepared:
                session.execute('PREPARE rs_load_current (bigint) AS '
                                + numbered(self.load_current_sql))
                session.load_prepared = True
            return session.fetchone('EXECUTE rs_load_current (%s)', (oid,))
        except self.adapter.driver.session_state_errors as e:
            # Another client's server session, lent by a pooler.
            raise pooler.transaction_pooler_error(
                self.adapter, 'prepared statements come and go: %s'
                % type(e).__name__) from None

    def upload(self, session, rows):
        # COPY in PostgreSQL's binary format: one round trip, and the
        # server neither parses SQL text nor decodes escaped bytes.
        _copy(session, 'COPY temp_store (zoid, prev_tid, state, blob_id) '
              'FROM STDIN WITH (FORMAT binary)', _binary_copy(rows))


class PostgreSQLHPMover(PostgreSQLMoverMixin, HistoryPreservingMover):

    # Every row of a commit is a new (zoid, tid): COPY puts them in
    # place at commit, and current_object follows from the new tid's
    # rows, with no pass through temp_store.

    def split_direct(self, rows):
        return rows, ()

    def copy_into_place(self, session, rows, tid):
        _copy(session, 'COPY object_state (zoid, tid, prev_tid, state_size, '
              'state, blob_id) FROM STDIN WITH (FORMAT binary)',
              _binary_copy(rows, tid, with_prev=True))

    def __init__(self, adapter):
        super().__init__(adapter)
        #: after_copy's statement.
        self.current_of_tid_sql = SQL(
            'INSERT INTO current_object (zoid, tid) SELECT zoid, tid '
            'FROM object_state WHERE tid = %s{upsert}').format(
                upsert=self.upsert_current_clause)

    def after_copy(self, tid):
        return [(self.current_of_tid_sql, (tid,))]


class PostgreSQLHFMover(PostgreSQLMoverMixin, HistoryFreeMover):

    # A new object's row is copied into object_state at commit: no pass
    # through temp_store and no upsert (1,000 new rows: 9 ms instead of
    # 15, COMMIT included). The vote found no row for it; only a
    # transaction storing the same oid as new (an oid not from new_oid)
    # can have added one since, and the COPY then fails instead of
    # overwriting it.

    def split_direct(self, rows):
        new = [row for row in rows if not row[1]]
        if not new:
            return (), rows
        return new, [row for row in rows if row[1]]

    def copy_into_place(self, session, rows, tid):
        try:
            _copy(session, 'COPY object_state (zoid, tid, state_size, '
                  'state, blob_id) FROM STDIN WITH (FORMAT binary)',
                  _binary_copy(rows, tid))
        except self.adapter.driver.errors.UniqueViolation as e:
            # Told by its SQLSTATE (23505); the key is in the detail.
            found = re.search(r'\(zoid\)=\((\d+)\)',
                              e.diag.message_detail or '')
            oid = int(found.group(1)) if found else None
            raise ConflictError(
                'object %s was created by another transaction after this '
                'one voted to create it; nothing was committed'
                % ('0x%x' % oid if oid is not None else '(unknown)'),
                oid=p64(oid) if oid is not None else None) from None


class PostgreSQLPackerMixin:

    def add_references(self, session, pairs):
        # COPY: one round trip, no SQL to parse per row.
        _copy(session, 'COPY pack_ref (zoid, to_zoid) FROM STDIN',
              ''.join(['%d\t%d\n' % pair for pair in pairs]).encode())

    def keep_references(self, session, rows, stale=()):
        # COPY too, each bytea in its hex form.
        self.forget_kept(session, stale)
        _copy(session, 'COPY state_refs (zoid, tid, refs) FROM STDIN',
              ''.join(['%d\t%d\t\\\\x%s\n' % (oid, tid, refs.hex())
                       for oid, tid, refs in rows]).encode())

    def add_garbage(self, session, oids):
        _copy(session, 'COPY pack_gc (zoid) FROM STDIN',
              ''.join(['%d\n' % oid for oid in oids]).encode())

    def remove_garbage(self, session, oids):
        # The removed rows' sizes and blobs come back from the DELETE.
        bounds = (oids[0], oids[-1]) * 2
        rows = session.fetchall(DELETE_GARBAGE_RETURNING, bounds)
        self.delete_objects(session, oids, self.object_tables[1:])
        return removed_rows(session, rows)

    def mark(self, session):
        # Temporary tables are never analyzed on their own; without their
        # sizes the planner may scan the references once per level.
        session.execute('ANALYZE pack_root, pack_ref')
        super().mark(session)

    def find_garbage(self, session, pack_tid, gc, deleted=None):
        session.execute('ANALYZE pack_reached')
        count = super().find_garbage(session, pack_tid, gc, deleted)
        session.execute('ANALYZE pack_gc')
        return count


#: Whether the kept references r.refs were read from the state s.state:
#: their last 16 bytes are those of the SHA-256 digest of the state
#: followed by the rest (relstorage.storage.keptrefs).
KEPT_OK = ("substring(r.refs from greatest(octet_length(r.refs) - 15, 1)) "
           "= substring(sha256(s.state || substring(r.refs from 1 for "
           "greatest(octet_length(r.refs) - 16, 0))) from 1 for 16)")
#: A checked page's rows, before the lean ones are made of them: the
#: plain columns, and whether the kept references were read from the
#: state (``ok``; NULL where none are kept), found once a row.
OK_COLUMNS = SQL('s.zoid, s.state, s.tid, r.tid AS kept_tid, r.refs AS '
                 'kept, (r.tid = s.tid AND {kept_ok}) AS ok').format(
                     kept_ok=KEPT_OK)
#: An HP page as the generic one, but the states of the older revisions
#: come back NULL (only each object's newest is kept), so that a first
#: pack of a long history is not sent the whole of it. (The page's last
#: row always comes with its state.)
HP_PAGE = SQL(
    'SELECT zoid, CASE WHEN LEAD(zoid) OVER w = zoid THEN NULL ELSE '
    'state END, tid, kept_tid, CASE WHEN LEAD(zoid) OVER w = zoid THEN '
    'NULL ELSE kept END FROM ({states_at}) p WINDOW w AS (ORDER BY '
    'zoid, tid) ORDER BY zoid, tid')
#: HP_PAGE read checked: the newest revisions' rows lean (as in
#: CHECKED_HF_PAGE). (Its
#: order is the page's columns', named: a CASE's column takes the name of
#: its ELSE, so that a bare ``tid`` would order by the lean one.)
CHECKED_HP_PAGE = SQL(
    'SELECT zoid, CASE WHEN LEAD(zoid) OVER w = zoid THEN NULL WHEN ok '
    "THEN ''::bytea ELSE state END, CASE WHEN ok THEN NULL ELSE tid END, "
    'CASE WHEN ok THEN NULL ELSE kept_tid END, CASE WHEN LEAD(zoid) OVER '
    'w = zoid OR (ok AND length(kept) = 16) THEN NULL ELSE kept END FROM '
    '({states_at}) p WINDOW w AS (ORDER BY p.zoid, p.tid) ORDER BY p.zoid, '
    'p.tid')
#: An HF page read checked (the page in a subquery, so that ``ok`` is
#: found once a row): where a row's kept references check out, an empty
#: state, no tids (NULL: no revision has one, so that the row tells it
#: is checked) and the kept bytes only when they hold any oid; else the
#: row as it is. Of a nightly pack's 74,386 rows, 66,716 were such a row
#: with no oid: sending the plain columns of every row took 0.38 s, these
#: 0.27 (paged alone, 2026-11-29).
CHECKED_HF_PAGE = SQL(
    "SELECT zoid, CASE WHEN ok THEN ''::bytea ELSE state END, CASE WHEN "
    'ok THEN NULL ELSE tid END, CASE WHEN ok THEN NULL ELSE kept_tid END, '
    'CASE WHEN ok AND length(kept) = 16 THEN NULL ELSE kept END FROM '
    '({states_at}) p ORDER BY p.zoid')


class PostgreSQLHPPacker(PostgreSQLPackerMixin, HistoryPreservingPacker):
    states_at_sql = HP_PAGE.format(
        states_at=HistoryPreservingPacker.states_at_sql)
    checked_states_at_sql = CHECKED_HP_PAGE.format(
        states_at=HistoryPreservingPacker.states_at_template.format(
            columns=OK_COLUMNS, index='', join=PAGE_JOIN))

    def remove_old_revisions(self, session, keep):
        # One statement for the lot: the pairs go as two arrays, and the
        # removed rows' sizes and blobs come back.
        rows = session.fetchall(
            'DELETE FROM object_state s USING unnest(%s::bigint[], '
            '%s::bigint[]) AS k (zoid, tid) WHERE s.zoid = k.zoid AND '
            's.tid < k.tid RETURNING s.state_size, s.blob_id',
            ([oid for oid, _ in keep], [tid for _, tid in keep]))
        return removed_rows(session, rows)


class PostgreSQLHFPacker(PostgreSQLPackerMixin, HistoryFreePacker):
    checked_states_at_sql = CHECKED_HF_PAGE.format(
        states_at=HistoryFreePacker.states_at_template.format(
            columns=OK_COLUMNS, join=PAGE_JOIN))


class _MoverWithoutCopy:
    # psycopg2 refuses COPY while a wait callback is installed (under
    # gevent): rows go through temp_store by the generic statements.
    upload = Mover.upload
    split_direct = Mover.split_direct


class _PackerWithoutCopy:
    add_references = Packer.add_references
    keep_references = Packer.keep_references
    add_garbage = Packer.add_garbage


class NoCopyHPMover(_MoverWithoutCopy, PostgreSQLHPMover):
    pass


class NoCopyHFMover(_MoverWithoutCopy, PostgreSQLHFMover):
    pass


class NoCopyHPPacker(_PackerWithoutCopy, PostgreSQLHPPacker):
    pass


class NoCopyHFPacker(_PackerWithoutCopy, PostgreSQLHFPacker):
    pass


class PostgreSQLOIDAllocator(SequenceOIDAllocator):

    next_values_sql = (
        "SELECT nextval('zoid_seq') FROM generate_series(1, %s)")

    def raise_to(self, max_oid):
        # Only ever moves the sequence forward.
        return [("SELECT setval('zoid_seq', %s) FROM zoid_seq "
                 "WHERE last_value < %s", (max_oid, max_oid))]

    def reset(self, session):
        session.execute("ALTER SEQUENCE zoid_seq RESTART WITH 1")


class PostgreSQLAdapter(Adapter):

    schema_class = PostgreSQLSchema
    hp_mover_class = PostgreSQLHPMover
    hf_mover_class = PostgreSQLHFMover
    hp_packer_class = PostgreSQLHPPacker
    hf_packer_class = PostgreSQLHFPacker
    locker_class = PostgreSQLLocker
    vote_claims_class = PostgreSQLVoteClaims
    oid_allocator_class = PostgreSQLOIDAllocator
    statistics_class = PostgreSQLStatistics
    upgrade_class = PostgreSQLUpgrade
    database_name = 'PostgreSQL'

    #: The URI's keys that are the section's own, not libpq's.
    section_uri_keys = ('driver', 'pooler', 'password_command')
    uri_keys = (section_uri_keys + TLS_KEYWORDS
                + tuple(RELSTORAGE4_KEYWORDS))

    @classmethod
    def section_from_uri(cls, uri):
        """``postgresql://user:password@host:port/dbname?sslmode=...``: a
        dsn, with the query's libpq keywords (RelStorage 4's ``ssl_mode``
        and ``connect_timeout`` among them)."""
        keywords = {name: value for name, value in (
            ('dbname', uri.path.lstrip('/')), ('host', uri.host),
            ('port', uri.port), ('user', uri.user),
            ('password', uri.password)) if value}
        for key, value in uri.keys.items():
            if key not in cls.section_uri_keys:
                keywords[RELSTORAGE4_KEYWORDS.get(key, key)] = value
        return {'dsn': make_dsn(keywords)}
    supports_commit_announcements = True
    load_begin_sql = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'
    store_begin_sql = 'BEGIN ISOLATION LEVEL READ COMMITTED'
    #: What the session's own BEGIN is (None: BEGIN, the session keeping
    #: its settings).
    pooled_begin_sql = None
    #: zap_all truncates the tables larger than this (see empty_tables).
    truncate_above_bytes = 8 << 20

    def __init__(self, dsn='', driver='auto', options=None, pooler='none',
                 password_command=None):
        from ...options import Options
        self.dsn = dsn or ''
        #: Run for each new connection: its output is the password.
        self.password_command = password_command
        if password_command is not None:
            command_argv(password_command)  # refused now if unusable
        self.driver = select_driver(driver)
        self.cooperative = self.driver.cooperative
        #: none, session or transaction (see pooler).
        self.pooler = pooler_mode(pooler)
        if not self.driver.can_copy:
            self.hp_mover_class, self.hf_mover_class = (NoCopyHPMover,
                                                        NoCopyHFMover)
            self.hp_packer_class, self.hf_packer_class = (NoCopyHPPacker,
                                                          NoCopyHFPacker)
        options = options if options is not None else Options()
        if self.pooler == 'transaction':
            without_sessions(self, options, POOLED_TEMP_STORE_DDL)
        #: Whether load sessions LISTEN for commits.
        self.listens = bool(options.poll_interval) and (
            self.pooler != 'transaction')
        #: Whether open() still has to look for a transaction pooler.
        self.pooler_unchecked = self.pooler == 'none'
        # A misspelt keyword, say: named now, not at the first connect.
        self.check_dsn(self.dsn, 'dsn: ')
        super().__init__(options)
        self.keepalive = Keepalive.for_options(self.options)
        #: libpq keywords the dsn leaves to network-timeout.
        given = parse_dsn(self.dsn)
        self.bounds = {key: value for key, value in self.keepalive_keywords()
                       if key not in given}

    def keepalive_keywords(self):
        if self.keepalive is None:
            return ()
        return self.keepalive.libpq_keywords().items()

    def check_dsn(self, dsn, where):
        """ConfigurationError, starting with *where*, when libpq cannot
        parse *dsn*. libpq's message may quote a part of a password (an
        unquoted one with a space): that part is left out."""
        problem = None
        try:
            self.driver.parse_dsn(dsn)
        except self.driver.ProgrammingError as e:
            problem = scrub_dsn(str(e).strip(), dsn)
        if problem is not None:
            # (Raised outside the handler, without the driver's error as
            # its context.)
            raise ConfigurationError(where + problem)

    supports_replicas = True

    def describe(self, server=None):
        server = server or self.current_server()
        return 'PostgreSQL database (%s)' % describe_dsn(
            self.dsn if server is None else server.params)

    def server_params(self, line):
        """A replica file's line is ``host``, ``host:port`` or a libpq
        connection string (key=value or URI); what it leaves out comes
        from the dsn."""
        params = parse_dsn(self.dsn)
        if '=' in line or re.match(r'postgres(ql)?://', line):
            self.check_dsn(line, '')
            params.update(parse_dsn(line))
        else:
            host, port = split_host_port(line)
            params.pop('hostaddr', None)
            params['host'] = host
            if port is not None:
                params['port'] = str(port)
            else:
                params.pop('port', None)
        return make_dsn(params)

    def is_read_only_server(self, session):
        return bool(session.scalar('SELECT pg_is_in_recovery()'))

    def write_position(self, session):
        return session.scalar('SELECT pg_current_wal_lsn()::text')

    def replayed(self, session, position):
        return session.scalar(
            'SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, true)',
            (position,))

    def location(self):
        return ('postgresql',) + dsn_location(self.dsn)

    def _raw_session(self, server):
        """A session on *server* (None: the dsn's) with nothing set."""
        driver = self.driver
        dsn, bounds = self.dsn, self.bounds
        if server is not None:
            dsn = server.params
            given = parse_dsn(dsn)
            bounds = {key: value for key, value in self.keepalive_keywords()
                      if key not in given}
        problem = None
        secrets = []
        if self.password_command is not None:
            secrets.append(run_password_command(self.password_command))
            bounds = dict(bounds, password=secrets[0])
        try:
            conn = driver.connect(dsn, **bounds)
        except driver.OperationalError as e:
            problem = scrub(scrub_dsn(str(e).strip(), dsn), secrets)
        if problem is not None:
            # (Raised outside the handler: the driver's error, which may
            # quote the connection string, is not its context.)
            raise DatabaseUnavailable('cannot connect to the %s: %s'
                                      % (self.describe(server), problem))
        session = (PsycopgSession if driver.results_from_first
                   else PostgreSQLSession)(self, conn)
        session.server = server
        return session

    def open_connection(self, for_store, server=None):
        session = self._raw_session(server)
        if self.pooler_unchecked:
            try:
                pooler.refuse_unannounced_transaction_pooler(
                    self, session, lambda: self._raw_session(server))
            except BaseException:
                session.close()
                raise
            self.pooler_unchecked = False
        if self.pooled_begin_sql is not None:
            # Each transaction makes its own settings.
            session.begin_sql = self.pooled_begin_sql
            return session
        timeout_ms = int(self.options.commit_lock_timeout * 1000)
        setup, params = SESSION_SETUP, (timeout_ms,)
        keepalive = self.keepalive
        if keepalive is not None:
            # The server's end too: a session whose client went silent
            # (mid-commit, holding row locks and the commit lock) ends
            # within the bound. (Ignored on a Unix socket.)
            setup = KEEPALIVE_SETUP
            params += (keepalive.idle, keepalive.interval, keepalive.count,
                       keepalive.user_timeout_ms)
        if for_store:
            setup = script(setup, WRITER_SETUP)
            session.commits_locally = True
        session.execute(setup, params)
        if not for_store:
            # Loads and polls are short index lookups: compiling one, or
            # starting workers for it, is never worth it, even when stale
            # statistics make it look so.
            setup = LOAD_SETUP
            if self.listens and not (
                    server is not None and server.read_only):
                # Told of every commit, an instance within its interval
                # polls only when there is something to see. (Not without
                # an interval: nothing would read the notifications, which
                # the driver keeps in a list.)
                setup = LISTENING_LOAD_SETUP
            session.execute(setup)
        return session

    def announce_commit(self):
        # Sent with the COMMIT; delivered to listeners once it is done.
        return [(NOTIFY_COMMIT, ())]

    def commits_announced(self, session):
        if not self.listens or (
                session.server is not None and session.server.read_only):
            # (A standby takes no LISTEN.)
            return None
        try:
            # Reads what the server sent, without a round trip.
            return self.driver.notified(session.conn)
        except self.driver.Error:
            return True     # a real poll finds out (and reconnects)

    def prepare_store_session(self, session):
        if self.pooled_begin_sql is None:
            session.execute(TEMP_STORE_DDL)
        # (Else each store transaction creates it: see _without_sessions.)

    def empty_tables(self, session):
        # DELETE leaves the old rows' space behind until a vacuum, and a
        # table that was just emptied has no statistics for the rows that
        # come next: the planner then guesses from its size on disk (a
        # poll after zapping a large table took a sequential scan and JIT
        # compilation, 0.8 s). Large tables are truncated instead, unless
        # another connection holds a lock on them (a reader in a
        # snapshot), in which case DELETE, which does not wait for it.
        big = [name for name, size in session.fetchall(
            'SELECT name, pg_relation_size(name::regclass) '
            'FROM unnest(%s::text[]) AS name',
            (list(self.schema.tables),)) if size > self.truncate_above_bytes]
        if big:
            session.execute("SET LOCAL lock_timeout = '2s'; "
                            'SAVEPOINT rs_zap')
            try:
                session.execute(TRUNCATE.format(tables=', '.join(big)))
            except self.driver.errors.LockNotAvailable:
                session.execute('ROLLBACK TO SAVEPOINT rs_zap')
        super().empty_tables(session)

    def before_pack(self, session):
        # Only the tables whose statistics are stale, as autovacuum would
        # judge them (a tenth of the rows changed since the last ANALYZE,
        # or none yet), and has not got round to: 0.1 s of a nightly pack
        # of 100,000 objects went to ANALYZE of tables barely changed.
        stale = {name for (name,) in session.fetchall(STALE_STATISTICS, (
            list(self.packer.object_tables),))}
        # The names formatted in are this storage's own, never the rows'.
        tables = [table for table in self.packer.object_tables
                  if table in stale]
        if tables:
            session.execute(ANALYZE.format(tables=', '.join(tables)))

    is_permission_error = pg_errors.is_permission_error
    is_full_error = pg_errors.is_full_error
    missing_create_privilege = pg_errors.missing_create_privilege

    def is_disconnect(self, session, error):
        driver = self.driver
        if isinstance(error, driver.InterfaceError):
            return True
        return (isinstance(error, driver.OperationalError)
                and (session.conn is None or bool(session.conn.closed)))
