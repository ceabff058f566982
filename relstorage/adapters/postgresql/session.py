"""PostgreSQL sessions: how they open (the dsn, its password command,
libpq's bounds from network-timeout, the check for a transaction pooler)
and what each sets then (the lock timeout, the server's keepalives, a
writer's synchronous_commit), scripts sent as one message, and
LISTEN/NOTIFY, by which load sessions learn of commits without
polling."""
from zope.interface import implementer

from ...exceptions import ConfigurationError
from ...exceptions import DatabaseUnavailable
from ..components import IConnector
from ..credentials import command_argv
from ..credentials import run_password_command
from ..keepalive import Keepalive
from ..redact import scrub
from ..session import Session
from ..session import Stream
from ..sql import SQL
from ..sql import Identifier
from ..sql import script
from ..sql import without_parameters
from . import errors
from . import pooler
from .dsn import describe_dsn
from .dsn import dsn_location
from .dsn import parse_dsn
from .dsn import scrub_dsn


#: Every commit notifies this channel (NOTIFY is scoped to the database);
#: load sessions with a poll-interval listen on it.
COMMIT_CHANNEL = Identifier('relstorage_commits')
LISTEN_COMMITS = SQL('LISTEN {channel}').format(channel=COMMIT_CHANNEL)
NOTIFY_COMMIT = SQL('NOTIFY {channel}').format(channel=COMMIT_CHANNEL)

#: How the server sends states (bytea): escaped, not as hex. A pickle is
#: mostly printable bytes, which the escape format sends as they are
#: (the states of a Plone-like site: 1.12 times their size, hex 2.0),
#: and the drivers decode it with about a third less work; what they
#: return is the same bytes.
BYTEA_OUTPUT = "SET bytea_output = 'escape'"
#: The same, for one transaction (behind a transaction pooler).
LOCAL_BYTEA_OUTPUT = "SET LOCAL bytea_output = 'escape'"
#: What every session sets, and a session on a TCP connection too when
#: network-timeout is set (the server's keepalives; their parameters in
#: the order of Keepalive's fields).
SESSION_SETUP = script('SET lock_timeout = %s', BYTEA_OUTPUT)
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
#: A stream's statements: a cursor of the server's, read a batch at a
#: time (the drivers' own cursors read every row with the statement).
#: Declared with the session's other statements (not with a driver's
#: named cursor, which refuses a connection in autocommit mode), and so
#: planned for a fast start (cursor_tuple_fraction); never with a sort
#: of its rows, which a planner misled by missing statistics (a table
#: just filled) would choose, sorting every state on disk before the
#: first row.
STREAM_SETUP = 'SET LOCAL enable_sort = off'
DECLARE_STREAM = SQL(script(
    STREAM_SETUP, 'DECLARE {name} NO SCROLL CURSOR FOR {query}'))
FETCH_STREAM = SQL('FETCH FORWARD %s FROM {name}')


class PostgreSQLSession(Session):

    defers_verbs = True
    #: Whether this connection has the load statement prepared.
    load_prepared = False
    #: Whether the session's own synchronous_commit is local, its
    #: transactions setting the server's (see WRITER_SETUP).
    commits_locally = False
    # psycopg2 sends each row's statement on its own.
    executes_many_one_by_one = True
    #: Sent with each commit: listening load sessions are told of it
    #: once it is done.
    commit_announcements = ((NOTIFY_COMMIT, ()),)

    is_permission_error = errors.is_permission_error
    is_full_error = errors.is_full_error
    missing_create_privilege = errors.missing_create_privilege

    def is_disconnect(self, error):
        driver = self.adapter.driver
        if isinstance(error, driver.InterfaceError):
            return True
        return (isinstance(error, driver.OperationalError)
                and (self.conn is None or bool(self.conn.closed)))

    def commits_announced(self):
        if not self.hears_commits:
            return None
        try:
            # Reads what the server sent, without a round trip.
            return self.adapter.driver.notified(self.conn)
        except self.adapter.driver.Error:
            return True     # a real poll finds out (and reconnects)

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

    #: Streams declared on this session (each cursor's name is new).
    streams = 0

    def stream(self, stmt, params=()):
        with self.lock:
            self.streams += 1
            name = Identifier('relstorage_stream_%d' % self.streams)
            self.execute(DECLARE_STREAM.format(name=name, query=stmt),
                         params)
        return DeclaredStream(self, name)


class DeclaredStream(Stream):
    """A stream of a cursor declared on the server: each FETCH (a round
    trip) brings SERVER_BATCH rows, which the driver turns into Python
    objects as they are asked for. The cursor lasts until the transaction
    ends (nothing is sent to close it)."""

    #: Rows each FETCH brings.
    SERVER_BATCH = 2000

    def __init__(self, session, name):
        super().__init__(session, None)
        self.fetch_sql = FETCH_STREAM.format(name=name)
        self.open = True
        #: Rows of the last FETCH not yet asked for, and whether it had
        #: fewer than it asked for (the cursor's last).
        self.left = 0
        self.drained = False

    def fetch(self, size):
        session = self.session
        rows = []
        with session.lock:
            while self.open and len(rows) < size:
                if self.left <= 0:
                    if self.drained:
                        self.close()  # the last FETCH had the last rows
                        break
                    cursor = session.execute(self.fetch_sql,
                                             (self.SERVER_BATCH,))
                    self.left = cursor.rowcount
                    self.drained = self.left < self.SERVER_BATCH
                    if self.left <= 0:
                        self.close()
                        break
                else:
                    cursor = session.live_cursor()
                more = cursor.fetchmany(min(size - len(rows), self.left))
                self.left -= len(more)
                rows.extend(more)
        return rows

    def close(self):
        self.open = False


class PsycopgSession(PostgreSQLSession):
    """psycopg leaves the cursor on the first result of a message of
    several statements (a deferred BEGIN and the statement after it, a
    script); the statement that matters is the last."""

    # psycopg's executemany() sends the rows' statements in a pipeline.
    executes_many_one_by_one = False

    def execute(self, stmt, params=()):
        with self.lock:
            cursor = super().execute(stmt, params)
            while cursor.nextset():
                pass
            return cursor


@implementer(IConnector)
class PostgreSQLConnector:
    """Opens the PostgreSQL sessions of an adapter: libpq's dsn (a
    misspelt keyword refused at once, not at the first connect), a
    password command run for each connection, the keywords the dsn
    leaves to network-timeout, and what each session sets."""

    #: Whether load sessions may LISTEN for commits (given an interval).
    may_listen = True

    def __init__(self, adapter, dsn, password_command, pooler_mode):
        self.adapter = adapter
        self.driver = adapter.driver
        self.options = adapter.options
        self.dsn = dsn
        #: Run for each new connection: its output is the password.
        self.password_command = password_command
        if password_command is not None:
            command_argv(password_command)  # refused now if unusable
        #: Whether load sessions LISTEN for commits.
        self.listens = self.may_listen and bool(self.options.poll_interval)
        #: Whether open() still has to look for a transaction pooler.
        self.pooler_unchecked = pooler_mode == 'none'
        self.check_dsn(dsn, 'dsn: ')
        self.keepalive = Keepalive.for_options(self.options)
        self.own_bounds = self.bounds(dsn)

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

    def describe(self, server=None):
        return 'PostgreSQL database (%s)' % describe_dsn(
            self.dsn if server is None else server.params)

    def location(self):
        return ('postgresql',) + dsn_location(self.dsn)

    def bounds(self, dsn):
        """The libpq keywords network-timeout sets that *dsn* does not."""
        if self.keepalive is None:
            return {}
        given = parse_dsn(dsn)
        return {key: value
                for key, value in self.keepalive.libpq_keywords().items()
                if key not in given}

    def raw(self, server=None):
        """A session on *server* (None: the dsn's) with nothing set."""
        driver = self.driver
        if server is None:
            dsn, bounds = self.dsn, self.own_bounds
        else:
            dsn = server.params
            bounds = self.bounds(dsn)
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
                   else PostgreSQLSession)(self.adapter, conn)
        session.server = server
        return session

    def open(self, for_store, server=None):
        session = self.raw(server)
        if self.pooler_unchecked:
            try:
                pooler.refuse_unannounced_transaction_pooler(
                    self.adapter, session, lambda: self.raw(server))
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
                # the driver keeps in a list. A standby takes no LISTEN.)
                setup = LISTENING_LOAD_SETUP
                session.hears_commits = True
            session.execute(setup)
