"""PostgreSQL sessions: what each sets when it opens (the lock timeout,
the server's keepalives, a writer's synchronous_commit), scripts sent as
one message, and LISTEN/NOTIFY, by which load sessions learn of commits
without polling."""
from ..session import Session
from ..session import Stream
from ..sql import SQL
from ..sql import Identifier
from ..sql import script
from ..sql import without_parameters
from . import errors


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

    is_permission_error = errors.is_permission_error
    is_full_error = errors.is_full_error
    missing_create_privilege = errors.missing_create_privilege

    def is_disconnect(self, error):
        driver = self.adapter.driver
        if isinstance(error, driver.InterfaceError):
            return True
        return (isinstance(error, driver.OperationalError)
                and (self.conn is None or bool(self.conn.closed)))

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

    def execute(self, stmt, params=()):
        with self.lock:
            cursor = super().execute(stmt, params)
            while cursor.nextset():
                pass
            return cursor
