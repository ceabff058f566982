"""The Oracle adapter: assembles the session, schema, locker, mover,
packer and oid allocator of this package (see their modules for what
Oracle does differently) with the driver and the connection's bounds."""
from ...exceptions import ConfigurationError
from ...options import warn_ignored
from ..adapter import Adapter
from ..keepalive import Keepalive
from .drivers import DSN
from .drivers import bounded_connect
from .drivers import connect_error
from .drivers import select_driver
from .inspect import OracleStatistics
from .locker import OracleLocker
from .mover import OracleHFMover
from .mover import OracleHPMover
from .oidallocator import OracleOIDAllocator
from .packer import OracleHFPacker
from .packer import OracleHPPacker
from .schema import OracleSchema
from .schema import OracleTypes
from .session import BEGIN_SNAPSHOT
from .session import OracleSession

class OracleAdapter(Adapter):

    types = OracleTypes
    schema_class = OracleSchema
    statistics_class = OracleStatistics
    database_name = 'Oracle'

    uri_keys = ('driver', 'user', 'password', 'dsn', 'twophase')

    @classmethod
    def section_from_uri(cls, uri):
        """``oracle://user:password@host:port/service``: an Easy Connect
        string, host[:port][/service]; or RelStorage 4's
        ``oracle://?user=...&password=...&dsn=...``."""
        dsn = (uri.host or '') + (':%d' % uri.port if uri.port else '') + (
            uri.path if uri.path.strip('/') else '')
        keys = uri.keys
        if 'twophase' in keys:
            warn_ignored('twophase', 'a commit here is one transaction on '
                                     'one server')
        section = {}
        for key, value in (('user', uri.user), ('password', uri.password),
                           ('dsn', dsn or None)):
            if value and keys.get(key) and keys[key] != value:
                raise ConfigurationError(
                    'oracle URI %s gives %s twice (in the address and the '
                    'query): give it once' % (uri.redacted, key))
            section[key] = value or keys.get(key)
        return section
    hp_mover_class = OracleHPMover
    hf_mover_class = OracleHFMover
    hp_packer_class = OracleHPPacker
    hf_packer_class = OracleHFPacker
    locker_class = OracleLocker
    oid_allocator_class = OracleOIDAllocator
    load_begin_sql = BEGIN_SNAPSHOT
    # Read committed (Oracle's default) begins with the first statement.
    store_begin_sql = 'BEGIN'

    def __init__(self, user=None, password=None, dsn=None, driver='auto',
                 options=None):
        from ...options import Options
        if not dsn:
            raise ConfigurationError(
                'dsn: required for <oracle> (an Easy Connect string such as '
                'db.example.org:1521/ORCLPDB1, or a TNS alias)')
        self.driver = select_driver(driver)
        self.user = user
        self.password = password
        self.dsn = DSN(dsn)
        super().__init__(options if options is not None else Options())
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

    def open_connection(self, for_store, server=None):
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
        return OracleSession(self, conn)

