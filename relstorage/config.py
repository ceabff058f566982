"""ZConfig factories for ``%import relstorage``.

``component.xml`` declares the ``<relstorage>`` section and the adapter
sections; ZConfig turns each of them into one of the factory objects
below. Nothing here touches a database until ``RelStorageFactory.open()``.

The schema gives no defaults: a key the user did not write stays None and
`relstorage.options.Options` supplies the default.
"""
import io
import pathlib
import re
import threading
import weakref

import ZConfig
import ZConfig.datatypes
import ZODB.config

from relstorage.defaultlocation import config_file_being_read
from relstorage.defaultlocation import default_data_dir
from relstorage.defaultlocation import per_user_data_dir
from relstorage.exceptions import ConfigurationError
from relstorage.exceptions import NotSupportedYet
from relstorage.options import IGNORED
from relstorage.options import OPTIONS
from relstorage.options import Options
from relstorage.options import option_spec
from relstorage.options import warn_ignored

__all__ = [
    'RelStorageFactory',
    'PostgreSQLAdapterFactory',
    'MySQLAdapterFactory',
    'OracleAdapterFactory',
    'SQLite3AdapterFactory',
    'options_from_section',
    'open_configured',
    'default_sqlite_data_dir',
    'pragmas_from_section',
    'storage_from_string',
    'storage_from_file',
    'checked',
]


def default_sqlite_data_dir(name):
    """Where a ``<relstorage>`` without an adapter section keeps its SQLite
    files when its configuration is given as a string:
    ``$XDG_DATA_HOME/relstorage/<name>`` (see relstorage.defaultlocation
    for one read from a file)."""
    return per_user_data_dir(name)


# -- datatypes that name the option in their errors -------------------------

# How each Options kind is written in zope.conf.
_TEXT_TYPES = {
    'bool': 'boolean',
    'int': 'integer',
    'bytes': 'byte-size',
    'float': 'float',
    'str': 'string',
    'strings': 'string-list',
    'choice': 'string',
}

# Typed keys of the adapter sections (and of zodburi URIs) and their stock
# ZConfig datatype.
_ADAPTER_KEY_TYPES = {
    'port': 'port-number',
    'connect_timeout': 'integer',
    'read_timeout': 'integer',
    'write_timeout': 'integer',
    'compress': 'boolean',
    'named_pipe': 'boolean',
    'client_flag': 'integer',
    'load_infile': 'boolean',
    'demostorage': 'boolean',
    'twophase': 'boolean',
}


def _number(text):
    """An int when the text is one, otherwise a float."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise ValueError('expected a number, got %r' % (text,)) from None


class _CheckedDatatypes:
    """ZConfig datatypes, one per key, whose errors start with the key name.

    ZConfig's stock datatypes report only the bad value and its line
    ("not a valid boolean value: 'maybe'"). component.xml refers to
    ``relstorage.config.checked.<attribute>`` instead, which converts with
    the same stock datatype, then lets Options validate the result, and
    prefixes any error with the option name.
    """

    def __init__(self):
        self._cache = {}

    def __getattr__(self, attr):
        if attr.startswith('_'):
            raise AttributeError(attr)
        if attr not in self._cache:
            self._cache[attr] = self._make(attr)
        return self._cache[attr]

    @staticmethod
    def _make(attr):
        stock = ZConfig.datatypes.stock_datatypes
        if attr in _ADAPTER_KEY_TYPES:
            name, spec = attr, None
            parse = stock[_ADAPTER_KEY_TYPES[attr]]
        else:
            try:
                spec = option_spec(attr)
            except ConfigurationError:
                raise AttributeError(attr) from None
            name = spec.name
            if spec.kind == 'number':
                parse = _number
            else:
                parse = stock[_TEXT_TYPES[spec.kind]]

        def convert(text):
            try:
                value = parse(text)
            except ConfigurationError:
                raise
            except ValueError as e:
                raise ConfigurationError(
                    'invalid value for option %s: %s' % (name, e)) from e
            if spec is not None:
                value = spec.coerce(value)
            return value

        convert.__name__ = attr
        return convert


checked = _CheckedDatatypes()


# -- <relstorage> ------------------------------------------------------------

def options_from_section(section):
    """Build Options from a parsed ``<relstorage>`` section.

    *section* is the ZConfig section value (or the RelStorageFactory
    made from it). Only keys the user wrote are passed on, so everything
    else keeps the default from options.py. The storage name is the
    ``name`` key, else the section's own name (``<relstorage main>``).
    """
    if isinstance(section, ZODB.config.BaseConfig):
        section = section.config
    kw = {}
    for spec in OPTIONS:
        value = getattr(section, spec.attr, None)
        if value is not None:
            kw[spec.attr] = value
    dashed = getattr(section, 'revert_when_stale_dashed', None)
    if dashed is not None:
        if kw.get('revert_when_stale', dashed) != dashed:
            raise ConfigurationError(
                'revert_when_stale and revert-when-stale (the same option) '
                'are set to different values')
        kw['revert_when_stale'] = dashed
    for name, reason in IGNORED.items():
        if getattr(section, name.replace('-', '_'), None) is not None:
            warn_ignored(name, reason)
    if kw.get('name') is None:
        section_name = section.getSectionName()
        if section_name:
            kw['name'] = section_name
    return Options(**kw)


class RelStorageFactory(ZODB.config.BaseConfig):
    """The ``<relstorage>`` section.

    Options are built (and so checked) when the configuration is parsed,
    so a bad value is reported with its line before anything is opened.
    """

    def __init__(self, config):
        super().__init__(config)
        self.options = options_from_section(config)
        #: The config file this section was read from (None for a
        #: string): the site a default database belongs to.
        self.config_file = config_file_being_read()

    def adapter_factory(self):
        """The adapter section's factory; embedded SQLite when there is
        none."""
        factory = getattr(self.config, 'adapter', None)
        if factory is None:
            factory = SQLite3AdapterFactory(None, self.config_file)
        return factory

    def open(self):
        return open_configured(self.adapter_factory(),
                               options_from_section(self.config))


def open_configured(factory, options):
    """Open the storage a configuration describes (a ``<relstorage>``
    section, a zodburi URI): *factory* builds its adapter, *options* are
    its settings. Refused when it would share a database with another
    configured storage of this process through a default location."""
    options.check_supported()
    adapter = factory.create(options)
    from relstorage.storage import RelStorage
    return _opened.open(adapter, factory, options, lambda: RelStorage(
        adapter, name=options.name, options=options))


class _OpenedDatabases:
    """The databases that storage sections of this process have opened
    and not yet closed, by ``adapter.location()``.

    Two sections may open one database only when the user wrote both
    locations: a database reached through a default location (a
    ``<relstorage>`` without an adapter section and without a name, a
    ``<postgresql>`` without a dsn) shared with another section would
    make two configured databases silently one (a multi-database
    ``zope.conf`` with two bare ``<relstorage>`` sections, whose commits
    to one replaced the other's root).
    """

    def __init__(self):
        self.lock = threading.RLock()
        #: location -> [(storage weakref, by default)]
        self._open = {}

    def _alive(self, location):
        """``[(storage, by default)]`` of the open storages at
        *location*; forgets the closed and collected ones."""
        alive = [(ref(), default) for ref, default
                 in self._open.get(location, ())]
        alive = [(storage, default) for storage, default in alive
                 if storage is not None and not storage.closed]
        if alive:
            self._open[location] = [(weakref.ref(storage), default)
                                    for storage, default in alive]
        else:
            self._open.pop(location, None)
        return alive

    def open(self, adapter, factory, options, make):
        """``make()``, the storage on *adapter*'s database, recorded; refused
        when another open section has that database and either location
        is a default."""
        location = adapter.location()
        by_default = factory.is_default_location(options)
        with self.lock:
            alive = self._alive(location)
            if alive and (by_default or any(d for _, d in alive)):
                raise ConfigurationError(
                    'two storage sections of this process would open the '
                    'same database, the %s (already opened for storage '
                    '%r): %s' % (adapter.describe(), alive[0][0].label(),
                                 factory.default_location_hint))
            storage = make()
            self._open.setdefault(location, []).append(
                (weakref.ref(storage), by_default))
        return storage


_opened = _OpenedDatabases()


# -- adapter sections --------------------------------------------------------

class _AdapterFactory:
    """Base of the adapter section factories.

    ``params()`` gathers the keys the user set under the names the
    database driver expects; ``create(options)`` builds the adapter.
    """

    #: section key attribute -> driver keyword
    param_names = {}
    section_name = None

    def __init__(self, config):
        self.config = config

    def _get(self, attr, default=None):
        if self.config is None:
            return default
        value = getattr(self.config, attr, None)
        return default if value is None else value

    @property
    def driver(self):
        return self._get('driver', 'auto')

    def params(self):
        params = {}
        for attr, param in self.param_names.items():
            value = self._get(attr)
            if value is not None:
                params[param] = value
        return params

    #: What a user with two sections on one default location must do.
    default_location_hint = ''

    def create(self, options):
        raise NotSupportedYet('<%s>' % self.section_name)

    def is_default_location(self, options):
        """Whether the database is one the user did not name (the
        driver's or relstorage's default)."""
        return False


class PostgreSQLAdapterFactory(_AdapterFactory):
    """``<postgresql>``: ``dsn`` is a libpq connection string; empty means
    libpq's own defaults (PGHOST, PGDATABASE, ...)."""

    section_name = 'postgresql'
    param_names = {'dsn': 'dsn'}
    default_location_hint = (
        'a <postgresql> section without a dsn connects to the database '
        "libpq's defaults choose; give each section a dsn naming its own "
        'database (dsn dbname=main ...)')

    def is_default_location(self, options):
        return not self._get('dsn')

    def create(self, options):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        return PostgreSQLAdapter(dsn=self._get('dsn', ''),
                                 driver=self.driver,
                                 options=options,
                                 pooler=self._get('pooler', 'none'),
                                 password_command=self._get(
                                     'password_command'))


class MySQLAdapterFactory(_AdapterFactory):
    """``<mysql>``: the keys are MySQLdb's connect() keywords."""

    section_name = 'mysql'
    param_names = {name: name for name in (
        'host', 'user', 'passwd', 'db', 'port', 'unix_socket',
        'connect_timeout', 'read_timeout', 'write_timeout', 'compress',
        'named_pipe', 'init_command', 'client_flag', 'load_infile',
        'read_default_file', 'read_default_group', 'password_command',
        'ssl_mode', 'ssl_ca', 'ssl_capath', 'ssl_cert', 'ssl_key',
        'ssl_cipher')}

    default_location_hint = (
        'a <mysql> section without db uses the server\'s default; give '
        'each section a db naming its own database')

    def is_default_location(self, options):
        return not self._get('db')

    def create(self, options):
        from relstorage.adapters.mysql import MySQLAdapter
        return MySQLAdapter(driver=self.driver, options=options,
                            **self.params())


class OracleAdapterFactory(_AdapterFactory):
    """``<oracle>``: user, password and an Oracle DSN (TNS name or
    easy-connect string)."""

    section_name = 'oracle'
    param_names = {'user': 'user', 'password': 'password', 'dsn': 'dsn'}

    def create(self, options):
        from relstorage.adapters.oracle import OracleAdapter
        return OracleAdapter(driver=self.driver, options=options,
                             **self.params())


_BEING_READ = object()


class SQLite3AdapterFactory(_AdapterFactory):
    """``<sqlite3>``, and the embedded default when ``<relstorage>`` has no
    adapter section (then *config* is None)."""

    section_name = 'sqlite3'
    default_location_hint = (
        'a <relstorage> section without an adapter section (or a '
        '<sqlite3> without data-dir) keeps its database in a directory '
        'named after the storage, "default" when it has no name; name '
        'each section (<relstorage main> or "name main") or give each '
        'its own data-dir')

    def __init__(self, config, config_file=_BEING_READ):
        super().__init__(config)
        #: The config file the section was read from, None for a string
        #: (see relstorage.defaultlocation); by default the file ZConfig
        #: is reading now.
        if config_file is _BEING_READ:
            config_file = config_file_being_read()
        self.config_file = config_file

    def is_default_location(self, options):
        return not self._get('data_dir') and not options.name

    def data_dir(self, options):
        """The data-dir the section sets, else the default one for its
        site (refused when that is another config file's)."""
        return self._get('data_dir') or default_data_dir(
            self.config_file, options.name, options.read_only)

    def pragmas(self):
        return dict(self._get('pragmas') or {})

    def params(self):
        params = {}
        if self._get('data_dir'):
            params['data_dir'] = self._get('data_dir')
        params['pragmas'] = self.pragmas()
        return params

    def create(self, options):
        from relstorage.adapters.sqlite import SQLiteAdapter
        return SQLiteAdapter(
            data_dir=self.data_dir(options), pragmas=self.pragmas(),
            driver=self.driver, options=options,
            gevent_yield_interval=self._get('gevent_yield_interval'))


#: Pragmas whose value RelStorage's configurations may give as a byte
#: size with a unit (``cache_size 8mb``); a plain number means what it
#: means to SQLite.
BYTE_SIZE_PRAGMAS = ('cache_size', 'mmap_size', 'page_size',
                     'soft_heap_limit')
_BYTE_UNIT = re.compile(r'^\d+\s*[kKmMgG][bB]$')


def pragmas_from_section(section):
    """``<pragmas>`` inside ``<sqlite3>``: every ``name value`` line, as a
    {name: value string} dict. Names are lower-cased, as SQLite ignores
    their case anyway. A byte size with a unit becomes bytes, and for
    ``cache_size`` SQLite's negative count of KiB."""
    pragmas = dict(section.pragmas)
    for name in BYTE_SIZE_PRAGMAS:
        value = pragmas.get(name)
        if value is not None and _BYTE_UNIT.match(value):
            size = ZConfig.datatypes.stock_datatypes['byte-size'](value)
            pragmas[name] = str(-(size // 1024) if name == 'cache_size'
                                else size)
    return pragmas


# -- convenience for scripts -------------------------------------------------

# Prepended to every text: a component imported twice is loaded once, so
# texts that already say "%import relstorage" are fine.
_IMPORT = '%import relstorage\n'


def storage_from_string(text):
    """Open the storage described by the one storage section in *text*.

    *text* may omit ``%import relstorage``; it is added.
    """
    return ZODB.config.storageFromString(_IMPORT + text)


def storage_from_file(path):
    """Like storage_from_string, reading the configuration from *path*;
    relative ``%include`` lines are resolved against the file's
    directory."""
    path = pathlib.Path(path)
    config, _ = ZConfig.loadConfigFile(
        ZODB.config.getStorageSchema(),
        io.StringIO(_IMPORT + path.read_text()),
        url=path.absolute().as_uri())
    return ZODB.config.storageFromConfig(config.storage)
