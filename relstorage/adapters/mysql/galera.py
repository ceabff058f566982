"""MariaDB Galera: a cluster of nodes that all take writes.

A Galera node replicates each transaction at its COMMIT, and the cluster
*certifies* it: a transaction that changed a row another node changed in
a transaction ordered after what this one had seen is refused (error
1213 at COMMIT), and a local transaction holding a lock that a
replicated one needs is aborted (1213 at its next statement). GET_LOCK
names are local to a node, so the cluster needs locks of its own:

* the commit lock: GET_LOCK (committers on one node wait in line), then
  the ``commit`` row of ``cluster_lock``, locked for update; every
  transaction that held the lock bumps the row's serial just before its
  COMMIT. So any two commits from two nodes that overlap conflict, and
  one of them is refused whole: the cluster commits one at a time, and
  each commit read the newest tid (transaction ids stay unique and
  increasing, and become visible in the same order on every node).
* the pack lock and the schema-creation guard: leases in other rows of
  ``cluster_lock`` (a holder and an expiry), claimed in a transaction of
  their own, which certification lets only one node win.

Errors a refusal raises become ClusterConflict (a ConflictError: the
transaction is retried); a node that is not part of the primary
component (1047) is a lost connection, so that sessions move to the next
server of replica-conf. Reads wait until the node has applied what the
cluster committed before them (``wsrep_sync_wait``): store sessions for
every statement, load sessions when their snapshot begins.
"""
import logging
import secrets
import time

from ...exceptions import ClusterConflict
from ...exceptions import PackLockLost
from ...exceptions import SchemaError
from ..packwork import PackWriter
from ..sql import script
from .drivers import error_code
from .locker import GET_COMMIT_LOCK
from .locker import MySQLLocker
from .server import SingleServer
from .session import MySQLSession

log = logging.getLogger(__name__)

#: A transaction refused (certification) or aborted (to apply another
#: node's); a statement interrupted for the same reason.
CONFLICT_ERRORS = (1213, 1317)
#: Times a pack batch is done again when the cluster refuses its commit
#: (a commit on another node came first), and the pause before each.
BATCH_ATTEMPTS = 50
BATCH_RETRY_PAUSE = 0.05
#: The node is not in the primary component (WSREP has not yet prepared
#: node for application use), or lost it mid-statement.
NOT_READY_ERRORS = (1047, 1180)

CLUSTER_LOCK_DDL = """
CREATE TABLE IF NOT EXISTS cluster_lock (
    name        VARCHAR(16) NOT NULL PRIMARY KEY,
    holder      VARCHAR(64) NOT NULL DEFAULT '',
    expires     BIGINT NOT NULL DEFAULT 0,
    serial      BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB
"""
ENSURE_COMMIT_ROW = "INSERT IGNORE INTO cluster_lock (name) VALUES ('commit')"
LOCK_COMMIT_ROW = ("SELECT serial FROM cluster_lock WHERE name = 'commit' "
                   'FOR UPDATE')
COMMIT_ROW = "SELECT serial FROM cluster_lock WHERE name = 'commit'"
SCHEMA_VERSION = ("SELECT value FROM relstorage_meta "
                  "WHERE name = 'schema_version'")
BUMP_COMMIT_ROW = ("UPDATE cluster_lock SET serial = serial + 1 "
                   "WHERE name = 'commit'")
#: Claims the lease *name* for *holder* for *seconds*, when it is free,
#: expired or the holder's already (the holder column is assigned first:
#: the expiry follows it).
CLAIM = (
    'INSERT INTO cluster_lock (name, holder, expires) VALUES '
    '(%s, %s, UNIX_TIMESTAMP() + %s) ON DUPLICATE KEY UPDATE '
    'holder = IF(expires < UNIX_TIMESTAMP() OR holder = VALUES(holder), '
    'VALUES(holder), holder), '
    'expires = IF(holder = VALUES(holder), VALUES(expires), expires)')
HOLDER = 'SELECT holder FROM cluster_lock WHERE name = %s'
RELEASE = ("UPDATE cluster_lock SET holder = '', expires = 0 "
           'WHERE name = %s AND holder = %s')
#: Reads wait until the node has applied what the cluster committed.
SYNC_READS = 'SET SESSION wsrep_sync_wait = 1'
#: A load session's snapshot begins once the node has applied what the
#: cluster committed before it; its reads do not wait again.
LOAD_BEGIN = ('SET SESSION wsrep_sync_wait = 1; '
              'START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY; '
              'SET SESSION wsrep_sync_wait = 0')
#: Whether the node takes queries (it is in the primary component).
NODE_READY = ("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
              "WHERE VARIABLE_NAME = 'WSREP_READY'")
#: The seqno of the last transaction the node committed (the cluster's
#: order): a write position every node counts alike.
LAST_COMMITTED = ('SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS '
                  "WHERE VARIABLE_NAME = 'WSREP_LAST_COMMITTED'")

#: Seconds a pack's lease lasts without a batch renewing it: a pack
#: process that died holding it keeps other packs out that long.
PACK_LEASE = 300
#: Seconds between claims of a busy schema guard.
CLAIM_PAUSE = 0.1


def is_galera(cursor):
    """Whether the server *cursor* talks to is a Galera node with
    replication on."""
    cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
    row = cursor.fetchone()
    return bool(row) and str(row[1]).upper() == 'ON'


def conflict(session, error):
    """The ClusterConflict a driver *error* means, or None."""
    if error_code(error) not in CONFLICT_ERRORS:
        return None
    return ClusterConflict(
        'the cluster refused this transaction on %s: %s (another node '
        'committed a conflicting one first; nothing of it was committed)'
        % (session.describe(), str(error).strip().splitlines()[0]))


class GaleraSession(MySQLSession):
    """A session on a cluster node: the cluster's refusals are
    ClusterConflicts, and the leases it holds are kept by name."""

    def __init__(self, adapter, conn):
        super().__init__(adapter, conn)
        #: The leases of cluster_lock this session holds: name -> holder.
        self.leases = {}

    def translate_error(self, e):
        refused = conflict(self, e)
        if refused is not None:
            self.in_transaction = False
            self.pending = ''
            raise refused from e
        super().translate_error(e)


class GaleraStoreSession(GaleraSession):
    """A store session sends nothing but single statements (see
    MySQLSession.one_by_one)."""
    one_by_one = True
    defers_verbs = False


class GaleraLocker(MySQLLocker):
    """The commit lock, pack lock and schema guard of a cluster (see the
    module)."""

    def hold_commit_lock(self, session, last_tid_sql):
        timeout = self.adapter.options.commit_lock_timeout
        session.holds_commit_lock = True
        got, serial, last = session.first_values(
            script(GET_COMMIT_LOCK, LOCK_COMMIT_ROW, last_tid_sql),
            (timeout,))
        if got != 1:
            raise self.timeout_error()
        self._check_row(serial)
        return last

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        last = super().try_commit_lock(session, last_tid_sql, wait)
        if last is self.BUSY:
            return last
        self._check_row(session.scalar(LOCK_COMMIT_ROW))
        holder = session.leases.get('pack')
        if holder:
            # Only packs take the lock so; each batch renews the lease,
            # and goes on only while it is still this pack's.
            session.execute(CLAIM, ('pack', holder, PACK_LEASE))
            if session.scalar(HOLDER, ('pack',)) != holder:
                del session.leases['pack']  # another's now
                raise PackLockLost(
                    'the pack lock of the %s was lost to another pack: '
                    "this pack's lease lapsed (it was stopped for longer "
                    'than %s s) and another pack took it; this pack stops '
                    'here, removing nothing more, and the other one '
                    'finishes the job' % (self.adapter.describe(), PACK_LEASE))
        return last

    def _check_row(self, serial):
        if serial is None:
            raise SchemaError(
                'the cluster_lock table of %s has no commit row: open a '
                'storage with create-schema true once on this cluster'
                % self.adapter.describe())

    def end_commit(self):
        return [(BUMP_COMMIT_ROW, ())] + super().end_commit()

    def try_pack_lock(self, session):
        if not super().try_pack_lock(session):
            return False
        holder = self._claim(session, 'pack', PACK_LEASE)
        if holder is None:
            super().release_pack_lock(session)
            return False
        session.leases['pack'] = holder
        return True

    def release_pack_lock(self, session):
        self._release(session, 'pack', super().release_pack_lock)

    def hold_schema_lock(self, session):
        if self._schema_complete(session):
            # Nothing will be created: the node's own lock will do (many
            # processes opening at once need not take turns cluster-wide).
            super().hold_schema_lock(session)
            return
        # DDL commits the transaction begun for the schema: the table and
        # the commit row are there for good, whoever creates the rest.
        session.execute(CLUSTER_LOCK_DDL)
        session.execute(ENSURE_COMMIT_ROW)
        super().hold_schema_lock(session)
        timeout = self.adapter.options.commit_lock_timeout
        deadline = time.monotonic() + timeout
        lease = int(timeout) + 60
        while True:
            holder = self._claim(session, 'schema', lease)
            if holder is not None:
                session.leases['schema'] = holder
                break
            if time.monotonic() > deadline:
                super().release_schema_lock(session)
                raise self.schema_lock_timeout()
            time.sleep(CLAIM_PAUSE)
        session.execute(self.adapter.store_begin_sql)

    def _schema_complete(self, session):
        """Whether the schema and the commit row are all there."""
        return (session.table_exists('relstorage_meta')
                and session.scalar(SCHEMA_VERSION) is not None
                and session.table_exists('cluster_lock')
                and session.scalar(COMMIT_ROW) is not None)

    def release_schema_lock(self, session):
        self._release(session, 'schema', super().release_schema_lock)

    def _release(self, session, name, release_local):
        """Give up the lease *name* this session holds, then the node's
        own lock (*release_local*)."""
        holder = session.leases.pop(name, None)
        try:
            if holder:
                session.execute(RELEASE, (name, holder))
        finally:
            release_local(session)

    def _claim(self, session, name, seconds):
        """Claim the lease *name* (in a transaction of its own); the
        holder's token, or None when another holds it."""
        holder = secrets.token_hex(16)
        try:
            session.execute(CLAIM, (name, holder, seconds))
        except ClusterConflict:
            return None  # claimed by another node at the same time
        if session.scalar(HOLDER, (name,)) != holder:
            return None
        return holder


class GaleraPackWriter(PackWriter):
    """A pack's session on a node: a batch the cluster refuses (nothing
    of it happened) is done again, up to BATCH_ATTEMPTS times."""

    def run_batch(self, attempt):
        attempts = 0
        while True:
            try:
                return attempt()
            except ClusterConflict:
                self.abort_batch()
                attempts += 1
                if attempts >= BATCH_ATTEMPTS:
                    raise
                log.debug('pack batch refused by the cluster; again '
                          '(attempt %d)', attempts + 1)
                time.sleep(BATCH_RETRY_PAUSE)


class GaleraNode(SingleServer):
    """A node of a Galera cluster (see the module)."""

    label = 'Galera'
    locker_class = GaleraLocker
    session_class = GaleraSession
    store_session_class = GaleraStoreSession
    pack_writer_class = GaleraPackWriter
    load_begin_sql = LOAD_BEGIN
    # Only the row just inserted: two nodes deleting the same rows would
    # conflict.
    oid_delete_sql = 'DELETE FROM new_oid WHERE zoid = %s'
    # Locking reads, and the question whether a commit whose connection
    # was lost happened, see every commit the cluster made before them.
    store_settings = ('SESSION wsrep_sync_wait = 1',)
    disconnect_errors = NOT_READY_ERRORS

    recognizes = staticmethod(is_galera)

    def takes_writes(self, session):
        # A node outside the primary component takes no queries.
        return session.scalar(NODE_READY) == 'ON'

    def positions(self):
        return 'galera'

    def write_position(self, session):
        # The cluster's order, which every node counts alike.
        return session.scalar(LAST_COMMITTED)

    def replayed(self, session, position):
        return int(session.scalar(LAST_COMMITTED)) >= int(position)
