"""Oracle sessions: how they open (user, password and DSN, the connect
and each call bounded by network-timeout), named binds, no BEGIN (a
transaction begins with its first statement), COMMIT and ROLLBACK as the
connection's calls, and a read-only transaction as a load snapshot."""
from zope.interface import implementer

from ...exceptions import ConfigurationError
from ..components import IConnector
from ..keepalive import Keepalive
from ..session import Session
from .drivers import DSN
from .drivers import DISCONNECT_ERRORS
from .drivers import bounded_connect
from .drivers import connect_error
from .drivers import PRIVILEGE_ERRORS
from .drivers import error_codes
from .drivers import is_full
from ..sql import named_binds


#: Ends the transaction before (ROLLBACK) and begins a read-only one, whose
#: queries all see the database as it was when it began: one round trip.
BEGIN_SNAPSHOT = 'BEGIN ROLLBACK; SET TRANSACTION READ ONLY; END;'


#: Rows a stream's cursor asks the server for at a time.
STREAM_ARRAYSIZE = 1000


class OracleSession(Session):
    """Transactions begin with their first statement (there is no BEGIN);
    COMMIT and ROLLBACK are the connection's calls."""

    # A cursor's rows come arraysize at a time, each batch asked for.
    fetches_ask_server = True

    def is_permission_error(self, error):
        return any(code in PRIVILEGE_ERRORS for code in error_codes(error))

    def is_full_error(self, error):
        return is_full(error)

    def is_disconnect(self, error):
        if isinstance(error, self.adapter.driver.module.InterfaceError):
            return True
        return any(code in DISCONNECT_ERRORS for code in error_codes(error))

    def stream_cursor(self):
        cursor = self.conn.cursor()
        cursor.arraysize = STREAM_ARRAYSIZE
        return cursor

    def translate(self, stmt):
        return named_binds(stmt)

    def execute(self, stmt, params=()):
        if stmt == 'COMMIT' or stmt == 'ROLLBACK':
            self._end(stmt)
            return self.cursor
        return super().execute(stmt, params)

    def _end(self, verb):
        with self.lock:
            conn = self.conn
            if conn is None:
                self.lost()
            self.count_round_trip()
            try:
                if verb == 'COMMIT':
                    conn.commit()
                else:
                    conn.rollback()
            except Exception as e:
                self.translate_error(e)
                raise

    def begin(self, sql=None):
        if sql and sql != 'BEGIN':
            self.execute(sql)
        self.in_transaction = True

    def restart(self, begin_sql):
        # The snapshot block ends the transaction before it.
        self.begin(begin_sql)

    def table_exists(self, name):
        return bool(self.scalar(
            'SELECT COUNT(*) FROM user_tables WHERE table_name = %s',
            (name.upper(),)))

    def sequence_exists(self, name):
        return bool(self.scalar(
            'SELECT COUNT(*) FROM user_sequences WHERE sequence_name = %s',
            (name.upper(),)))

    def call_status(self, block, **binds):
        """Run the PL/SQL *block*, which sets ``:status``; return it."""
        with self.lock:
            status = self.live_cursor().var(int)
            binds['status'] = status
            self.execute(block, binds)
            return status.getvalue()


@implementer(IConnector)
class OracleConnector:
    """Opens the Oracle sessions of an adapter: the user, the password
    and the DSN (an Easy Connect string or a TNS alias)."""

    def __init__(self, adapter, user, password, dsn):
        if not dsn:
            raise ConfigurationError(
                'dsn: required for <oracle> (an Easy Connect string such as '
                'db.example.org:1521/ORCLPDB1, or a TNS alias)')
        self.adapter = adapter
        self.driver = adapter.driver
        self.options = adapter.options
        self.user = user
        self.password = password
        self.dsn = DSN(dsn)
        self.keepalive = Keepalive.for_options(self.options)

    def describe(self, server=None):
        return 'Oracle database (%s user=%s)' % (self.dsn.describe(),
                                                 self.user_name())

    def user_name(self):
        """The user, as the section or the DSN (``user/password@``) names
        it; never a password (cx_Oracle took ``user/password`` as the
        user)."""
        return (self.user or self.dsn.user or '<none>').split('/')[0]

    def location(self):
        # Each Oracle user has a schema of its own.
        return ('oracle',) + self.dsn.location() + (
            (self.user or self.dsn.user or '').upper(),)

    def open(self, for_store, server=None):
        driver = self.driver
        keepalive = self.keepalive
        seconds = keepalive.timeout if keepalive is not None else None
        error = None
        try:
            conn = bounded_connect(
                lambda: driver.connect(self.user, self.password,
                                       self.dsn.text, keepalive),
                seconds, self.describe)
        except (driver.Error, OSError) as e:
            error = connect_error(e, self.dsn.describe(), self.user_name(),
                                  (self.password, self.dsn.password))
        if error is not None:
            # (Raised outside the handler: the driver's error is not its
            # context.)
            raise error
        # Each call (one round trip) gets an answer within network-timeout,
        # or within it plus commit-lock-timeout, for calls that wait for a
        # lock.
        call_timeout_ms = 0
        if keepalive is not None:
            call_timeout_ms = int(1000 * (keepalive.timeout
                                          + self.options.commit_lock_timeout))
        try:
            driver.setup(conn, call_timeout_ms)
        except Exception:
            conn.close()
            raise
        return OracleSession(self.adapter, conn)
