"""The PostgreSQL adapter behind a transaction pooler (``pooler
transaction``, see pooler): nothing depends on a server session
surviving a transaction's end. Its parts are declared here, and
PostgreSQLAdapter makes this variant when told of such a pooler."""
import logging
import secrets

from ..mover import Mover
from ..packer import PACK_TABLES_TEMPLATE
from ..sql import SQL
from .locker import PostgreSQLLocker
from .mover import PostgreSQLHFMover
from .mover import PostgreSQLHPMover
from .packer import PostgreSQLHFPacker
from .packer import PostgreSQLHPPacker
from .pooler import DROP_LEASE
from .pooler import EMPTY_SCRATCH
from .pooler import LEASE_NAME
from .pooler import LEASE_SECONDS
from .pooler import TAKE_LEASE
from .pooler import LeaseKeeper
from .schema import POOLED_TEMP_STORE_DDL
from .session import LOCAL_BYTEA_OUTPUT
from .session import PostgreSQLConnector

log = logging.getLogger(__name__)

#: What each pooled transaction sets for itself, in the message that
#: begins it.
LOCK_TIMEOUT = SQL('SET LOCAL lock_timeout = {ms}')
#: Loads and polls are short index lookups (see PostgreSQLConnector.set_up).
LOAD_SETTINGS = ('SET LOCAL jit = off; '
                 'SET LOCAL max_parallel_workers_per_gather = 0')


def begin_statement(begin, lock_timeout_ms, *more):
    """*begin* followed by the settings of a pooled transaction."""
    return '; '.join((begin, LOCK_TIMEOUT.format(
        ms=str(int(lock_timeout_ms))), LOCAL_BYTEA_OUTPUT) + more)


#: A pooled snapshot may take new oids (nextval, which a READ ONLY
#: transaction refuses).
LOAD_BEGIN = 'BEGIN ISOLATION LEVEL REPEATABLE READ'


class PooledMoverMixin:
    """Loads without the prepared statement (a server session of
    another client may have it, or not)."""

    fetch_current = Mover.fetch_current


class PooledHPMover(PooledMoverMixin, PostgreSQLHPMover):
    pass


class PooledHFMover(PooledMoverMixin, PostgreSQLHFMover):
    pass


class PooledPackerMixin:
    """The scratch tables are the database's, unlogged: a temporary
    table would be gone, or be another client's, in the next
    transaction. Only the holder of the pack lock uses them."""

    scratch_ddl = tuple(ddl.format(kind='UNLOGGED')
                        for ddl in PACK_TABLES_TEMPLATE)


class PooledHPPacker(PooledPackerMixin, PostgreSQLHPPacker):
    pass


class PooledHFPacker(PooledPackerMixin, PostgreSQLHFPacker):
    pass


class PooledLocker(PostgreSQLLocker):
    """The pack lock as a lease (see the module's docstring): a session
    advisory lock would stay with whichever server session the pooler
    ran the statement on."""

    def try_pack_lock(self, session):
        token = secrets.token_hex(8)
        taken = session.fetchone(TAKE_LEASE, (LEASE_NAME, token,
                                              LEASE_SECONDS))
        if taken is None:
            return False
        keeper = session.pack_lease = LeaseKeeper(self.adapter, token)
        keeper.start()
        return True

    def begin_with_commit_lock(self, session, last_tid_sql, wait=0):
        # A pack's batch goes on only while the lease is its own.
        last = super().begin_with_commit_lock(session, last_tid_sql, wait)
        keeper = getattr(session, 'pack_lease', None)
        if keeper is not None and last is not self.BUSY:
            keeper.confirm(session)
        return last

    def release_pack_lock(self, session):
        keeper = getattr(session, 'pack_lease', None)
        if keeper is None:
            return
        keeper.stop()
        session.pack_lease = None
        if keeper.lost:
            return  # the scratch tables and the row are another pack's
        if session.table_exists('pack_gc'):
            session.execute(EMPTY_SCRATCH)
        session.execute(DROP_LEASE, (LEASE_NAME, keeper.token))


class PooledConnector(PostgreSQLConnector):
    """Sets nothing in a server session (each transaction makes its own
    settings), and listens for nothing: a LISTEN would stay with
    whichever server session the pooler ran it on."""

    may_listen = False

    def set_up(self, session, for_store, server):
        session.begin_sql = self.adapter.pooled_begin_sql


class PooledParts:
    """What the adapter behind a transaction pooler has instead of its
    own parts (see PostgreSQLAdapter.__new__)."""

    hp_mover_class = PooledHPMover
    hf_mover_class = PooledHFMover
    hp_packer_class = PooledHPPacker
    hf_packer_class = PooledHFPacker
    locker_class = PooledLocker
    connector_class = PooledConnector
    # A load session's snapshot holds a server session until it ends:
    # ended before the vote takes the store session's, and new oids taken
    # in the snapshot's transaction, each committing instance needs one
    # at a time, and commits never all wait for a server session that only
    # the others' snapshots hold. (Conflict resolution reads through the
    # store session.)
    requires_snapshot_end_at_vote = True
    oids_from_load_session = True

    def begin_statements(self, options):
        """Each transaction begins with its own settings (a store
        transaction creating the temp_store it drops at its end)."""
        timeout = options.commit_lock_timeout * 1000
        self.load_begin_sql = begin_statement(LOAD_BEGIN, timeout,
                                              LOAD_SETTINGS)
        self.store_begin_sql = begin_statement(
            self.store_begin_sql, timeout, POOLED_TEMP_STORE_DDL.strip())
        self.scratch_begin_sql = self.pooled_begin_sql = begin_statement(
            'BEGIN', timeout)
        if options.poll_interval:
            # Said once per adapter; polls keep the view for up to the
            # interval, as on a database that announces nothing.
            log.info('pooler transaction: no LISTEN through a transaction '
                     'pooler, so commits to the %s are not announced; '
                     'instances poll at most every poll-interval (%ss) and '
                     "may see other processes' commits that much later",
                     self.describe(), options.poll_interval)

    def prepare_store_session(self, session):
        pass  # each store transaction creates temp_store
