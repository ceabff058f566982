"""The PostgreSQL adapter: assembles this package's session, schema,
locker, mover and packer with the driver, the dsn (and its password
command), the transaction pooler mode, replicas and the connection's
bounds; opens connections and sets each session up."""
import logging

from ...exceptions import ConfigurationError
from ...exceptions import DatabaseUnavailable
from ..adapter import Adapter
from ..credentials import command_argv
from ..credentials import run_password_command
from ..keepalive import Keepalive
from ..redact import scrub
from ..sql import SQL
from ..sql import script
from .votes import PostgreSQLVoteClaims
from . import pooler
from .drivers import select_driver
from .dsn import RELSTORAGE4_KEYWORDS
from .dsn import TLS_KEYWORDS
from .dsn import describe_dsn
from .dsn import dsn_location
from .dsn import make_dsn
from .dsn import parse_dsn
from .dsn import scrub_dsn
from .inspect import PostgreSQLStatistics
from .locker import PostgreSQLLocker
from .mover import PostgreSQLHFMover
from .mover import PostgreSQLHPMover
from .oidallocator import PostgreSQLOIDAllocator
from .packer import PostgreSQLHFPacker
from .packer import PostgreSQLHPPacker
from .replication import PostgreSQLReplication
from .pooled import PooledParts
from .pooler import pooler_mode
from .schema import TEMP_STORE_DDL
from .schema import PostgreSQLSchema
from .session import KEEPALIVE_SETUP
from .session import LISTENING_LOAD_SETUP
from .session import LOAD_SETUP
from .session import NOTIFY_COMMIT
from .session import SESSION_SETUP
from .session import WRITER_SETUP
from .session import PostgreSQLSession
from .session import PsycopgSession
from .upgrade import PostgreSQLUpgrade

log = logging.getLogger(__name__)

ANALYZE = SQL('ANALYZE {tables}')
#: Those of a list of tables (of the current schema) never analyzed, or
#: with more than a tenth of their rows changed since.
STALE_STATISTICS = (
    'SELECT relname FROM pg_stat_user_tables WHERE schemaname = '
    'current_schema() AND relname = ANY(%s) AND (COALESCE(last_analyze, '
    'last_autoanalyze) IS NULL OR n_mod_since_analyze > 50 + 0.1 * '
    'n_live_tup) ORDER BY relname')


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

    def __new__(cls, dsn='', driver='auto', options=None, pooler='none',
                password_command=None):
        # Behind a transaction pooler, the variant whose parts leave
        # nothing in a server session.
        if cls is PostgreSQLAdapter and pooler_mode(pooler) == 'transaction':
            cls = TransactionPooledAdapter
        return super().__new__(cls)

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
        options = options if options is not None else Options()
        self.begin_statements(options)
        #: Whether load sessions LISTEN for commits.
        self.listens = bool(options.poll_interval) and (
            self.pooler != 'transaction')
        #: Whether open() still has to look for a transaction pooler.
        self.pooler_unchecked = self.pooler == 'none'
        # A misspelt keyword, say: named now, not at the first connect.
        self.check_dsn(self.dsn, 'dsn: ')
        self.replication = PostgreSQLReplication(self)
        super().__init__(options)
        self.keepalive = Keepalive.for_options(self.options)
        #: libpq keywords the dsn leaves to network-timeout.
        given = parse_dsn(self.dsn)
        self.bounds = {key: value for key, value in self.keepalive_keywords()
                       if key not in given}

    def begin_statements(self, options):
        """Set the statements that begin transactions, where they depend
        on *options* (before the parts are made)."""

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
        self.set_up(session, for_store, server)
        return session

    def set_up(self, session, for_store, server):
        """What a new session sets for as long as it lasts."""
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
        session.execute(TEMP_STORE_DDL)

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



class TransactionPooledAdapter(PooledParts, PostgreSQLAdapter):
    """PostgreSQL behind a transaction pooler (``pooler transaction``):
    the parts of pooled, which leave nothing in a server session."""
