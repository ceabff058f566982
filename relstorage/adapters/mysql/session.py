"""MySQL sessions: how they open (the driver's keywords, a password
command, TLS required where ssl-mode says so, the socket's keepalives)
and what each sets then (the isolation level by whether it stores, the
lock waits, a writer's wait_timeout), and several statements per message
with each result read in turn."""
from zope.interface import implementer

from ...exceptions import DatabaseUnavailable
from ..components import IConnector
from ..credentials import command_argv
from ..credentials import run_password_command
from ..keepalive import Keepalive
from ..redact import scrub
from ..session import Session
from .drivers import CONNECT_ERRORS
from .drivers import DISCONNECT_ERRORS
from .drivers import error_code
from ..sql import SQL
from .tls import requires_tls
from .tls import tls_label


#: A session's isolation level, by whether it stores.
ISOLATION_LEVEL = SQL('SET SESSION TRANSACTION ISOLATION LEVEL {level}')
ISOLATION = {True: ISOLATION_LEVEL.format(level='READ COMMITTED'),
             False: ISOLATION_LEVEL.format(level='REPEATABLE READ')}
#: Set before a stream: the server sends a stream's rows as the client
#: reads them, and gives up on a client that read nothing for
#: net_write_timeout (60 s by default), while a walk's caller may spend
#: longer than that on the rows it has (zodbupdate committing what it
#: converted). A client that is gone closes its socket, which ends the
#: statement at once.
STREAM_SETUP = 'SET SESSION net_write_timeout = 86400'
#: What a new session sets (``SESSION name = value`` items).
SETTINGS = SQL('SET {settings}')


class MySQLSession(Session):

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

    def is_permission_error(self, error):
        # command denied for a table; access denied to a database; needs
        # a privilege (CREATE TEMPORARY TABLES, say)
        return error_code(error) in (1142, 1143, 1044, 1227)

    def is_full_error(self, error):
        # The table is full (its tablespace cannot grow: disk full, or
        # innodb_data_file_path's max); disk full.
        return error_code(error) in (1114, 1021)

    def is_disconnect(self, error):
        adapter = self.adapter
        code = error_code(error)
        return (isinstance(error, adapter.driver.module.InterfaceError)
                or code in DISCONNECT_ERRORS
                or code in adapter.kind.disconnect_errors)

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
                self.count_round_trip(verbs)
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

    def stream_cursor(self):
        return self.adapter.driver.streaming_cursor(self.conn)

    def stream(self, stmt, params=()):
        with self.lock:
            # (With the verbs waiting: a round trip per walk.)
            self.execute(STREAM_SETUP)
            return super().stream(stmt, params)

    def table_exists(self, name):
        return self.scalar(
            'SELECT COUNT(*) FROM information_schema.tables '
            'WHERE table_schema = DATABASE() AND table_name = %s',
            (name,)) > 0


@implementer(IConnector)
class MySQLConnector:
    """Opens the MySQL sessions of an adapter, with the driver's
    keywords (those it cannot take refused at once), of the kind of
    server the adapter found (see probe)."""

    def __init__(self, adapter, params):
        self.adapter = adapter
        self.driver = adapter.driver
        self.options = adapter.options
        self.params = {k: v for k, v in params.items() if v is not None}
        self.driver.translate(self.params)  # refuse unsupported options now
        if 'password_command' in self.params:
            command_argv(self.params['password_command'])
        self.keepalive = Keepalive.for_options(self.options)

    def describe(self, server=None):
        p = self.params if server is None else server.params
        where = ('socket=%s' % p['unix_socket'] if p.get('unix_socket')
                 else 'host=%s port=%s' % (p.get('host', 'localhost'),
                                           p.get('port', 3306)))
        info = self.adapter.server
        flavour = info.flavour if info is not None else 'MySQL'
        return '%s database (db=%s %s user=%s%s)' % (
            flavour, p.get('db', '<default>'), where,
            p.get('user', '<default>'), tls_label(p))

    def location(self):
        p = self.params
        where = p.get('unix_socket') or (p.get('host', 'localhost'),
                                         str(p.get('port', 3306)))
        return ('mysql', where, p.get('db'))

    def probe(self, servers, kinds):
        """``(VERSION(), kind)`` of the first of *servers* (None: the
        parameters') that answers: the first of *kinds* that recognizes
        it."""
        for server in servers[:-1]:
            try:
                conn = self.raw(server)
                break
            except DatabaseUnavailable:
                continue
        else:
            conn = self.raw(servers[-1])
        try:
            cursor = conn.cursor()
            cursor.execute('SELECT VERSION()')
            version = cursor.fetchone()[0]
            return version, next(kind for kind in kinds
                                 if kind.recognizes(cursor))
        except self.driver.module.Error as e:
            # Accepted, then lost (a server restarting, say).
            raise self.unavailable(e) from None
        finally:
            conn.close()

    def raw(self, server=None):
        """A driver connection to *server* (None: the parameters')."""
        driver = self.driver
        keepalive = self.keepalive
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
                raise self.unavailable(e, server, params) from None
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

    def unavailable(self, error, server=None, params=None):
        """DatabaseUnavailable for the driver's *error*, without the
        password."""
        if params is None:
            params = self.params if server is None else server.params
        secrets = [params.get(key) for key in ('passwd', 'password')]
        return DatabaseUnavailable('cannot connect to the %s: %s' % (
            self.describe(server), scrub(error, filter(None, secrets))))

    def open(self, for_store, server=None):
        conn = self.raw(server)
        try:
            conn.autocommit(True)
        except self.driver.module.Error as e:
            # Accepted, then lost (a server restarting, say).
            conn.close()
            raise self.unavailable(e, server) from None
        kind = self.adapter.kind
        session = (kind.store_session_class if for_store
                   else kind.session_class)(self.adapter, conn)
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
            settings.extend(kind.store_settings)
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
