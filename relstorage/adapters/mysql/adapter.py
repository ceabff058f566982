"""The MySQL and MariaDB adapter: assembles this package's connector (in
session.py), schema, mover, packer, oid allocator and replication with the
parts of the kind of server its first connection finds (a single server,
or a Galera node: see server and galera)."""

from .. import replicas
from ..adapter import Adapter
from ..sql import SQL
from . import galera
from .drivers import select_driver
from .inspect import MySQLStatistics
from .mover import MySQLHFMover
from .mover import MySQLHPMover
from .oidallocator import MySQLOIDAllocator
from .packer import MySQLHFPacker
from .packer import MySQLHPPacker
from .replication import MySQLReplication
from .schema import TEMP_STORE_DDL
from .schema import MySQLSchema
from .schema import MySQLTypes
from .server import ServerInfo
from .server import SingleServer
from .session import MySQLConnector
from .tls import TLS_KEYS
from .upgrade import MySQLUpgrade
from .votes import MySQLVoteClaims

ANALYZE = SQL('ANALYZE TABLE {tables}')

#: The kinds of server an adapter may find, the first that recognizes the
#: server taken (see server).
SERVER_KINDS = (galera.GaleraNode, SingleServer)


class MySQLAdapter(Adapter):

    types = MySQLTypes
    schema_class = MySQLSchema
    hp_mover_class = MySQLHPMover
    hf_mover_class = MySQLHFMover
    hp_packer_class = MySQLHPPacker
    hf_packer_class = MySQLHFPacker
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
    store_begin_sql = 'START TRANSACTION'
    temp_store_emptied_by_commit = False
    # Not DELETE: an InnoDB temporary table keeps the rows it deleted.
    empty_temp_store_sql = 'TRUNCATE TABLE temp_store'

    def __init__(self, driver='auto', options=None, **params):
        from ...options import Options
        self.driver = select_driver(driver)
        self.cooperative = self.driver.cooperative
        self.server = None
        self.options = options if options is not None else Options()
        self.connector = MySQLConnector(self, params)
        self.replication = MySQLReplication(self)
        # The server's flavour decides some SQL; learn it before building
        # the shared pieces (from the first server that answers).
        self.replicas = replicas.Replicas.configure(self, self.options)
        servers = [None]
        if self.replicas is not None and self.replicas.rw is not None:
            servers = self.replicas.rw.servers
        version, kind = self.connector.probe(servers, SERVER_KINDS)
        self.server = ServerInfo(version, kind.label)
        #: What the kind of server decides (see server.SingleServer).
        self.kind = kind(self.server)
        self.locker_class = self.kind.locker_class
        self.pack_writer_class = self.kind.pack_writer_class
        self.load_begin_sql = self.kind.load_begin_sql
        super().__init__(self.options)

    supports_replicas = True

    def prepare_store_session(self, session):
        session.execute(TEMP_STORE_DDL)

    def before_pack(self, session):
        session.fetchall(ANALYZE.format(
            tables=', '.join(self.packer.object_tables)))

