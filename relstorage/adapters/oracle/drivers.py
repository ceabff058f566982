"""The two Oracle drivers (python-oracledb, in thin mode, and the older
cx_Oracle), what an Oracle DSN names, and the ORA- codes users meet.

Nothing here sends SQL: the adapter module does.
"""
import re
import threading

from ...exceptions import DatabaseUnavailable
from ...exceptions import PermissionDenied
from ..drivers import choose_driver
from ..redact import scrub

#: The ``driver`` option's spellings (any case) -> module name.
DRIVER_NAMES = {'oracledb': 'oracledb', 'python-oracledb': 'oracledb',
                'cx_oracle': 'cx_Oracle'}

#: A missing privilege (at login, CREATE SESSION; no quota granted on a
#: tablespace at all).
PRIVILEGE_ERRORS = ('ORA-01031', 'ORA-01045', 'ORA-01950', 'ORA-01749')
#: A tablespace, its quota or the temporary tablespace is full.
FULL_ERRORS = ('ORA-01653', 'ORA-01654', 'ORA-01536', 'ORA-01652',
               'ORA-01688', 'ORA-01691', 'ORA-01659', 'ORA-30036')
#: Row lock waits: WAIT n expired, NOWAIT busy, deadlock.
LOCK_ERRORS = ('ORA-30006', 'ORA-00054', 'ORA-00060')
#: The connection is gone (or a call timed out, which leaves it unusable).
DISCONNECT_ERRORS = ('ORA-03113', 'ORA-03114', 'ORA-03135', 'ORA-02396',
                     'ORA-00028', 'ORA-01012', 'ORA-12537', 'ORA-03156',
                     'DPY-1001', 'DPY-4011', 'DPY-4024', 'DPI-1010',
                     'DPI-1067', 'DPI-1080')

#: What a user is told, per code, when a connection cannot be opened.
CONNECT_HINTS = {
    'ORA-01017': 'wrong user name or password',
    'ORA-28000': 'the account is locked',
    'ORA-28001': 'the password has expired',
    'ORA-12541': 'no listener on that host and port',
    'ORA-12514': 'the listener does not know that service',
    'ORA-12505': 'the listener does not know that SID',
    'ORA-12170': 'the connection timed out',
    'ORA-12154': 'the TNS alias could not be resolved',
    'DPY-4027': 'no tnsnames.ora configuration directory to resolve the '
                'TNS alias in',
    'DPY-4000': 'the TNS alias could not be resolved',
    'DPY-6000': 'the listener refused the connection',
    'DPY-6001': 'the listener does not know that service',
    'DPY-6005': 'the server could not be reached or broke off the '
                'connection',
    'DPY-4011': 'the server closed the connection',
    'DPI-1047': "cx_Oracle needs Oracle's client libraries (Instant "
                'Client), which were not found; python-oracledb (driver '
                'oracledb) needs none',
}

#: A driver's code ahead of its message (``DPI-1047: ...``).
_LEADING_CODE = re.compile(r'(ORA|DPY|DPI|TNS|PLS)-\d{4,5}$')


def error_codes(error):
    """The codes of a driver *error*, read from its error object (the
    ``_Error`` both drivers raise with): the Oracle error number
    (``code``) as ``ORA-nnnnn``, and the driver's own code
    (python-oracledb's ``full_code``: a DPY-, DPI- or the ORA- code;
    cx_Oracle, which has no such attribute, puts a DPI- code ahead of its
    message). The wording of a message is never read."""
    detail = error.args[0] if getattr(error, 'args', None) else None
    number = getattr(detail, 'code', 0)
    codes = ['ORA-%05d' % number] if isinstance(number, int) and number \
        else []
    full = getattr(detail, 'full_code', None)
    if full is None:
        message = getattr(detail, 'message', None) or ''
        full = message.split(':', 1)[0] if ':' in message else ''
        full = full if _LEADING_CODE.match(full) else ''
    if full and full not in codes:
        codes.append(full)
    return codes


def first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class DSN:
    """Where an Oracle DSN points: ``host``, ``port`` and ``service`` of an
    Easy Connect string (``[//]host[:port][/service]``, also with a
    ``tcp://`` prefix or ``?options``) or of a connect descriptor; a TNS
    alias otherwise (resolved by the driver, through tnsnames.ora).

    python-oracledb also takes ``user/password@`` before any of them:
    ``user`` and ``password`` hold those (None without), and nothing that
    describes the DSN shows the password."""

    def __init__(self, text):
        self.text = text = (text or '').strip()
        self.host = self.port = self.service = self.alias = None
        self.user = self.password = None
        at = text.find('@(')
        if at < 0 and '@' in text and not text.startswith('('):
            at = text.rindex('@')
        if at >= 0:
            credentials, text = text[:at], text[at + 1:].strip()
            user, _, password = credentials.partition('/')
            self.user, self.password = user or None, password or None
        if text.startswith('('):
            for attr, key in (('host', 'HOST'), ('port', 'PORT'),
                              ('service', 'SERVICE_NAME'),
                              ('service', 'SID')):
                found = re.search(r'\(\s*%s\s*=\s*([^)\s]+)\s*\)' % key,
                                  text, re.IGNORECASE)
                if found and getattr(self, attr) is None:
                    setattr(self, attr, found.group(1))
            return
        easy = re.match(
            r'^(?:[a-z]+://)?(?://)?(\[[^\]]+\]|[^:/?\s]+)'
            r'(?::(\d+))?(?:/([^:/?\s]+))?', text, re.IGNORECASE)
        if easy and (easy.group(2) or easy.group(3) or '//' in text
                     or '.' in easy.group(1)):
            self.host = easy.group(1)
            self.port = easy.group(2) or '1521'
            self.service = easy.group(3)
        else:
            self.alias = text
            self._resolve_alias()

    def _resolve_alias(self):
        """Where the alias points, when python-oracledb finds it in the
        tnsnames.ora of its configuration directory (TNS_ADMIN)."""
        try:
            import oracledb
            params = oracledb.ConnectParams()
            params.parse_connect_string(self.alias)
        except Exception:  # noqa: BLE001 -- not installed, not resolvable
            return
        host = params.host
        if isinstance(host, list):  # several addresses: name the first
            host = host[0] if host else None
        port = params.port[0] if isinstance(params.port, list) else params.port
        service = params.service_name or params.sid
        if isinstance(service, list):
            service = service[0] if service else None
        if host:
            self.host, self.port, self.service = host, str(port), service

    def describe(self):
        where = 'host=%s port=%s service=%s' % (
            self.host or '?', self.port or '1521',
            self.service or '<default>')
        if self.alias is not None:
            if self.host is None:
                return 'TNS alias %s' % self.alias
            return 'TNS alias %s, %s' % (self.alias, where)
        return where

    def location(self):
        if self.alias is not None:
            return (self.alias,)
        return (self.host, self.port, self.service)


class Driver:
    """A DB-API module for Oracle and how to open a connection with it."""

    name = None
    module = None

    def connect(self, user, password, dsn, keepalive):
        raise NotImplementedError

    @property
    def Error(self):
        return self.module.Error

    def number_handler(self, cursor):
        return cursor.var(int, arraysize=cursor.arraysize)

    def bytes_handler(self, cursor):
        return cursor.var(self.module.DB_TYPE_LONG_RAW,
                          arraysize=cursor.arraysize)

    def input_handler(self, cursor, value, arraysize):
        """Python bools go in as 1/0 (NUMBER(1) columns); bytes as LONG
        RAW, which an INSERT writes into a BLOB whatever its size."""
        if isinstance(value, bool):
            return cursor.var(int, arraysize=arraysize, inconverter=int)
        if isinstance(value, bytes):
            return cursor.var(self.module.DB_TYPE_LONG_RAW,
                              arraysize=arraysize)
        return None

    def convert_output(self, cursor, type_code):
        """BLOBs come back as bytes, numbers as ints (every number the
        storage reads is an integer; tids do not fit a float)."""
        module = self.module
        if type_code is module.DB_TYPE_BLOB:
            return self.bytes_handler(cursor)
        if type_code is module.DB_TYPE_NUMBER:
            return self.number_handler(cursor)
        return None

    def setup(self, conn, call_timeout_ms):
        conn.inputtypehandler = self.input_handler
        conn.outputtypehandler = self.output_handler()
        if call_timeout_ms:
            conn.call_timeout = call_timeout_ms

    def output_handler(self):
        def handler(cursor, metadata):
            return self.convert_output(cursor, metadata.type_code)
        return handler


class OracledbDriver(Driver):
    name = 'oracledb'

    def __init__(self):
        import oracledb
        self.module = oracledb

    def connect(self, user, password, dsn, keepalive):
        kw = {}
        if keepalive is not None:
            kw['tcp_connect_timeout'] = float(keepalive.timeout)
            # Minutes between probes of an idle connection (at least 1).
            kw['expire_time'] = max(1, int(keepalive.idle // 60))
        return self.module.connect(user=user, password=password, dsn=dsn,
                                   **kw)


class CxOracleDriver(Driver):
    name = 'cx_Oracle'

    def __init__(self):
        import cx_Oracle
        self.module = cx_Oracle

    def connect(self, user, password, dsn, keepalive):
        # Timeouts of the TCP connect are set in the DSN or sqlnet.ora
        # for the Oracle client libraries cx_Oracle uses.
        return self.module.connect(user=user, password=password, dsn=dsn)

    def output_handler(self):
        def handler(cursor, name, default_type, size, precision, scale):
            return self.convert_output(cursor, default_type)
        return handler


DRIVERS = {'oracledb': OracledbDriver, 'cx_Oracle': CxOracleDriver}


def select_driver(name):
    """The driver for the ``driver`` option: ``auto`` (oracledb, else
    cx_Oracle), ``oracledb`` or ``cx_Oracle``, in any case."""
    return choose_driver(name, DRIVERS, DRIVER_NAMES, ('oracledb', 'cx_Oracle'),
                         'Oracle', 'auto, oracledb, cx_Oracle', 'oracle')


def connect_error(error, where, user, secrets=()):
    """The relstorage error for a failed login or connection to *where*
    (a description naming host, port and service) as *user*; the driver's
    message without any of *secrets* (the passwords it was given)."""
    codes = error_codes(error)
    hint = next((CONNECT_HINTS[c] for c in codes if c in CONNECT_HINTS),
                None)
    detail = scrub(first_line(error), secrets)
    if hint:
        detail = '%s (%s)' % (hint, detail)
    msg = 'cannot connect to the Oracle database (%s user=%s): %s' % (
        where, user or '<none>', detail)
    if any(code in PRIVILEGE_ERRORS for code in codes):
        return PermissionDenied(
            msg + '; the user needs the CREATE SESSION privilege')
    return DatabaseUnavailable(msg)


def bounded_connect(connect, seconds, describe):
    """``connect()``, but given up after *seconds* (None: no bound).

    oracledb's thin mode bounds the TCP connect (tcp_connect_timeout) but
    not the handshake after it: a listener that accepts and then says
    nothing would keep it waiting as long as the peer keeps the socket
    open. The attempt runs in a thread; when it is given up, a connection
    that still arrives later is closed at once."""
    if not seconds:
        return connect()
    result = {}
    done = threading.Event()
    lock = threading.Lock()

    def attempt():
        try:
            conn = connect()
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            result['error'] = e
        else:
            with lock:
                if result.get('abandoned'):
                    _close_quietly(conn)
                    return
                result['conn'] = conn
        done.set()

    thread = threading.Thread(target=attempt, daemon=True,
                              name='relstorage-oracle-connect')
    thread.start()
    if not done.wait(seconds):
        with lock:
            if 'conn' not in result and 'error' not in result:
                result['abandoned'] = True
                raise DatabaseUnavailable(
                    'cannot connect to the %s: no answer within %ss '
                    '(network-timeout)' % (describe(), seconds))
    if 'error' in result:
        raise result['error']
    return result['conn']


def _close_quietly(conn):
    try:
        conn.close()
    except Exception:  # noqa: BLE001 -- an abandoned connection
        pass


def is_full(error):
    return any(code in FULL_ERRORS for code in error_codes(error))

