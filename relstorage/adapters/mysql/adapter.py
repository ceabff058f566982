"""What MySQL and MariaDB do differently: InnoDB tables, an AUTO_INCREMENT
table for oids, GET_LOCK as the commit lock (released right after COMMIT
and on every rollback), ON DUPLICATE KEY upserts, and a consistent-snapshot
read-only transaction for loads."""
import logging

from ...exceptions import DatabaseUnavailable
from .. import replicas
from ..adapter import Adapter
from ..credentials import command_argv
from ..credentials import run_password_command
from ..keepalive import Keepalive
from ..redact import scrub
from ..sql import SQL
from . import galera
from .drivers import CONNECT_ERRORS
from .drivers import error_code
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
from .session import ISOLATION
from .tls import TLS_KEYS
from .tls import requires_tls
from .tls import tls_label
from .upgrade import MySQLUpgrade
from .votes import MySQLVoteClaims

log = logging.getLogger(__name__)

ANALYZE = SQL('ANALYZE TABLE {tables}')
#: What a new session sets (``SESSION name = value`` items).
SETTINGS = SQL('SET {settings}')

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
        self.params = {k: v for k, v in params.items() if v is not None}
        self.driver.translate(self.params)  # refuse unsupported options now
        if 'password_command' in self.params:
            command_argv(self.params['password_command'])
        self.server = None
        options = options if options is not None else Options()
        self.options = options
        self.replication = MySQLReplication(self)
        # The server's flavour decides some SQL; learn it before building
        # the shared pieces (from the first server that answers).
        self.replicas = replicas.Replicas.configure(self, options)
        probe = self._probe()
        try:
            cursor = probe.cursor()
            cursor.execute('SELECT VERSION()')
            version = cursor.fetchone()[0]
            kind = next(kind for kind in SERVER_KINDS
                        if kind.recognizes(cursor))
        except self.driver.module.Error as e:
            # Accepted, then lost (a server restarting, say).
            raise self._unavailable(e) from None
        finally:
            probe.close()
        self.server = ServerInfo(version, kind.label)
        #: What the kind of server decides (see server.SingleServer).
        self.kind = kind(self.server)
        self.locker_class = self.kind.locker_class
        self.pack_writer_class = self.kind.pack_writer_class
        self.load_begin_sql = self.kind.load_begin_sql
        super().__init__(options)

    supports_replicas = True

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
        session = (self.kind.store_session_class if for_store
                   else self.kind.session_class)(self, conn)
        session.server = server
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
        settings = ['SESSION eq_range_index_dive_limit = 1',
                    'SESSION lock_wait_timeout = %s']
        params = (lock_wait,)
        if for_store:
            settings.append('SESSION innodb_lock_wait_timeout = %s')
            params += (lock_wait,)
            settings.extend(self.kind.store_settings)
            network_timeout = self.options.network_timeout
            if network_timeout:
                # The server cannot be asked for keepalives: it ends a
                # session whose client vanished mid-commit (holding row
                # locks and the commit lock) once it has waited this long
                # for the client's next statement. Between commits an
                # idle store session ended so is reopened at its next use.
                settings.append('SESSION wait_timeout = %s')
                params += (max(10, int(2 * network_timeout)),)
        session.execute(SETTINGS.format(settings=', '.join(settings)),
                        params)
        return session

    def prepare_store_session(self, session):
        session.execute(TEMP_STORE_DDL)

    def before_pack(self, session):
        session.fetchall(ANALYZE.format(
            tables=', '.join(self.packer.object_tables)))

