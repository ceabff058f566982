"""The two PostgreSQL drivers: psycopg2 and psycopg (version 3).

Both bind parameters on the client (psycopg's ClientCursor), so that the
statements of a script, and a deferred BEGIN with the statement after
it, travel to the server in one message as with psycopg2. What differs
(parsing a dsn, COPY, reading notifications, the results of a message of
several statements) is behind the methods of ``Driver``.
"""
import io

from ..drivers import choose_driver
from .. import cooperative


class Driver:
    name = None
    module = None
    #: Whether a message of several statements leaves the cursor on the
    #: first result (psycopg) rather than the last (psycopg2).
    results_from_first = False
    #: Whether waits yield to other greenlets (see cooperate()).
    cooperative = False
    #: Whether COPY can be used (psycopg2 refuses it with a wait
    #: callback).
    can_copy = True

    def __init__(self):
        module = self.module
        self.Error = module.Error
        self.OperationalError = module.OperationalError
        self.InterfaceError = module.InterfaceError
        self.ProgrammingError = module.ProgrammingError
        self.errors = module.errors
        #: What a statement meets when the server session it runs in is
        #: not the one the connection had before (behind a transaction
        #: pooler): a prepared statement there already, or not there.
        self.session_state_errors = (
            module.errors.DuplicatePreparedStatement,
            module.errors.InvalidSqlStatementName)

    def backend_pid(self, conn):
        """The server process id libpq was told at connect (a pooler
        gives its own)."""
        return conn.info.backend_pid

    def cooperate(self):
        """Make this driver's waits yield to other greenlets."""
        raise NotImplementedError

    def connect(self, dsn, **keywords):
        """A connection in autocommit mode (transactions are explicit)."""
        conn = self.module.connect(dsn, **keywords)
        conn.autocommit = True
        return conn

    def mogrify(self, cursor, stmt, params):
        """*stmt* with *params* bound, as text."""
        raise NotImplementedError

    def copy_in(self, cursor, sql, data):
        """Run ``COPY ... FROM STDIN`` *sql* with the bytes *data*."""
        raise NotImplementedError

    def notified(self, conn):
        """Whether notifications arrived on *conn* (read without a round
        trip), forgetting them."""
        raise NotImplementedError


class Psycopg2Driver(Driver):
    name = 'psycopg2'

    def __init__(self):
        import psycopg2
        import psycopg2.errors
        import psycopg2.extensions
        self.module = psycopg2
        super().__init__()
        # A wait callback another library installed (psycogreen) makes
        # psycopg2 refuse COPY too.
        self.can_copy = psycopg2.extensions.get_wait_callback() is None

    def cooperate(self):
        cooperative.install_psycopg2_wait()
        self.cooperative = True
        self.can_copy = False

    def parse_dsn(self, dsn):
        return self.module.extensions.parse_dsn(dsn)

    def mogrify(self, cursor, stmt, params):
        return cursor.mogrify(stmt, params).decode('utf-8', 'surrogateescape')

    def copy_in(self, cursor, sql, data):
        # 64 KB per message instead of psycopg2's default 8 KB.
        cursor.copy_expert(sql, io.BytesIO(data), size=1 << 16)

    def notified(self, conn):
        conn.poll()
        if conn.notifies:
            del conn.notifies[:]
            return True
        return False


class PsycopgDriver(Driver):
    name = 'psycopg'
    results_from_first = True

    def __init__(self):
        import psycopg
        import psycopg.conninfo
        import psycopg.errors
        self.module = psycopg
        super().__init__()

    def cooperate(self):
        # Its selector waits yield once gevent patched selectors.
        cooperative.use_psycopg_selector_wait()
        self.cooperative = cooperative.monkey_patched()

    def parse_dsn(self, dsn):
        return self.module.conninfo.conninfo_to_dict(dsn)

    def connect(self, dsn, **keywords):
        conn = self.module.connect(
            dsn, autocommit=True, cursor_factory=self.module.ClientCursor,
            **keywords)
        # psycopg takes the notifications that arrive with a statement's
        # results (those held back while a snapshot was open come with its
        # ROLLBACK) before notified() can read them, and keeps them where
        # only its notifies() generator looks, piling up: a handler
        # notes them instead.
        conn.relstorage_heard = heard = _Heard()
        conn.add_notify_handler(heard)
        return conn

    def mogrify(self, cursor, stmt, params):
        return cursor.mogrify(stmt, params)

    def copy_in(self, cursor, sql, data):
        with cursor.copy(sql) as copy:
            view = memoryview(data)
            for start in range(0, len(data), 1 << 16):
                copy.write(view[start:start + (1 << 16)])

    def notified(self, conn):
        pgconn = conn.pgconn
        pgconn.consume_input()
        heard = conn.relstorage_heard
        found, heard.any = heard.any, False
        while pgconn.notifies() is not None:
            found = True
        return found


class _Heard:
    """A psycopg notify handler: whether a notification arrived since
    notified() last looked."""

    __slots__ = ('any',)

    def __init__(self):
        self.any = False

    def __call__(self, notify):
        self.any = True


DRIVERS = {'psycopg2': Psycopg2Driver, 'psycopg': PsycopgDriver}


def select_driver(name):
    """The driver for the ``driver`` option: auto (psycopg2, else
    psycopg), psycopg2 or psycopg, in any case, each also after the word
    gevent (RelStorage's ``gevent psycopg2``), cooperative then or under
    gevent's monkey-patching. RelStorage's psycopg2cffi and pg8000 are
    refused with that list."""
    asked, name = cooperative.split_driver_name(name)
    driver = choose_driver(name, DRIVERS, {key: key for key in DRIVERS},
                           ('psycopg2', 'psycopg'), 'PostgreSQL',
                           'auto, psycopg2, psycopg (each also as '
                           'gevent psycopg2 ...)',
                           'postgresql or psycopg')
    if cooperative.cooperating(asked):
        driver.cooperate()
    return driver
