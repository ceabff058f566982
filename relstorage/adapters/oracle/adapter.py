"""What Oracle does differently: named binds, a sequence for oids,
DBMS_LOCK user locks as the commit and pack locks (LOCK TABLE where the
user may not execute DBMS_LOCK), ``SELECT ... FOR UPDATE WAIT`` row locks,
MERGE for upserts, a global temporary table for staged rows, BLOB columns,
and read-only transactions as load snapshots."""
import logging
import math

from ...exceptions import CommitLockTimeout
from ...exceptions import ConfigurationError
from ...exceptions import RelStorageError
from ...options import warn_ignored
from ..adapter import OID_BLOCK
from ..adapter import Adapter
from ..inspect import ServerStatistics
from ..keepalive import Keepalive
from ..locker import Locker
from ..mover import HistoryFreeMover
from ..mover import HistoryPreservingMover
from ..oidallocator import SequenceOIDAllocator
from ..packer import PACK_TABLES
from ..packer import HistoryFreePacker
from ..packer import HistoryPreservingPacker
from ..schema import Schema
from ..schema import Types
from ..session import Session
from ..sql import SQL
from ..sql import EMPTY_TABLE
from ..sql import named_binds
from .drivers import DISCONNECT_ERRORS
from .drivers import DSN
from .drivers import LOCK_ERRORS
from .drivers import PRIVILEGE_ERRORS
from .drivers import bounded_connect
from .drivers import connect_error
from .drivers import error_codes
from .drivers import is_full
from .drivers import select_driver

log = logging.getLogger(__name__)

#: DBMS_LOCK user lock ids run from 0 to 2**30 - 1; the pack lock is the
#: commit lock's id (the commit-lock-id option) plus half of that range.
USER_LOCK_IDS = 1 << 30
PACK_LOCK_OFFSET = 1 << 29

CREATE_SEQUENCE = ('CREATE SEQUENCE zoid_seq START WITH 1 INCREMENT BY %d'
                   % OID_BLOCK)

#: Staged rows: every session sees only its own, and COMMIT empties it.
TEMP_STORE_DDL = """
CREATE GLOBAL TEMPORARY TABLE temp_store (
    zoid        NUMBER(20) NOT NULL,
    prev_tid    NUMBER(20) NOT NULL,
    state       BLOB,
    blob_id     NUMBER(20)
) ON COMMIT DELETE ROWS
"""

#: The pack's scratch tables (see relstorage.adapters.packer): rows are
#: each session's own and last until it ends or deletes them. Created by
#: the first pack that needs them. pack_reached has the depth at which
#: each object was reached, for the level by level walk (OraclePackerMixin).
PACK_TABLES_DDL = tuple(SQL(
    'CREATE GLOBAL TEMPORARY TABLE {table} ({cols}) ON COMMIT PRESERVE ROWS'
    ).format(table=table, cols=cols) for table, cols in (
        ('pack_root', 'zoid NUMBER(20) NOT NULL PRIMARY KEY'),
        ('pack_ref', 'zoid NUMBER(20) NOT NULL, to_zoid NUMBER(20) NOT NULL, '
                     'PRIMARY KEY (zoid, to_zoid)'),
        ('pack_reached', 'zoid NUMBER(20) NOT NULL PRIMARY KEY, '
                         'depth NUMBER(10) NOT NULL'),
        ('pack_gc', 'zoid NUMBER(20) NOT NULL PRIMARY KEY')))

#: Tables locked whole (LOCK TABLE) when DBMS_LOCK may not be executed.
LOCK_TABLES = ('commit_lock', 'pack_lock')
LOCK_TABLE_DDL = SQL(
    'CREATE TABLE {table} (id NUMBER(1) NOT NULL PRIMARY KEY)')
#: No DROP TABLE IF EXISTS before Oracle 23.
DROP_TABLE_PURGE = SQL('DROP TABLE {table} PURGE')

#: Ends the transaction before (ROLLBACK) and begins a read-only one, whose
#: queries all see the database as it was when it began: one round trip.
BEGIN_SNAPSHOT = 'BEGIN ROLLBACK; SET TRANSACTION READ ONLY; END;'

#: The commit lock (released by COMMIT or ROLLBACK) and the pack lock
#: (held until released, or until the session ends).
REQUEST_LOCK = SQL(
    'BEGIN :status := DBMS_LOCK.REQUEST(id => :lock_id, '
    'lockmode => DBMS_LOCK.X_MODE, timeout => :timeout, '
    'release_on_commit => {on_commit}); END;')
REQUEST_COMMIT_LOCK = REQUEST_LOCK.format(on_commit='TRUE')
REQUEST_PACK_LOCK = REQUEST_LOCK.format(on_commit='FALSE')
RELEASE_LOCK = 'BEGIN :status := DBMS_LOCK.RELEASE(id => :lock_id); END;'

#: A PL/SQL block that does not compile.
PLSQL_COMPILATION_ERROR = 'ORA-06550'

#: The commit lock without DBMS_LOCK (WAIT takes whole seconds, no bind).
LOCK_COMMIT_TABLE = SQL('LOCK TABLE commit_lock IN EXCLUSIVE MODE {wait}')

#: DBMS_LOCK.REQUEST's answers.
LOCK_GRANTED, LOCK_TIMEOUT, LOCK_DEADLOCK, LOCK_OWNED = 0, 1, 2, 4



class OracleStatistics(ServerStatistics):

    kind = 'Oracle'

    def version(self, session):
        # The driver has it from the handshake.
        return '%s %s' % (self.kind, session.conn.version)


class OracleTypes(Types):
    bigint = 'NUMBER(20)'
    blob = 'BLOB'
    bool = 'NUMBER(1)'
    text = 'VARCHAR2(4000)'
    true = '1'
    false = '0'
    # Oracle stores a zero-length RAW or BLOB as NULL.
    bytes_not_null = ''


class OracleSession(Session):
    """Transactions begin with their first statement (there is no BEGIN);
    COMMIT and ROLLBACK are the connection's calls."""

    def translate(self, stmt):
        return named_binds(stmt)

    def execute(self, stmt, params=()):
        if stmt == 'COMMIT' or stmt == 'ROLLBACK':
            self._end(stmt)
            return self.cursor
        return super().execute(stmt, params)

    def _end(self, verb):
        with self.lock:
            conn = self.conn
            if conn is None:
                self.lost()
            self.round_trips += 1
            try:
                if verb == 'COMMIT':
                    conn.commit()
                else:
                    conn.rollback()
            except Exception as e:
                self.translate_error(e)
                raise

    def begin(self, sql=None):
        if sql and sql != 'BEGIN':
            self.execute(sql)
        self.in_transaction = True

    def restart(self, begin_sql):
        # The snapshot block ends the transaction before it.
        self.begin(begin_sql)

    def table_exists(self, name):
        return bool(self.scalar(
            'SELECT COUNT(*) FROM user_tables WHERE table_name = %s',
            (name.upper(),)))

    def sequence_exists(self, name):
        return bool(self.scalar(
            'SELECT COUNT(*) FROM user_sequences WHERE sequence_name = %s',
            (name.upper(),)))

    def call_status(self, block, **binds):
        """Run the PL/SQL *block*, which sets ``:status``; return it."""
        with self.lock:
            status = self.live_cursor().var(int)
            binds['status'] = status
            self.execute(block, binds)
            return status.getvalue()


class OracleSchema(Schema):

    extra_ddl = (CREATE_SEQUENCE, TEMP_STORE_DDL) + tuple(
        LOCK_TABLE_DDL.format(table=table) for table in LOCK_TABLES)

    def drop_table(self, session, table):
        # No DROP TABLE IF EXISTS before Oracle 23.
        if session.table_exists(table):
            session.execute(DROP_TABLE_PURGE.format(table=table))

    def drop(self, session):
        super().drop(session)
        for table in ('temp_store',) + LOCK_TABLES + PACK_TABLES:
            self.drop_table(session, table)
        if session.sequence_exists('zoid_seq'):
            session.execute('DROP SEQUENCE zoid_seq')


class OraclePackerMixin:
    """The scratch tables are global temporary tables, created once; a
    recursive query may not use UNION (only UNION ALL, which would visit
    a shared object once per path to it), so the roots' reach is found a
    level at a time."""

    def start_graph(self, session):
        for table, ddl in zip(PACK_TABLES, PACK_TABLES_DDL):
            if not session.table_exists(table):
                session.execute(ddl)
        for table in PACK_TABLES:
            session.execute(EMPTY_TABLE.format(table=table))

    def mark(self, session):
        session.execute('INSERT INTO pack_reached (zoid, depth) '
                        'SELECT zoid, 0 FROM pack_root')
        depth = 0
        while session.execute(
                'INSERT INTO pack_reached (zoid, depth) SELECT DISTINCT '
                'p.to_zoid, %s FROM pack_ref p JOIN pack_reached r ON '
                'p.zoid = r.zoid WHERE r.depth = %s AND NOT EXISTS (SELECT '
                '1 FROM pack_reached q WHERE q.zoid = p.to_zoid)',
                (depth + 1, depth)).rowcount:
            depth += 1


class OracleHPPacker(OraclePackerMixin, HistoryPreservingPacker):
    pass


class OracleHFPacker(OraclePackerMixin, HistoryFreePacker):
    pass


#: Oracle's row-lock clause waiting at most some seconds.
LOCK_WAIT = SQL(' FOR UPDATE WAIT {seconds}')


class OracleLocker(Locker):
    """Oracle has no shared row locks: readCurrent rows are locked FOR
    UPDATE too (a reader of the same object then waits for another's
    commit, never longer than commit-lock-timeout)."""

    def __init__(self, adapter, mover):
        self.wait = int(math.ceil(adapter.options.commit_lock_timeout))
        self.exclusive_clause = self.shared_clause = (
            LOCK_WAIT.format(seconds=str(self.wait)) if self.wait
            else ' FOR UPDATE NOWAIT')
        super().__init__(adapter, mover)
        lock_id = adapter.options.commit_lock_id % USER_LOCK_IDS
        self.commit_lock_id = lock_id
        self.pack_lock_id = (lock_id + PACK_LOCK_OFFSET) % USER_LOCK_IDS

    def is_lock_error(self, error):
        return any(code in LOCK_ERRORS for code in error_codes(error))

    def _request(self, session, block, lock_id, timeout):
        """DBMS_LOCK.REQUEST's status, or None when this user may not
        execute DBMS_LOCK (then noted, and the LOCK TABLE fallback used
        from now on)."""
        adapter = self.adapter
        if adapter.dbms_lock is False:
            return None
        try:
            status = session.call_status(block, lock_id=lock_id,
                                         timeout=timeout)
        except adapter.driver.Error as e:
            # The block is fixed text: it fails to compile (ORA-06550, a
            # PLS-00201 within) only where DBMS_LOCK cannot be seen.
            if PLSQL_COMPILATION_ERROR not in error_codes(e):
                raise
            adapter.dbms_lock = False
            log.warning(
                'the user of the %s may not execute DBMS_LOCK (missing '
                'privilege: GRANT EXECUTE ON SYS.DBMS_LOCK TO %s); the '
                'commit and pack locks fall back to LOCK TABLE, which '
                'waits in whole seconds', adapter.describe(),
                adapter.user or '<user>')
            return None
        adapter.dbms_lock = True
        if status == LOCK_DEADLOCK:
            raise CommitLockTimeout(
                'taking the commit lock of %s deadlocked; try again'
                % adapter.describe())
        if status not in (LOCK_GRANTED, LOCK_OWNED, LOCK_TIMEOUT):
            raise RelStorageError(
                'DBMS_LOCK.REQUEST(%d) answered %s in %s'
                % (lock_id, status, adapter.describe()))
        return status

    def _take(self, session, timeout):
        """Take the commit lock within *timeout* seconds (whole seconds
        for Oracle); False if busy."""
        wait = int(math.ceil(timeout))
        status = self._request(session, REQUEST_COMMIT_LOCK,
                               self.commit_lock_id, wait)
        if status is not None:
            return status != LOCK_TIMEOUT
        try:
            session.execute(LOCK_COMMIT_TABLE.format(
                wait='WAIT %d' % wait if wait else 'NOWAIT'))
        except self.adapter.driver.Error as e:
            if self.is_lock_error(e):
                return False
            raise
        return True

    def hold_commit_lock(self, session, last_tid_sql):
        if not self._take(session, self.wait):
            raise self.timeout_error()
        # Read committed: this query sees every commit made before the lock
        # was granted.
        return session.scalar(last_tid_sql)

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        if not self._take(session, max(0, wait)):
            return self.BUSY
        return session.scalar(last_tid_sql)

    def try_pack_lock(self, session):
        status = self._request(session, REQUEST_PACK_LOCK,
                               self.pack_lock_id, 0)
        if status is not None:
            return status != LOCK_TIMEOUT
        # A table lock lasts until its transaction ends, and a pack commits
        # many times: the lock is held by a connection of its own that
        # never commits, closed with the pack's session.
        holder = self.adapter.connect(for_store=True)
        try:
            holder.execute('LOCK TABLE pack_lock IN EXCLUSIVE MODE NOWAIT')
        except self.adapter.driver.Error as e:
            holder.close()
            if self.is_lock_error(e):
                return False
            raise
        session.pack_lock_holder = holder
        session.on_close.append(holder.close)
        return True

    def release_pack_lock(self, session):
        holder = getattr(session, 'pack_lock_holder', None)
        if holder is not None:
            session.pack_lock_holder = None
            holder.close()
            return
        session.call_status(RELEASE_LOCK, lock_id=self.pack_lock_id)


#: Oracle's upsert of the rows of a SELECT: a MERGE on the key.
MERGE = SQL('MERGE INTO {table} o USING ({select}) t '
            'ON (o.{key} = t.{key}) '
            'WHEN MATCHED THEN UPDATE SET {sets} '
            'WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({values})')
MERGE_SET = SQL('o.{col} = t.{col}')
MERGE_VALUE = SQL('t.{col}')


class OracleMoverMixin:
    state_length_clause = 'COALESCE(DBMS_LOB.GETLENGTH(state), 0)'
    chunk_length_clause = 'DBMS_LOB.GETLENGTH(chunk)'
    no_table = ' FROM DUAL'

    def upsert_select(self, table, key, cols, select_sql):
        others = [col for col in cols if col != key]
        return MERGE.format(
            table=table, select=select_sql, key=key,
            sets=', '.join(MERGE_SET.format(col=col) for col in others),
            cols=', '.join(cols),
            values=', '.join(MERGE_VALUE.format(col=col) for col in cols))


class OracleHPMover(OracleMoverMixin, HistoryPreservingMover):
    pass


class OracleHFMover(OracleMoverMixin, HistoryFreeMover):
    pass


class OracleOIDAllocator(SequenceOIDAllocator):

    next_values_sql = (
        'SELECT zoid_seq.NEXTVAL FROM DUAL CONNECT BY LEVEL <= %s')

    def raise_to(self, max_oid):
        # A sequence is moved only by DDL, which would commit the
        # transaction it runs in: raised now, on a connection of its
        # own (raising it early is harmless).
        session = self.adapter.connect(for_store=True)
        try:
            self.move_past(session, max_oid)
        finally:
            session.close()
        return []

    def move_past(self, session, max_oid):
        """Make every later block start above *max_oid*. Other processes
        taking values meanwhile get larger ones: still unique."""
        current = session.scalar('SELECT zoid_seq.NEXTVAL FROM DUAL')
        if current > max_oid:
            return
        step = -(-(max_oid + 1 - current) // OID_BLOCK) * OID_BLOCK
        session.execute('ALTER SEQUENCE zoid_seq INCREMENT BY %d' % step)
        try:
            session.scalar('SELECT zoid_seq.NEXTVAL FROM DUAL')
        finally:
            session.execute('ALTER SEQUENCE zoid_seq INCREMENT BY %d'
                            % OID_BLOCK)

    def reset(self, session):
        session.execute('DROP SEQUENCE zoid_seq')
        session.execute(CREATE_SEQUENCE)


class OracleAdapter(Adapter):

    types = OracleTypes
    schema_class = OracleSchema
    statistics_class = OracleStatistics
    database_name = 'Oracle'

    uri_keys = ('driver', 'user', 'password', 'dsn', 'twophase')

    @classmethod
    def section_from_uri(cls, uri):
        """``oracle://user:password@host:port/service``: an Easy Connect
        string, host[:port][/service]; or RelStorage 4's
        ``oracle://?user=...&password=...&dsn=...``."""
        dsn = (uri.host or '') + (':%d' % uri.port if uri.port else '') + (
            uri.path if uri.path.strip('/') else '')
        keys = uri.keys
        if 'twophase' in keys:
            warn_ignored('twophase', 'a commit here is one transaction on '
                                     'one server')
        section = {}
        for key, value in (('user', uri.user), ('password', uri.password),
                           ('dsn', dsn or None)):
            if value and keys.get(key) and keys[key] != value:
                raise ConfigurationError(
                    'oracle URI %s gives %s twice (in the address and the '
                    'query): give it once' % (uri.redacted, key))
            section[key] = value or keys.get(key)
        return section
    hp_mover_class = OracleHPMover
    hf_mover_class = OracleHFMover
    hp_packer_class = OracleHPPacker
    hf_packer_class = OracleHFPacker
    locker_class = OracleLocker
    oid_allocator_class = OracleOIDAllocator
    load_begin_sql = BEGIN_SNAPSHOT
    # Read committed (Oracle's default) begins with the first statement.
    store_begin_sql = 'BEGIN'

    def __init__(self, user=None, password=None, dsn=None, driver='auto',
                 options=None):
        from ...options import Options
        if not dsn:
            raise ConfigurationError(
                'dsn: required for <oracle> (an Easy Connect string such as '
                'db.example.org:1521/ORCLPDB1, or a TNS alias)')
        self.driver = select_driver(driver)
        self.user = user
        self.password = password
        self.dsn = DSN(dsn)
        #: Whether this user may execute DBMS_LOCK (None: not known yet).
        self.dbms_lock = None
        super().__init__(options if options is not None else Options())
        self.keepalive = Keepalive.for_options(self.options)

    def describe(self, server=None):
        return 'Oracle database (%s user=%s)' % (self.dsn.describe(),
                                                 self.user_name())

    def user_name(self):
        """The user, as the section or the DSN (``user/password@``) names
        it; never a password (cx_Oracle took ``user/password`` as the
        user)."""
        return (self.user or self.dsn.user or '<none>').split('/')[0]

    def location(self):
        # Each Oracle user has a schema of its own.
        return ('oracle',) + self.dsn.location() + (
            (self.user or self.dsn.user or '').upper(),)

    def open_connection(self, for_store, server=None):
        driver = self.driver
        keepalive = self.keepalive
        seconds = keepalive.timeout if keepalive is not None else None
        error = None
        try:
            conn = bounded_connect(
                lambda: driver.connect(self.user, self.password,
                                       self.dsn.text, keepalive),
                seconds, self.describe)
        except (driver.Error, OSError) as e:
            error = connect_error(e, self.dsn.describe(), self.user_name(),
                                  (self.password, self.dsn.password))
        if error is not None:
            # (Raised outside the handler: the driver's error is not its
            # context.)
            raise error
        # Each call (one round trip) gets an answer within network-timeout,
        # or within it plus commit-lock-timeout, for calls that wait for a
        # lock.
        call_timeout_ms = 0
        if keepalive is not None:
            call_timeout_ms = int(1000 * (keepalive.timeout
                                          + self.options.commit_lock_timeout))
        try:
            driver.setup(conn, call_timeout_ms)
        except Exception:
            conn.close()
            raise
        return OracleSession(self, conn)

    def is_permission_error(self, error):
        return any(code in PRIVILEGE_ERRORS for code in error_codes(error))

    def is_full_error(self, error):
        return is_full(error)

    def is_disconnect(self, session, error):
        if isinstance(error, self.driver.module.InterfaceError):
            return True
        return any(code in DISCONNECT_ERRORS for code in error_codes(error))

