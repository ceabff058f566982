"""The PostgreSQL adapter: assembles this package's connector (in
session.py), schema, locker, mover, packer and replication with the
driver and the transaction pooler mode (pooled.py's parts behind a
transaction pooler)."""

from ..adapter import Adapter
from ..sql import SQL
from .votes import PostgreSQLVoteClaims
from .drivers import select_driver
from .dsn import RELSTORAGE4_KEYWORDS
from .dsn import TLS_KEYWORDS
from .dsn import make_dsn
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
from .session import PostgreSQLConnector
from .upgrade import PostgreSQLUpgrade

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

    connector_class = PostgreSQLConnector

    def __init__(self, dsn='', driver='auto', options=None, pooler='none',
                 password_command=None):
        from ...options import Options
        self.driver = select_driver(driver)
        self.cooperative = self.driver.cooperative
        #: none, session or transaction (see pooler).
        self.pooler = pooler_mode(pooler)
        self.options = options if options is not None else Options()
        self.connector = self.connector_class(
            self, dsn or '', password_command, self.pooler)
        self.begin_statements(self.options)
        self.replication = PostgreSQLReplication(self)
        super().__init__(self.options)

    def begin_statements(self, options):
        """Set the statements that begin transactions, where they depend
        on *options* (before the parts are made)."""

    supports_replicas = True

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
