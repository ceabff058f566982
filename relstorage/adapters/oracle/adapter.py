"""The Oracle adapter: assembles the connector (in session.py), schema,
locker, mover, packer and oid allocator of this package (see their
modules for what Oracle does differently) with the driver."""
from ...exceptions import ConfigurationError
from ...options import warn_ignored
from ..adapter import Adapter
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
from .session import OracleConnector

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
        self.driver = select_driver(driver)
        self.options = options if options is not None else Options()
        self.connector = OracleConnector(self, user, password, dsn)
        super().__init__(self.options)
