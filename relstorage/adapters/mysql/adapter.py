"""What MySQL and MariaDB do differently: InnoDB tables, an AUTO_INCREMENT
table for oids, GET_LOCK as the commit lock (released right after COMMIT
and on every rollback), ON DUPLICATE KEY upserts, and a consistent-snapshot
read-only transaction for loads."""
import logging
import re

from ...exceptions import DatabaseUnavailable
from ..oidallocator import OID_BLOCK
from ..adapter import Adapter
from .. import replicas
from ..keepalive import Keepalive
from ..mover import HistoryFreeMover
from ..mover import HistoryPreservingMover
from ..redact import scrub
from ..oidallocator import OIDAllocator
from ..packer import HistoryFreePacker
from ..packer import HistoryPreservingPacker
from ..packer import PAGE_COLUMNS
from ..packer import PAGE_JOIN
from ..packer import checked_columns
from ..packer import removed_rows
from ..schema import Schema
from .inspect import MySQLStatistics
from ..schema import Types
from ..session import Session
from ..sql import SQL
from ..sql import Rows
from .drivers import CONNECT_ERRORS
from .drivers import DISCONNECT_ERRORS
from .drivers import error_code
from .drivers import select_driver
from . import galera
from .tls import TLS_KEYS
from .tls import requires_tls
from .tls import tls_label
from ..credentials import command_argv
from ..credentials import run_password_command
from .locker import MySQLLocker
from .upgrade import MySQLUpgrade
from .votes import MySQLVoteClaims

log = logging.getLogger(__name__)

ANALYZE = SQL('ANALYZE TABLE {tables}')
#: Lifts the bound on a recursive query's depth, by whether the server
#: is MariaDB (its variable's name) or MySQL.
RECURSION_LIMIT = SQL('SET SESSION {variable} = 4294967295')
UNLIMITED_RECURSION = {
    True: RECURSION_LIMIT.format(variable='max_recursive_iterations'),
    False: RECURSION_LIMIT.format(variable='cte_max_recursion_depth')}
#: A session's isolation level, by whether it stores.
ISOLATION_LEVEL = SQL('SET SESSION TRANSACTION ISOLATION LEVEL {level}')
ISOLATION = {True: ISOLATION_LEVEL.format(level='READ COMMITTED'),
             False: ISOLATION_LEVEL.format(level='REPEATABLE READ')}

TEMP_STORE_DDL = """
CREATE TEMPORARY TABLE IF NOT EXISTS temp_store (
    zoid        BIGINT NOT NULL PRIMARY KEY,
    prev_tid    BIGINT NOT NULL DEFAULT 0,
    state       LONGBLOB,
    blob_id     BIGINT
) ENGINE = InnoDB
"""


class ServerInfo:
    """Flavour and version of the server, read from ``VERSION()``, and
    whether it is a node of a Galera cluster."""

    def __init__(self, version_string, galera=False):
        self.version_string = version_string
        self.galera = galera
        self.mariadb = 'mariadb' in version_string.lower()
        numbers = re.match(r'(\d+)\.(\d+)\.(\d+)', version_string)
        self.version = (tuple(int(n) for n in numbers.groups())
                        if numbers else (0, 0, 0))

    @property
    def flavour(self):
        name = 'MariaDB' if self.mariadb else 'MySQL'
        return name + ' Galera' if self.galera else name

    @property
    def has_for_share(self):
        # MySQL 8.0.1 added FOR SHARE; MariaDB spells it LOCK IN SHARE MODE.
        return not self.mariadb and self.version >= (8, 0, 1)


#: What a server has written (mark_position), by how it counts.
POSITION = {
    'mariadb': 'SELECT @@gtid_binlog_pos',
    # MySQL 5.7 and 8: the set of GTIDs executed (not checked here
    # against a MySQL server: none is at hand).
    'mysql': 'SELECT @@GLOBAL.gtid_executed',
    'galera': galera.LAST_COMMITTED,
}
#: 1 when a replica has applied a position, asked without waiting.
REPLAYED = {
    # 0 at once where the replica has applied the GTIDs, else -1.
    'mariadb': 'SELECT MASTER_GTID_WAIT(%s, 0) = 0',
    # The position is a subset of what was executed; WAIT_FOR_EXECUTED_
    # GTID_SET would wait (its timeout 0 means for ever on 8.0).
    'mysql': 'SELECT GTID_SUBSET(%s, @@GLOBAL.gtid_executed)',
}


class MySQLTypes(Types):
    blob = 'LONGBLOB'
    table_suffix = ' ENGINE = InnoDB'


class MySQLSession(Session):

    def translate_error(self, e):
        if self.adapter.galera:
            refused = galera.conflict(self, e)
            if refused is not None:
                self.in_transaction = False
                self.pending = ''
                raise refused from e
        super().translate_error(e)

    # The connection allows several statements per message, and each
    # result set is read in turn: the deferred verbs' results (none, only
    # their status) are passed over to reach the statement's.
    defers_verbs = True
    #: Whether every statement goes in a message of its own. A Galera
    #: node may abort a transaction (to apply another node's) while it
    #: runs a message of several statements: the abort's error was then
    #: lost, the statements after it ran outside any transaction and the
    #: COMMIT reported success for a transaction that never committed.
    #: So on a cluster, store sessions send nothing but single statements.
    one_by_one = False

    def execute(self, stmt, params=()):
        with self.lock:
            verbs = self.pending.count('; ')
            if hasattr(self.conn, 'quick_results'):
                # The answers of the verbs after the first come at once
                # (they wait for nobody): mysqlclient under gevent reads
                # them without a thread (see cooperative). Set for every
                # message, so that none left over by a message that
                # failed counts for the next one.
                self.conn.quick_results = max(verbs - 1, 0)
            cursor = super().execute(stmt, params)
            if verbs:
                self._next_results(cursor, verbs)
            return cursor

    def _next_results(self, cursor, count):
        # A later statement's error (a lock wait, a lost connection)
        # comes while moving on to its result.
        with self.guarded():
            for _ in range(count):
                cursor.nextset()

    def flush(self):
        with self.lock, self.guarded():
            if self.pending:
                verbs = self.pending.count('; ')
                cursor = self.live_cursor()
                self.round_trips += 1
                # Without the last separator: an empty statement after it
                # would be an error.
                cursor.execute(self.pending[:-2])
                self.pending = ''
                for _ in range(verbs - 1):
                    cursor.nextset()

    def first_values(self, script, params=()):
        """Run a message of several SELECTs; the first column of each
        one's first row."""
        if self.one_by_one:
            return self._values_one_by_one(script, params)
        with self.lock:
            cursor = self.execute(script, params)
            values = []
            for index in range(script.count('; ') + 1):
                if index:
                    self._next_results(cursor, 1)
                row = cursor.fetchone()
                values.append(row[0] if row is not None else None)
            return values

    def _values_one_by_one(self, script, params):
        values = []
        params = list(params)
        with self.lock:
            for stmt in script.split('; '):
                count = stmt.count('%s')
                values.append(self.scalar(stmt, params[:count]))
                del params[:count]
        return values

    def execute_script(self, statements):
        # The connection allows several statements per message; every
        # result set must be consumed before the next command.
        if self.one_by_one:
            return Session.execute_script(self, statements)
        with self.lock:
            sql = '; '.join(stmt for stmt, _ in statements)
            params = [p for _, ps in statements for p in ps]
            cursor = self.execute(sql, params)
            # The later statements' results (a COMMIT's among them) come
            # back here: a connection lost now is lost in the middle of
            # the script, and must say so (the storage then asks whether
            # a commit happened).
            with self.guarded():
                while cursor.nextset():
                    pass

    def table_exists(self, name):
        return self.scalar(
            'SELECT COUNT(*) FROM information_schema.tables '
            'WHERE table_schema = DATABASE() AND table_name = %s',
            (name,)) > 0


class MySQLSchema(Schema):
    extra_ddl = (
        'CREATE TABLE new_oid (zoid BIGINT NOT NULL AUTO_INCREMENT '
        'PRIMARY KEY) ENGINE = InnoDB',
    )
    drop_extra_ddl = ('DROP TABLE IF EXISTS new_oid',)
    rs4_transaction_table = '`transaction`'


#: temp_store's multi-row INSERT up to its VALUES, by (with a previous
#: tid, with a blob id): the columns holding only their default in a
#: chunk are left out.
TEMP_STORE_INSERT = SQL('INSERT INTO temp_store ({cols}) VALUES ')
TEMP_STORE_INSERTS = {
    (prev, blob): TEMP_STORE_INSERT.format(cols=', '.join(
        ['zoid'] + ['prev_tid'] * prev + ['state'] + ['blob_id'] * blob))
    for prev in (False, True) for blob in (False, True)}


class MySQLMoverMixin:
    upsert_suffix = SQL(' ON DUPLICATE KEY UPDATE {sets}')
    # MySQL 8.0.20 deprecated VALUES(col) here (with a warning) in favour
    # of row aliases, which MariaDB lacks; VALUES() works on both.
    upsert_set = SQL('{col} = VALUES({col})')
    insert_select_where = ''

    #: Bytes of SQL per multi-row INSERT: a quarter of the server's
    #: default max_allowed_packet (16 MB).
    upload_bytes = 4000000
    #: States up to this size go into the statement as hex literals;
    #: larger ones as parameters, which the driver escapes (about 1.03
    #: times their size instead of 2).
    inline_state_bytes = 1 << 20

    def upload(self, session, rows):
        chunk, size = [], 0
        for row in rows:
            chunk.append(row)
            size += 2 * len(row[2] or b'') + 48
            if size >= self.upload_bytes or len(chunk) >= 1000:
                self._insert(session, chunk)
                chunk, size = [], 0
        if chunk:
            self._insert(session, chunk)

    def _insert(self, session, chunk):
        # Columns that hold only their default in this chunk (no previous
        # tid: new objects; no blob) are left out.
        with_prev = any(row[1] for row in chunk)
        with_blob = any(row[3] is not None for row in chunk)
        rows_sql, params = row_literals(chunk, with_prev, with_blob,
                                        self.inline_state_bytes)
        session.execute(TEMP_STORE_INSERTS[with_prev, with_blob]
                        + ', '.join(rows_sql), params or None)


def row_literals(chunk, with_prev, with_blob, inline):
    """The ``(zoid[, prev_tid], state[, blob_id])`` tuples of *chunk*
    written as SQL, and the parameters they leave to the driver.

    The drivers quote every parameter in Python (about 4 ms per 1,000
    rows), and the server reads a hex literal faster than an escaped
    string (1,000 rows of 200 bytes: 4 ms against 7), so states up to
    *inline* bytes go in as ``X'...'``; larger ones, where doubling the
    size would matter, stay ``%s`` parameters. Nothing but integers,
    ``NULL`` and hex digits is formatted in."""
    rows_sql = []
    params = []
    for oid, prev_tid, state, blob_id in chunk:
        if state is None:
            state_sql = 'NULL'
        elif len(state) <= inline:
            state_sql = "X'%s'" % state.hex()
        else:
            params.append(state)
            state_sql = '%s'
        row = ['%d' % oid]
        if with_prev:
            row.append('%d' % prev_tid)
        row.append(state_sql)
        if with_blob:
            row.append('NULL' if blob_id is None else '%d' % blob_id)
        rows_sql.append('(%s)' % ', '.join(row))
    return rows_sql, params


#: Fills the hint slot of a statement joining current_object to
#: object_state: read in that order, each object's current row, then its
#: revision by the whole primary key. Left to itself, MariaDB read
#: object_state first, every revision of each oid, once its statistics
#: said the table was empty: after a DELETE of the database's 1,000,000
#: revisions (zap_all), reading 1,000 objects stored since took 2.5 s
#: instead of 0.02 s until InnoDB had purged the deleted rows (they are
#: read too).
CURRENT_FIRST = 'STRAIGHT_JOIN '


class MySQLHPMover(MySQLMoverMixin, HistoryPreservingMover):
    load_current_sql = HistoryPreservingMover.load_current_template.format(
        hint=CURRENT_FIRST)
    load_many_sql = HistoryPreservingMover.load_many_template.format(
        hint=CURRENT_FIRST)


class MySQLHFMover(MySQLMoverMixin, HistoryFreeMover):
    pass


#: Deletes the rows of {table} whose objects are in pack_gc, between two
#: oids.
DELETE_JOINED = SQL(
    'DELETE t FROM pack_gc g STRAIGHT_JOIN {table} t ON t.zoid = '
    'g.zoid WHERE g.zoid BETWEEN %s AND %s')


class MySQLPackerMixin:
    """InnoDB may answer ``DELETE ... WHERE zoid IN (...)``, or a range of
    the primary key joined to pack_gc, by scanning object rows, locking
    each one it reads: it would wait for a live row that a voting
    committer has locked -- while the pack holds the commit lock that
    committer waits for. The deletes are joined from pack_gc
    (STRAIGHT_JOIN: that order, whatever the optimizer would choose), so
    that InnoDB reads pack_gc's run of oids and locks only the rows of
    those objects (a store session reads committed: no gap locks)."""

    def delete_objects(self, session, oids, tables=None):
        if tables is None:
            tables = self.object_tables
        for table in tables:
            session.execute(DELETE_JOINED.format(table=table),
                            (oids[0], oids[-1]))

    def mark(self, session):
        # A recursive query stops at cte_max_recursion_depth levels on
        # MySQL (1000 by default) and max_recursive_iterations on
        # MariaDB: a long chain of objects must not stop the pack.
        server = self.adapter.server
        session.execute(UNLIMITED_RECURSION[
            server is None or bool(server.mariadb)])
        super().mark(session)


#: Fills the index slot of a statement reading object_state: by its
#: primary key, whatever the optimizer would choose.
ALONG_PRIMARY_KEY = ' FORCE INDEX (PRIMARY)'


#: The revisions older than the oldest one to keep of each object that
#: pack_keep lists: their sizes and blobs, and their deletion.
OLDER_THAN_KEPT = SQL('{what} FROM pack_keep k STRAIGHT_JOIN object_state s '
                      'ON s.zoid = k.zoid AND s.tid < k.tid')
SIZES_OLDER_THAN_KEPT = OLDER_THAN_KEPT.format(
    what='SELECT s.state_size, s.blob_id')
DELETE_OLDER_THAN_KEPT = OLDER_THAN_KEPT.format(what='DELETE s')


#: Whether the kept references r.refs were read from the state s.state
#: (see relstorage.storage.keptrefs and the PostgreSQL adapter's KEPT_OK).
KEPT_OK = ('RIGHT(r.refs, 16) = LEFT(UNHEX(SHA2(CONCAT(s.state, LEFT('
           'r.refs, GREATEST(LENGTH(r.refs) - 16, 0))), 256)), 16)')
CHECKED_COLUMNS = checked_columns(KEPT_OK, "x''")


class MySQLHPPacker(MySQLPackerMixin, HistoryPreservingPacker):
    # By the primary key, in order, so that LIMIT ends the scan: left to
    # itself MariaDB read the tid index's whole range past the last oid,
    # grouped it in a temporary table and sorted it, for every step (0.4
    # s a step at 1,000,000 objects, against 0.03).
    old_after_sql = HistoryPreservingPacker.old_after_template.format(
        index=ALONG_PRIMARY_KEY)
    # The same for the pre-pack's pages. (Older revisions' states are
    # sent too: a derived table of the page, to send them NULL as on
    # PostgreSQL, took MariaDB 2.6 times as long as the plain page.)
    states_at_sql = HistoryPreservingPacker.states_at_template.format(
        columns=PAGE_COLUMNS, index=ALONG_PRIMARY_KEY, join=PAGE_JOIN)
    checked_states_at_sql = HistoryPreservingPacker.states_at_template.format(
        columns=CHECKED_COLUMNS, index=ALONG_PRIMARY_KEY, join=PAGE_JOIN)

    def start_graph(self, session):
        # With the other scratch tables: remove_old_revisions' pairs.
        # (Creating a temporary table does not end the transaction.)
        super().start_graph(session)
        session.execute('CREATE TEMPORARY TABLE IF NOT EXISTS pack_keep '
                        '(zoid BIGINT NOT NULL PRIMARY KEY, '
                        'tid BIGINT NOT NULL)')

    def remove_old_revisions(self, session, keep):
        # The pairs go into pack_keep, joined to object_state as pack_gc
        # is in delete_objects: 1,000,000 objects with history packed in
        # 10.9 s of removal against 12.6 with the base class's ranges
        # (RETURNING the rows).
        session.execute('DELETE FROM pack_keep')
        session.executemany(
            'INSERT INTO pack_keep (zoid, tid) VALUES (%s, %s)', keep)
        rows = session.fetchall(SIZES_OLDER_THAN_KEPT)
        session.execute(DELETE_OLDER_THAN_KEPT)
        return removed_rows(session, rows)


class MySQLHFPacker(MySQLPackerMixin, HistoryFreePacker):
    checked_states_at_sql = HistoryFreePacker.states_at_template.format(
        columns=CHECKED_COLUMNS, join=PAGE_JOIN)


#: Rows of new_oid, each reserving a block of oids.
NEW_OID_ROWS = Rows(SQL('INSERT INTO new_oid VALUES {rows}'), '()')


class MySQLOIDAllocator(OIDAllocator):
    """Each row inserted into ``new_oid`` reserves OID_BLOCK oids; the
    AUTO_INCREMENT counter is the only shared state, and InnoDB hands out
    its values without waiting for other transactions."""

    #: Whether one multi-row INSERT gets consecutive AUTO_INCREMENT
    #: values (not with innodb_autoinc_lock_mode 2); None: not asked yet.
    consecutive = None
    #: Deletes the rows below the one just inserted. On a cluster only
    #: that row: two nodes deleting the same rows would conflict.
    delete_sql = 'DELETE FROM new_oid WHERE zoid < %s'
    cluster_delete_sql = 'DELETE FROM new_oid WHERE zoid = %s'

    def __init__(self, adapter):
        super().__init__(adapter)
        if adapter.galera:
            self.delete_sql = self.cluster_delete_sql

    def new_blocks(self, session, blocks):
        with session.lock:
            if self.consecutive is None:
                self.consecutive = session.scalar(
                    'SELECT @@innodb_autoinc_lock_mode') != 2
            if not self.consecutive:
                blocks = 1
            # One statement, one commit: the rows get consecutive values,
            # LAST_INSERT_ID() being the first.
            session.execute(NEW_OID_ROWS.text(blocks))
            n = session.scalar('SELECT LAST_INSERT_ID()')
            session.execute(self.delete_sql, (n,))
        return [((n - 1) * OID_BLOCK + 1, blocks * OID_BLOCK)]

    def raise_to(self, max_oid):
        # The next block must start above max_oid.
        n = max_oid // OID_BLOCK + 1
        return [('INSERT IGNORE INTO new_oid (zoid) VALUES (%s)', (n,))]

    def reset(self, session):
        session.execute('DELETE FROM new_oid')
        session.execute('ALTER TABLE new_oid AUTO_INCREMENT = 1')


class MySQLAdapter(Adapter):

    types = MySQLTypes
    schema_class = MySQLSchema
    hp_mover_class = MySQLHPMover
    hf_mover_class = MySQLHFMover
    hp_packer_class = MySQLHPPacker
    hf_packer_class = MySQLHFPacker
    locker_class = MySQLLocker
    vote_claims_class = MySQLVoteClaims
    oid_allocator_class = MySQLOIDAllocator
    statistics_class = MySQLStatistics
    upgrade_class = MySQLUpgrade
    database_name = 'MySQL'
    uri_keys = ('driver', 'unix_socket', 'connect_timeout', 'read_timeout',
                'write_timeout', 'compress', 'named_pipe', 'init_command',
                'client_flag', 'load_infile', 'read_default_file',
                'read_default_group', 'password_command') + TLS_KEYS

    @classmethod
    def section_from_uri(cls, uri):
        """``mysql://user:password@host:port/db``: MySQLdb's keywords."""
        return {'host': uri.host, 'port': uri.port, 'user': uri.user,
                'passwd': uri.password, 'db': uri.path.lstrip('/') or None}
    load_begin_sql = 'START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY'
    store_begin_sql = 'START TRANSACTION'
    temp_store_emptied_by_commit = False
    # Not DELETE: an InnoDB temporary table keeps the rows it deleted.
    empty_temp_store_sql = 'TRUNCATE TABLE temp_store'

    def __init__(self, driver='auto', options=None, **params):
        from ...options import Options
        self.driver = select_driver(driver)
        self.cooperative = self.driver.cooperative
        self.params = {k: v for k, v in params.items() if v is not None}
        self.driver.translate(self.params)  # refuse unsupported options now
        if 'password_command' in self.params:
            command_argv(self.params['password_command'])
        self.server = None
        options = options if options is not None else Options()
        self.options = options
        # The server's flavour decides some SQL; learn it before building
        # the shared pieces (from the first server that answers).
        self.replicas = replicas.Replicas.configure(self, options)
        probe = self._probe()
        try:
            cursor = probe.cursor()
            cursor.execute('SELECT VERSION()')
            version = cursor.fetchone()[0]
            self.server = ServerInfo(version, galera.is_galera(cursor))
        except self.driver.module.Error as e:
            # Accepted, then lost (a server restarting, say).
            raise self._unavailable(e) from None
        finally:
            probe.close()
        self.galera = self.server.galera
        if self.galera:
            self.locker_class = galera.GaleraLocker
            self.load_begin_sql = galera.LOAD_BEGIN
        super().__init__(options)

    supports_replicas = True
    #: Whether the server is a node of a Galera cluster (see galera).
    galera = False

    def _probe(self):
        servers = [None]
        if self.replicas is not None and self.replicas.rw is not None:
            servers = self.replicas.rw.servers
        for server in servers[:-1]:
            try:
                return self._connect_raw(server)
            except DatabaseUnavailable:
                continue
        return self._connect_raw(servers[-1])

    def server_params(self, line):
        """A replica file's line is ``host`` or ``host:port``; the other
        parameters are the section's."""
        host, port = replicas.split_host_port(line)
        params = {key: value for key, value in self.params.items()
                  if key not in ('unix_socket', 'port', 'named_pipe')}
        params['host'] = host
        if port is not None:
            params['port'] = port
        return params

    def is_read_only_server(self, session):
        if bool(int(session.scalar('SELECT @@read_only'))):
            return True
        # A cluster node outside the primary component takes no queries.
        return self.galera and session.scalar(galera.NODE_READY) != 'ON'

    def write_position(self, session):
        return session.scalar(POSITION[self._positions()])

    def replayed(self, session, position):
        kind = self._positions()
        if kind == 'galera':
            return int(session.scalar(POSITION[kind])) >= int(position)
        return session.scalar(REPLAYED[kind], (position,)) == 1

    def _positions(self):
        """How the server counts what it applied: a cluster's seqno,
        MariaDB's GTID position or MySQL's executed GTID set."""
        if self.galera:
            return 'galera'
        return 'mysql' if self.server and not self.server.mariadb \
            else 'mariadb'

    def describe(self, server=None):
        server = server or self.current_server()
        p = self.params if server is None else server.params
        where = ('socket=%s' % p['unix_socket'] if p.get('unix_socket')
                 else 'host=%s port=%s' % (p.get('host', 'localhost'),
                                           p.get('port', 3306)))
        flavour = self.server.flavour if self.server else 'MySQL'
        return '%s database (db=%s %s user=%s%s)' % (
            flavour, p.get('db', '<default>'), where,
            p.get('user', '<default>'), tls_label(p))

    def location(self):
        p = self.params
        where = p.get('unix_socket') or (p.get('host', 'localhost'),
                                         str(p.get('port', 3306)))
        return ('mysql', where, p.get('db'))

    def _connect_raw(self, server=None):
        driver = self.driver
        keepalive = Keepalive.for_options(self.options)
        params = dict(self.params if server is None else server.params)
        if keepalive is not None and 'connect_timeout' not in params:
            params['connect_timeout'] = keepalive.connect_timeout
        command = params.pop('password_command', None)
        if command is not None:
            params['passwd'] = run_password_command(command)
        try:
            conn = driver.connect(params)
        except driver.module.Error as e:
            if error_code(e) in CONNECT_ERRORS or isinstance(
                    e, driver.module.OperationalError):
                raise self._unavailable(e, server, params) from None
            raise
        if requires_tls(params) and not driver.encrypted(conn):
            conn.close()
            raise DatabaseUnavailable(
                'cannot connect to the %s: the connection is not encrypted '
                '(the server offers no TLS), and its ssl-mode requires it'
                % self.describe(server))
        if keepalive is not None:
            keepalive.apply(driver.fileno(conn))
        return conn

    def _unavailable(self, error, server=None, params=None):
        if params is None:
            params = self.params if server is None else server.params
        secrets = [params.get(key) for key in ('passwd', 'password')]
        return DatabaseUnavailable('cannot connect to the %s: %s' % (
            self.describe(server), scrub(error, filter(None, secrets))))

    def open_connection(self, for_store, server=None):
        conn = self._connect_raw(server)
        try:
            conn.autocommit(True)
        except self.driver.module.Error as e:
            # Accepted, then lost (a server restarting, say).
            conn.close()
            raise self._unavailable(e, server) from None
        session = MySQLSession(self, conn)
        session.server = server
        if self.galera and for_store:
            session.one_by_one = True
            session.defers_verbs = False
        if not for_store and hasattr(conn, 'reads_only'):
            # A load session's statements are consistent reads, which
            # wait for nobody: mysqlclient under gevent reads all their
            # results at once (see cooperative).
            conn.reads_only = True
        session.execute(ISOLATION[bool(for_store)])
        # An IN list of fewer than 200 oids was planned by diving into the
        # index once per value: with many revisions per object (history
        # kept, objects updated often) planning a 100-oid read took 70 ms,
        # running it 0.4 ms. The index statistics are as good for lookups
        # by key.
        # A metadata lock (held by a TRUNCATE or other DDL, say) is
        # waited for as long as a row lock, not the server's default of a
        # year.
        lock_wait = max(1, int(self.options.commit_lock_timeout))
        settings = ('SET SESSION eq_range_index_dive_limit = 1,'
                    ' SESSION lock_wait_timeout = %s')
        params = (lock_wait,)
        if for_store:
            settings += ', SESSION innodb_lock_wait_timeout = %s'
            params += (lock_wait,)
            if self.galera:
                # Locking reads, and the question whether a commit whose
                # connection was lost happened, see every commit the
                # cluster made before them.
                settings += ', SESSION wsrep_sync_wait = 1'
            network_timeout = self.options.network_timeout
            if network_timeout:
                # The server cannot be asked for keepalives: it ends a
                # session whose client vanished mid-commit (holding row
                # locks and the commit lock) once it has waited this long
                # for the client's next statement. Between commits an
                # idle store session ended so is reopened at its next use.
                settings += ', SESSION wait_timeout = %s'
                params += (max(10, int(2 * network_timeout)),)
        session.execute(settings, params)
        return session

    def prepare_store_session(self, session):
        session.execute(TEMP_STORE_DDL)

    def before_pack(self, session):
        session.fetchall(ANALYZE.format(
            tables=', '.join(self.packer.object_tables)))

    def is_permission_error(self, error):
        # command denied for a table; access denied to a database; needs
        # a privilege (CREATE TEMPORARY TABLES, say)
        return error_code(error) in (1142, 1143, 1044, 1227)

    def is_full_error(self, error):
        # The table is full (its tablespace cannot grow: disk full, or
        # innodb_data_file_path's max); disk full.
        return error_code(error) in (1114, 1021)

    def is_disconnect(self, session, error):
        module = self.driver.module
        code = error_code(error)
        return (isinstance(error, module.InterfaceError)
                or code in DISCONNECT_ERRORS
                or (self.galera and code in galera.NOT_READY_ERRORS))
