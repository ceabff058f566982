"""The two MySQL drivers: mysqlclient (``MySQLdb``) and PyMySQL.

Each takes the ``<mysql>`` options under the names it expects; an option
a driver cannot honour is refused by name rather than ignored.
"""
import logging

from ...exceptions import ConfigurationError
from ..drivers import choose_driver
from .. import cooperative
from .tls import connector_c
from .tls import mysqlclient_options
from .tls import offers_no_tls
from .tls import prefers_tls
from .tls import ssl_context
from .tls import tls_settings
from .tls import without_tls

log = logging.getLogger(__name__)

#: Error codes that mean "the server could not be reached or refused us".
CONNECT_ERRORS = (1044, 1045, 1049, 2002, 2003, 2005, 2006, 2013)
#: Server gone away, connection lost, killed, or closed for inactivity.
DISCONNECT_ERRORS = (2006, 2013, 2055, 1927, 4031)
#: Lock wait timeout and deadlock.
LOCK_ERRORS = (1205, 1213)


class Driver:
    name = None
    module = None
    #: Whether waits yield to other greenlets (see cooperate()).
    cooperative = False

    #: What connect() calls (the module's connect unless cooperating).
    connector = None

    def connect(self, params):
        connector = self.connector or self.module.connect
        try:
            return connector(**self.translate(params))
        except self.module.OperationalError as e:
            # PREFERRED is asked of the driver as TLS required (where it
            # has no mode of its own that encrypts whenever it can):
            # only a server that offers no TLS is then met in the clear.
            if not (prefers_tls(params) and offers_no_tls(e)):
                raise
        return connector(**self.translate(without_tls(params)))

    def cooperate(self):
        """Make this driver's waits yield to other greenlets, where it
        can."""
        raise NotImplementedError

    def translate(self, params):
        return dict(params)

    def fileno(self, conn):
        """The file descriptor of *conn*'s socket."""
        return conn.fileno()

    def streaming_cursor(self, conn):
        """A cursor of *conn* reading its results as they are fetched
        (the default one reads them all with the statement), or None."""
        return conn.cursor(self.module.cursors.SSCursor)

    def encrypted(self, conn):
        """Whether the connection *conn* is encrypted (TLS)."""
        cursor = conn.cursor()
        try:
            cursor.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            row = cursor.fetchone()
        finally:
            cursor.close()
        return bool(row and row[1])


class MySQLdbDriver(Driver):
    name = 'MySQLdb'

    def __init__(self):
        import MySQLdb
        from MySQLdb.constants import CLIENT
        self.module = MySQLdb
        self.multi_statements = CLIENT.MULTI_STATEMENTS
        #: Whether the client library is MariaDB's (see tls).
        self.connector_c = connector_c(MySQLdb.get_client_info())

    def cooperate(self):
        # Its waits are in C: the connection's are made to yield
        # (cooperative.mysqldb_connector).
        self.connector = cooperative.mysqldb_connector(self.module)
        self.cooperative = True

    def streaming_cursor(self, conn):
        if self.cooperative:
            # Its rows are read in C calls that would not yield: a
            # stream would hold every greenlet up.
            return None
        return super().streaming_cursor(conn)

    def translate(self, params):
        params = dict(params)
        params['client_flag'] = (params.get('client_flag', 0)
                                 | self.multi_statements)
        if 'load_infile' in params:
            params['local_infile'] = params.pop('load_infile')
        mode, files = tls_settings(params)
        if mode is not None:
            params['ssl_mode'], ssl = mysqlclient_options(
                mode, files, self.connector_c)
            if ssl:
                params['ssl'] = ssl
        return params


class PyMySQLDriver(Driver):
    name = 'PyMySQL'
    #: mysqlclient's names -> PyMySQL's
    renames = {'passwd': 'password', 'db': 'database'}
    unsupported = ('named_pipe', 'compress')

    def __init__(self):
        import pymysql
        from pymysql.constants import CLIENT
        self.module = pymysql
        self.multi_statements = CLIENT.MULTI_STATEMENTS

    def cooperate(self):
        # Pure Python: its waits are on the socket module's sockets,
        # which yield once gevent patched them.
        self.cooperative = cooperative.monkey_patched()

    def translate(self, params):
        result = {}
        for key, value in params.items():
            if key in self.unsupported:
                if value:
                    raise ConfigurationError(
                        '%s: not supported by the PyMySQL driver (install '
                        'mysqlclient, or remove the option)'
                        % key.replace('_', '-'))
                continue
            result[self.renames.get(key, key)] = value
        result['client_flag'] = (result.get('client_flag', 0)
                                 | self.multi_statements)
        if 'load_infile' in result:
            result['local_infile'] = result.pop('load_infile')
        mode, files = tls_settings(result)
        if mode == 'DISABLED':
            result['ssl_disabled'] = True
        elif mode is not None:
            # Our own context: given a dict, PyMySQL checks no name
            # without a CA file. Whether TLS was had at all is checked
            # once connected (PyMySQL before 1.2 goes on in the clear
            # where the server offers no TLS).
            result['ssl'] = ssl_context(mode, files)
        return result

    def fileno(self, conn):
        return conn._sock.fileno()


DRIVERS = {'MySQLdb': MySQLdbDriver, 'PyMySQL': PyMySQLDriver}


#: The ``driver`` option's spellings (any case), RelStorage's included.
DRIVER_NAMES = {'mysqldb': 'MySQLdb', 'mysqlclient': 'MySQLdb',
                'pymysql': 'PyMySQL'}


def select_driver(name):
    """The driver for the ``driver`` option: auto, MySQLdb (also
    mysqlclient) or PyMySQL, in any case, each also after the word
    gevent (RelStorage's ``gevent MySQLdb``). With gevent in use (that
    word, or monkey-patching) either driver's waits yield: PyMySQL's are
    on gevent's patched sockets, mysqlclient's are made to yield."""
    asked, name = cooperative.split_driver_name(name)
    cooperating = cooperative.cooperating(asked)
    driver = choose_driver(name, DRIVERS, DRIVER_NAMES,
                           ('MySQLdb', 'PyMySQL'), 'MySQL',
                           'auto, MySQLdb or mysqlclient, PyMySQL (each '
                           'also as gevent MySQLdb ...)', 'mysql')
    if cooperating:
        driver.cooperate()
    return driver


def error_code(error):
    """The MySQL error number of a driver exception, or None."""
    args = getattr(error, 'args', ())
    if args and isinstance(args[0], int):
        return args[0]
    return None
