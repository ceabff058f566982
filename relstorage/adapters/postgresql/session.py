"""PostgreSQL sessions: what each sets when it opens (the lock timeout,
the server's keepalives, a writer's synchronous_commit), scripts sent as
one message, and LISTEN/NOTIFY, by which load sessions learn of commits
without polling."""
from ..session import Session
from ..sql import SQL
from ..sql import Identifier
from ..sql import script
from ..sql import without_parameters


#: Every commit notifies this channel (NOTIFY is scoped to the database);
#: load sessions with a poll-interval listen on it.
COMMIT_CHANNEL = Identifier('relstorage_commits')
LISTEN_COMMITS = SQL('LISTEN {channel}').format(channel=COMMIT_CHANNEL)
NOTIFY_COMMIT = SQL('NOTIFY {channel}').format(channel=COMMIT_CHANNEL)

#: What every session sets, and a session on a TCP connection too when
#: network-timeout is set (the server's keepalives; their parameters in
#: the order of Keepalive's fields).
SESSION_SETUP = 'SET lock_timeout = %s'
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


class PostgreSQLSession(Session):

    defers_verbs = True
    #: Whether this connection has the load statement prepared.
    load_prepared = False
    #: Whether the session's own synchronous_commit is local, its
    #: transactions setting the server's (see WRITER_SETUP).
    commits_locally = False

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
