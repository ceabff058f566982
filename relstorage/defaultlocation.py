"""Where a storage section that names no SQLite data-dir keeps its
database, so that two separately configured sites never share one
without saying so.

A configuration read from a file belongs to a site: its database goes
beside the file, as Zope keeps ``Data.fs`` under ``$INSTANCE/var``. For
``$INSTANCE/etc/zope.conf`` (a file in a folder named ``etc``) that is
``$INSTANCE/var/relstorage/<name>``; for a file anywhere else,
``var/relstorage/<name>`` in the file's folder. ``<name>`` is the
storage's name, ``default`` without one. A configuration given as a
string has no site: it keeps the per-user location
(``$XDG_DATA_HOME/relstorage/<name>``).

Each default directory records the config file it was made for, in a
file named ``configured-by`` (the config file's path, relative to the
directory, so that an instance folder moved as a whole keeps its
database). Another config file reaching that directory (two config
files in one folder, a per-user database claimed by a site) is refused
with an error saying how to share it deliberately: ``data-dir``.

Databases made before sites had a location of their own are in the
per-user location. A config file whose site location does not exist yet
and whose per-user location holds a database takes that one: the first
such config file to open it is recorded as its own (with a warning
saying so), and any other config file is then refused. Creating the
site's directory (or setting ``data-dir``) gives a site a new database
instead.
"""
import logging
import os
import sys
import urllib.parse
import urllib.request

from .exceptions import ConfigurationError

log = logging.getLogger(__name__)

#: The file, in a default data directory, naming the config file it
#: belongs to.
MARKER = 'configured-by'

#: The code of ZConfig's parser's methods, whose frames are looked for.
_PARSER_CODE = set()

#: Files whose presence means a data directory holds a database (this
#: storage's, or RelStorage 4's).
DATABASE_FILES = ('relstorage.sqlite3', 'main.sqlite3')


def per_user_data_dir(name):
    """``$XDG_DATA_HOME/relstorage/<name>``, with ``~/.local/share``
    when XDG_DATA_HOME is unset or empty, and ``default`` when the storage
    has no name."""
    # The environment read on purpose (see test_layers): XDG_DATA_HOME is
    # the established convention for where per-user data goes; it only
    # places the default data directory, which a data-dir setting replaces.
    base = (os.environ.get('XDG_DATA_HOME')
            or os.path.expanduser('~/.local/share'))
    return os.path.join(base, 'relstorage', _dir_name(name))


def site_data_dir(config_file, name):
    """The default data directory of a storage configured in the file
    *config_file* (an absolute path)."""
    folder = os.path.dirname(config_file)
    if os.path.basename(folder) == 'etc':
        folder = os.path.dirname(folder)
    return os.path.join(folder, 'var', 'relstorage', _dir_name(name))


def _dir_name(name):
    # Path separators become '_' so that a name cannot point elsewhere.
    name = name or 'default'
    for sep in (os.sep, os.altsep, '/', '\\'):
        if sep:
            name = name.replace(sep, '_')
    if name in ('.', '..'):
        name = 'default'
    return name


def config_file_being_read():
    """The absolute path of the config file ZConfig is reading now, or
    None when it reads a string (or nothing).

    ZConfig tells a section's datatype nothing about where the section
    came from; the parser reading it is on the stack, with the URL of
    its file. With ``%include``, the outermost file of that reading
    counts: the site's own file, not a file it includes (which several
    sites may share)."""
    from ZConfig.cfgparser import ZConfigParser
    if not _PARSER_CODE:
        _PARSER_CODE.update(
            f.__code__ for f in vars(ZConfigParser).values()
            if hasattr(f, '__code__'))
    outermost = None
    frame = sys._getframe(1)
    while frame is not None:
        # Only the parser's own frames have their locals read: reading a
        # frame's locals makes the frame keep a copy of them, which would
        # keep alive whatever the caller's frames hold afterwards.
        parser = (frame.f_locals.get('self')
                  if frame.f_code in _PARSER_CODE else None)
        if isinstance(parser, ZConfigParser) and (
                outermost is None or parser.context is outermost.context):
            outermost = parser
        frame = frame.f_back
    url = outermost.url if outermost is not None else None
    if not url or not url.lower().startswith('file:'):
        return None
    return os.path.abspath(
        urllib.request.url2pathname(urllib.parse.urlsplit(url).path))


def has_database(data_dir):
    return any(os.path.exists(os.path.join(data_dir, name))
               for name in DATABASE_FILES)


def recorded_config(data_dir):
    """The config file the directory records (as it resolves from the
    directory), or None when it records none."""
    try:
        with open(os.path.join(data_dir, MARKER)) as f:
            recorded = f.read().strip()
    except FileNotFoundError:
        return None
    return os.path.join(data_dir, recorded) if recorded else None


def _same_file(recorded, config_file):
    try:
        return os.path.samefile(recorded, config_file)
    except OSError:     # the recorded file is gone
        return False


def _record(data_dir, config_file):
    """Record *config_file* as the directory's, unless another config
    file got there first; the config file recorded."""
    rel = os.path.relpath(config_file, data_dir)
    tmp = os.path.join(data_dir, '%s.%d.tmp' % (MARKER, os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (rel + '\n').encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, os.path.join(data_dir, MARKER))  # never replaces
    except FileExistsError:
        pass
    finally:
        os.remove(tmp)
    return recorded_config(data_dir)


def _refused(data_dir, recorded, what):
    recorded = (os.path.normpath(os.path.abspath(recorded)) if recorded
                else 'a configuration')
    return ConfigurationError(
        'the default SQLite database in %s belongs to %s; %s would share '
        'it without saying so. To share it deliberately, give this '
        'configuration data-dir %s (in a <sqlite3> section); to give it a '
        'database of its own, give it another data-dir or another name '
        '(the record is %s)' % (data_dir, recorded, what, data_dir,
                                os.path.join(data_dir, MARKER)))


def _claim(data_dir, config_file, read_only):
    """Check that *data_dir* is *config_file*'s, recording it when it
    records nobody; refuse it when it is another's."""
    recorded = recorded_config(data_dir)
    if recorded is None and not read_only:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        recorded = _record(data_dir, config_file)
    if recorded is not None and not _same_file(recorded, config_file):
        raise _refused(data_dir, recorded, 'the config file %s'
                       % config_file)


def default_data_dir(config_file, name, read_only=False):
    """The data directory of a storage named *name* whose configuration
    sets none, read from the file *config_file* (None for a string).
    Refused (ConfigurationError) when it would be another config
    file's."""
    legacy = per_user_data_dir(name)
    if config_file is None:
        recorded = recorded_config(legacy)
        if recorded is not None:
            raise _refused(legacy, recorded,
                           'a configuration given as a string')
        return legacy
    site = site_data_dir(config_file, name)
    if not os.path.isdir(site) and has_database(legacy):
        first = recorded_config(legacy) is None
        _claim(legacy, config_file, read_only)
        if first and not read_only:
            log.warning(
                'the config file %s has no database beside it (%s) but '
                'uses the one in %s, made before databases had a '
                'location per site; it is now recorded as this file\'s, '
                'and other config files are refused it. Set data-dir %s '
                'to say so in the file, or move the directory to %s',
                config_file, site, legacy, legacy, site)
        return legacy
    _claim(site, config_file, read_only)
    return site
