"""zodburi resolvers: ``postgres://``, ``postgresql://``, ``mysql://``,
``oracle://`` and ``sqlite://`` URIs, as Pyramid applications name their
database (``zodbconn.uri``), with RelStorage's forms::

    postgres://user:password@host:5432/dbname?keep_history=false
    mysql://user:password@host:3306/dbname?cache_local_mb=100
    oracle://user:password@host:1521/service?driver=oracledb
    sqlite:///var/app/relstorage?blob_dir=/var/app/blobs
    sqlite://?name=site          (the embedded default location)

The query string takes the ``<relstorage>`` options (``cache_local_mb``
or ``cache-local-mb``), the adapter's keys (``driver``; MySQL's
``unix_socket``, ``connect_timeout``, ...) and zodburi's database
arguments (``database_name``, ``connection_cache_size``, ...), which are
returned to zodburi; anything else is refused by zodburi, by name.
"""
import types
from urllib.parse import parse_qsl
from urllib.parse import unquote
from urllib.parse import urlsplit

from .adapters.redact import redact_uri
from .config import MySQLAdapterFactory
from .config import OracleAdapterFactory
from .config import PostgreSQLAdapterFactory
from .config import SQLite3AdapterFactory
from .config import checked
from .config import open_configured
from .exceptions import ConfigurationError
from .options import OPTIONS
from .options import Options
from .options import warn_ignored

_OPTION_ATTRS = {spec.attr for spec in OPTIONS}

#: RelStorage's URI arguments under other names here.
RENAMED = {'create': 'create_schema',
           'blob_cache_chunk_size': 'blob_chunk_size'}
#: RelStorage's URI arguments that tune what this storage does not have.
IGNORED = {
    'pack_dry_run': 'zodbpack --prepack finds what a pack would remove',
    'strict_tpc': 'two-phase commit here is always strict',
    'pack_duty_cycle': 'a pack holds the commit lock one batch at a time '
                       '(pack-batch-timeout)',
    'pack_max_delay': 'a pack holds the commit lock one batch at a time '
                      '(pack-batch-timeout)',
}


class URI:
    """The parts of a zodburi URI that name the database, for an
    adapter's section_from_uri; *keys*: the query's values of the
    adapter's uri_keys, converted."""

    def __init__(self, uri, keys=None):
        parts = urlsplit(uri)
        self.keys = dict(keys or {})
        self.netloc = parts.netloc
        self.redacted = redact_uri(uri)
        self.host = parts.hostname
        self.user = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        self.path = unquote(parts.path)
        try:
            self.port = parts.port
        except ValueError as e:
            raise ConfigurationError('%s: %s' % (self.redacted, e)) from None


#: RelStorage 4's URIs wrote booleans as 1 and 0 too.
_BOOLEAN_DIGITS = {'1': 'true', '0': 'false'}


def _convert(attr, text):
    try:
        convert = getattr(checked, attr)
    except AttributeError:
        return text  # a string key (driver, unix_socket)
    try:
        return convert(text)
    except ConfigurationError:
        if text not in _BOOLEAN_DIGITS:
            raise
        return convert(_BOOLEAN_DIGITS[text])


def _split_query(uri_keys, query):
    """``(options, adapter keys, the rest)`` of the URI's query string."""
    options, adapter, rest = {}, {}, {}
    for key, text in parse_qsl(query, keep_blank_values=True):
        attr = key.replace('-', '_')
        attr = RENAMED.get(attr, attr)
        if attr in IGNORED:
            warn_ignored(attr, IGNORED[attr])
        elif attr in _OPTION_ATTRS:
            options[attr] = _convert(attr, text)
        elif attr in uri_keys:
            adapter[attr] = _convert(attr, text)
        else:
            rest[key] = text
    return options, adapter, rest


def _resolve(adapter_class, factory_class, text):
    options, keys, dbkw = _split_query(adapter_class.uri_keys,
                                       urlsplit(text).query)
    demo = dbkw.pop('demostorage', None)
    section = adapter_class.section_from_uri(URI(text, keys))
    factory = factory_class(types.SimpleNamespace(**dict(keys, **section)))
    return StorageFactory(factory, Options(**options),
                          demo is not None and _convert('demostorage', demo)
                          ), dbkw


class StorageFactory:
    """What a resolver returns for zodburi: called, it opens the storage
    (as the equivalent ``<relstorage>`` section would); *demo*: under a
    DemoStorage (RelStorage 4's ``demostorage`` argument), whose changes
    are kept in memory and dropped at close."""

    def __init__(self, adapter_factory, options, demo=False):
        self.adapter_factory = adapter_factory
        self.options = options
        self.demo = demo

    def __call__(self):
        storage = open_configured(self.adapter_factory, self.options)
        if self.demo:
            from ZODB.DemoStorage import DemoStorage
            storage = DemoStorage(base=storage, close_base_on_close=True)
        return storage


def postgresql(uri):
    """The resolver of ``postgres://`` and ``postgresql://`` URIs."""
    from .adapters.postgresql import PostgreSQLAdapter
    return _resolve(PostgreSQLAdapter, PostgreSQLAdapterFactory, uri)


def mysql(uri):
    """The resolver of ``mysql://`` URIs."""
    from .adapters.mysql import MySQLAdapter
    return _resolve(MySQLAdapter, MySQLAdapterFactory, uri)


def oracle(uri):
    """The resolver of ``oracle://`` URIs."""
    from .adapters.oracle import OracleAdapter
    return _resolve(OracleAdapter, OracleAdapterFactory, uri)


def sqlite(uri):
    """The resolver of ``sqlite://`` URIs."""
    from .adapters.sqlite import SQLiteAdapter
    return _resolve(SQLiteAdapter, SQLite3AdapterFactory, uri)
