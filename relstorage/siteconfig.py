"""The storages of a site's config file, as the console tools read it.

One loader serves ``zodbpack``, ``zodbinfo``, ``zodbcheck``,
``relstorage-upgrade``, ``zodbconvert`` and the metrics server. It takes
the file a site already has:

- bare storage sections (``<relstorage>``, ``<filestorage>``, ...);
- a ZODB config, whose ``<zodb>`` sections hold the storages (the file
  ``ZODB.config.databaseFromFile`` opens);
- a Zope ``zope.conf``, whose ``<zodb_db NAME>`` sections hold them,
  with ``%define``, ``instancehome`` and the rest of Zope's keys and
  sections, which are read past (Zope need not be installed).

A file is first read strictly (a misspelt key or section is reported as
ZConfig reports it, with the file and line ZConfig knows); when that
fails and the file has ``<zodb_db>`` sections, it is read as a zope.conf.
A file (or one it includes) that is not UTF-8 text is named, with the
offset and line of its first byte that is not.
"""
import collections
import io
import logging
import urllib.parse
import urllib.request

import ZConfig
import ZConfig.loader
import ZConfig.matcher

from .exceptions import UsageError

__all__ = [
    'Configured',
    'add_database_argument',
    'config_error_text',
    'load_config',
    'load_configured',
    'select',
]

log = logging.getLogger(__name__)

#: Storage sections at the top level and inside ``<zodb>`` sections.
STRICT_SCHEMA = """
<schema>
  <import package="ZODB"/>
  <import package="relstorage"/>
  <multisection type="ZODB.storage" attribute="storages" name="*"/>
  <multisection type="ZODB.database" attribute="databases" name="*"/>
</schema>
"""

#: Zope's ``<zodb_db NAME>``: the storage and the keys that say which
#: database it is; every other key of Zope's is read past.
ZOPE_SCHEMA = """
<schema>
  <import package="ZODB"/>
  <import package="relstorage"/>
  <sectiontype name="zodb_db"
               datatype="relstorage.siteconfig.ZopeDatabaseSection">
    <section type="ZODB.storage" name="*" attribute="storage"/>
    <key name="database-name"/>
    <multikey name="mount-point" attribute="mount_points"/>
  </sectiontype>
  <multisection type="zodb_db" attribute="zope_databases" name="+"/>
</schema>
"""

#: One storage of the file: *name* is its database's name (the name of
#: its ``<zodb_db>`` or ``<zodb>`` section, else its ``database-name``),
#: or, at the top level, the storage section's name; *database_name* is
#: the name the database has in a ZODB multi-database (its
#: ``database-name``, else its section's name), None for a storage at
#: the top level; *storage* is the
#: ZConfig factory (``.open()``), None where the storage's section type
#: is unknown here (its package is not installed: *missing* says which
#: section that was).
Configured = collections.namedtuple(
    'Configured', 'name storage database_name missing')


class ZopeDatabaseSection:
    """The datatype of a ``<zodb_db NAME>`` section read here."""

    def __init__(self, section):
        self.name = section.getSectionName()
        self.storage = section.storage
        self.database_name = section.database_name or self.name
        self.mount_points = section.mount_points
        self.missing = getattr(section, 'ignored_sections', ())


def _where(url):
    """The path of a ``file:`` *url* (what ZConfig makes of a path), else
    the URL."""
    parts = urllib.parse.urlsplit(url or '')
    if parts.scheme == 'file':
        return urllib.request.url2pathname(parts.path)
    return url


#: ZConfig's errors whose text is their message and where it is (the
#: file as a URL, on a line of its own); said here as a compiler does.
_POSITIONED = (ZConfig.ConfigurationError.__str__,
               ZConfig.ConfigurationSyntaxError.__str__,
               ZConfig.DataConversionError.__str__)


def config_error_text(error):
    """One line for ZConfig's *error*: ``FILE, line N: what is wrong``
    where ZConfig knows the file and line (it keeps them beside a
    misspelt key's message, not in it)."""
    text = str(error)
    lineno = getattr(error, 'lineno', None)
    where = _where(getattr(error, 'url', None))
    if type(error).__str__ in _POSITIONED and (
            lineno or where and where not in error.message):
        text = '%s%s: %s' % (where or 'the configuration',
                             ', line %d' % lineno if lineno else '',
                             error.message)
    return ' '.join(text.split())


class _CheckedLoader(ZConfig.loader.ConfigLoader):
    """Says which file is not UTF-8 text, and where (ZConfig lets the
    decoding error out, naming neither)."""

    def openResource(self, url):
        try:
            return super().openResource(url)
        except UnicodeDecodeError as e:
            error = ZConfig.ConfigurationError(
                'not UTF-8 text: byte 0x%02x at offset %d'
                % (e.object[e.start], e.start), url)
            error.lineno = e.object.count(b'\n', 0, e.start) + 1
        raise error


def load_config(schema, path):
    """``(config, handler)``: ZConfig's reading of the file at *path*
    with *schema* (ZConfig.loadConfig), a file that is not UTF-8 text
    refused with ZConfig.ConfigurationError naming it."""
    return _CheckedLoader(schema).loadURL(path)


class _Ignored:
    """Matches a section read past: any key, any nested section."""

    def __init__(self, type_name):
        self.type_name = type_name

    def addValue(self, key, value, position):
        pass

    def finish(self):  # pragma: no cover -- never asked for a value
        return None


def _known_key(matcher, key):
    try:
        realkey = matcher.type.keytype(key)
    except ValueError:
        return True  # let ZConfig report it
    return any(k == realkey or (info.name == '+' and not info.issection())
               for k, info in matcher.type)


class _Lenient:
    """Reads past the keys its section type does not declare."""

    def addValue(self, key, value, position):
        if _known_key(self, key):
            super().addValue(key, value, position)


class _LenientSchema(_Lenient, ZConfig.matcher.SchemaMatcher):
    pass


class _LenientSection(_Lenient, ZConfig.matcher.SectionMatcher):
    """A ``<zodb_db>``: remembers the sections it read past."""

    def __init__(self, *args):
        super().__init__(*args)
        self.ignored = []

    def finish(self):
        self._values['ignored_sections'] = self.ignored
        return super().finish()


class _ZopeLoader(_CheckedLoader):
    """A zope.conf loader: sections and keys this schema does not know
    (Zope's own, or of a package that is not installed) are read past;
    a storage section whose type is unknown is remembered by name."""

    def __init__(self, schema):
        super().__init__(schema)
        self.unimported = []
        #: Whether the file has a <zodb_db> section (is a zope.conf).
        self.zope = False

    def createSchemaMatcher(self):
        return _LenientSchema(self.schema)

    def startSection(self, parent, type_, name):
        if isinstance(parent, _Ignored):
            return _Ignored(type_)
        if not isinstance(parent, _Lenient):
            # Inside a storage section: as strict as ever.
            return super().startSection(parent, type_, name)
        try:
            t = self.schema.gettype(type_)
            info = parent.type.getsectioninfo(type_, name)
        except ZConfig.ConfigurationError:
            return _Ignored(type_)
        if t.name == 'zodb_db':
            self.zope = True
            return _LenientSection(info, t, name, parent.handlers)
        return super().startSection(parent, type_, name)

    def endSection(self, parent, type_, name, matcher):
        if isinstance(matcher, _Ignored):
            if isinstance(parent, _LenientSection):
                parent.ignored.append('<%s%s>' % (
                    type_, ' ' + name if name else ''))
            return
        if not isinstance(parent, _Ignored):
            super().endSection(parent, type_, name, matcher)

    def importSchemaComponent(self, pkgname):
        try:
            super().importSchemaComponent(pkgname)
        except ZConfig.SchemaResourceError:
            self.unimported.append(pkgname)


def _schema(text):
    return ZConfig.loadSchemaFile(io.StringIO(text))


def _strict(path):
    config, _ = load_config(_schema(STRICT_SCHEMA), path)
    found = []
    for index, storage in enumerate(config.storages):
        name = getattr(storage, 'name', None) or 'storage %d' % (index + 1)
        found.append(Configured(name, storage, None, None))
    for database in config.databases:
        name = (database.name or database.config.database_name
                or 'database %d' % (len(found) + 1))
        # The name ZODB's config gives the database (ZODB.config).
        found.append(Configured(name, database.config.storage,
                                database.config.database_name
                                or database.name or '', None))
    return found


def _zope(path, loader):
    config, _ = loader.loadURL(path)
    found = []
    for database in config.zope_databases:
        missing = None
        if database.storage is None and database.missing:
            missing = '%s (%s)' % (
                ', '.join(database.missing),
                'not installed: %s' % ', '.join(loader.unimported)
                if loader.unimported else 'an unknown section type')
        found.append(Configured(database.name, database.storage,
                                database.database_name, missing))
    return found


def load_configured(path):
    """``[Configured]``: every storage of the config file at *path*, in
    the file's order (top-level storages first). Raises UsageError for a
    file that cannot be opened or read as any of the three kinds, in one
    line naming what is wrong, and the file and line where ZConfig knows
    them."""
    try:
        return _load_configured(path)
    except ZConfig.ConfigurationError as e:
        raise UsageError(config_error_text(e)) from None


def _load_configured(path):
    try:
        return _strict(path)
    except ZConfig.ConfigurationError as strict_error:
        loader = _ZopeLoader(_schema(ZOPE_SCHEMA))
        try:
            found = _zope(path, loader)
        except ZConfig.ConfigurationError:
            if loader.zope:
                raise  # what is wrong in a zope.conf
            raise strict_error from None
        if not found:
            raise strict_error from None
        return found


def select(path, names=None, required=True):
    """``[Configured]``: the storages of the file at *path* to work on,
    those of the databases *names* (all when None or empty). Raises
    UsageError naming what is wrong: no storage section at all (when
    *required*), a name the file does not have, or a chosen database
    whose storage section cannot be read here. Unchosen, such a
    database is left out, and said so in the log."""
    found = load_configured(path)
    if required and not found:
        raise UsageError('%s holds no storage section (bare, in <zodb> or '
                         'in <zodb_db NAME>)' % path)
    if names:
        known = [entry.name for entry in found]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise UsageError('%s has no database named %s (it has: %s)' % (
                path, ', '.join(unknown), ', '.join(known) or 'none'))
        found = [entry for entry in found if entry.name in names]
    usable = []
    for entry in found:
        if entry.storage is not None:
            usable.append(entry)
            continue
        why = 'database %s of %s: its storage section cannot be read ' \
              'here: %s' % (entry.name, path, entry.missing)
        if names:
            raise UsageError(why)
        # A package the site has and this tool has not (tempstorage) is
        # no surprise; a section type nobody defines may be a typo.
        level = logging.INFO if 'not installed' in entry.missing \
            else logging.WARNING
        log.log(level, '%s; left out', why)
    return usable


def add_database_argument(parser):
    """``--database NAME`` (repeatable, or comma-separated) on a tool's
    command line."""
    parser.add_argument(
        '--database', action='append', metavar='NAME', default=[],
        type=lambda text: [n.strip() for n in text.split(',') if n.strip()],
        help='work on the database of this name only (a <zodb_db NAME> '
             'or <zodb NAME> section, or a named storage section); '
             'repeatable; default: all of the file')


def chosen(args):
    """The database names ``--database`` gave (a flat list)."""
    return [name for names in args.database for name in names]


def peers(path, kind=object):
    """``{storage name: (database name, {other database name: its
    storage section})}`` of the databases of a multi-database that the
    file at *path* configures, the others' sections those that are
    instances of *kind*; empty for a file that configures none (or that
    cannot be read: the tools say what is wrong)."""
    try:
        entries = [entry for entry in load_configured(path)
                   if entry.database_name is not None]
    except (ZConfig.ConfigurationError, UsageError, OSError):
        return {}  # the tools say what is wrong
    sections = {entry.database_name: entry.storage for entry in entries
                if entry.storage is not None
                and isinstance(entry.storage, kind)}
    return {entry.name: (entry.database_name,
                         {name: section for name, section in sections.items()
                          if name != entry.database_name})
            for entry in entries}
