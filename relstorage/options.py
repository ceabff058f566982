"""Every ``<relstorage>`` option, its type and its default, in one table.

`Options` is the single object the rest of the package reads its settings
from. The ZConfig schema (``component.xml``) deliberately declares no
defaults, so the values below are the only defaults there are: a key left
out of ``zope.conf`` and a keyword left out of ``Options(...)`` mean the
same thing.

Option names are spelled as in ``zope.conf`` (``keep-history``); the
attribute is the same name with ``-`` replaced by ``_`` (``keep_history``).
``revert_when_stale`` has always been spelled with underscores.
"""
import logging
import math
from dataclasses import dataclass

from relstorage.exceptions import ConfigurationError
from relstorage.exceptions import NotSupportedYet

log = logging.getLogger(__name__)

__all__ = [
    'Options',
    'OptionSpec',
    'OPTIONS',
    'NOT_YET_SUPPORTED',
    'option_spec',
]


@dataclass(frozen=True)
class OptionSpec:
    """How one option is spelled, typed, bounded and defaulted.

    ``kind`` is one of:

    ``bool``     True or False.
    ``int``      an integer (not a bool).
    ``bytes``    an integer count of bytes; in ``zope.conf`` it may be
                 written with a size suffix such as ``16kb`` or ``1gb``.
    ``float``    a real number; integers are accepted and stored as float.
    ``number``   an int or a float, kept as given.
    ``str``      a string.
    ``strings``  a list of strings; a single string is split on whitespace.
    ``choice``   one of ``choices``, compared case-insensitively.

    ``nullable`` options also accept None, which means "not set".
    """
    name: str
    default: object
    kind: str
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()
    doc: str = ''

    @property
    def attr(self):
        return self.name.replace('-', '_')

    def coerce(self, value):
        """Return *value* in canonical form or raise ConfigurationError."""
        if value is None:
            if self.nullable:
                return None
            self._reject(value, 'a value is required')
        handler = getattr(self, '_coerce_' + self.kind)
        value = handler(value)
        if self.minimum is not None and value < self.minimum:
            self._reject(value, 'must be at least %s' % self.minimum)
        if self.maximum is not None and value > self.maximum:
            self._reject(value, 'must be at most %s' % self.maximum)
        return value

    def _reject(self, value, why):
        raise ConfigurationError(
            'invalid value for option %s: %r (%s)' % (self.name, value, why))

    def _coerce_bool(self, value):
        if not isinstance(value, bool):
            self._reject(value, 'expected true or false')
        return value

    def _coerce_int(self, value):
        if isinstance(value, bool) or not isinstance(value, int):
            self._reject(value, 'expected an integer')
        return value

    _coerce_bytes = _coerce_int

    def _coerce_real(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._reject(value, 'expected a number')
        if not math.isfinite(value):
            self._reject(value, 'expected a finite number')
        return value

    def _coerce_float(self, value):
        return float(self._coerce_real(value))

    _coerce_number = _coerce_real

    def _coerce_str(self, value):
        if not isinstance(value, str):
            self._reject(value, 'expected a string')
        return value

    def _coerce_strings(self, value):
        if isinstance(value, str):
            value = value.split()
        if (not isinstance(value, (list, tuple))
                or not all(isinstance(v, str) for v in value)):
            self._reject(value, 'expected a list of strings')
        return list(value)

    def _coerce_choice(self, value):
        if isinstance(value, str) and value.lower() in self.choices:
            return value.lower()
        self._reject(value, 'expected one of %s' % ', '.join(self.choices))


# The order here is the order of zope.conf documentation and of repr().
OPTIONS = (
    OptionSpec('name', None, 'str', nullable=True,
               doc='Storage name; defaults to the section name.'),
    OptionSpec('read-only', False, 'bool',
               doc='Refuse every write.'),
    OptionSpec('keep-history', True, 'bool',
               doc='Keep every revision (undo, history) or only the '
                   'current one.'),
    OptionSpec('create-schema', True, 'bool',
               doc='Create the tables when the database has none.'),
    OptionSpec('commit-lock-timeout', 30, 'number', minimum=0,
               doc='Seconds to wait for the commit lock.'),
    OptionSpec('network-timeout', 60, 'number', minimum=0,
               doc='Seconds a database call may wait on a server that has '
                   'gone silent (a dropped route, a paused host) before it '
                   'fails naming the server, and that opening a connection '
                   'may take; 0: the operating system\'s defaults '
                   '(minutes to hours).'),
    OptionSpec('commit-lock-id', 0, 'int',
               doc='Oracle only: id of the DBMS_LOCK commit lock.'),
    OptionSpec('blob-dir', None, 'str', nullable=True,
               doc='Directory for blob files; no blob support without it.'),
    OptionSpec('shared-blob-dir', False, 'bool',
               doc='Blob dir is shared by all clients, blobs are not '
                   'stored in the database.'),
    OptionSpec('blob-cache-size', None, 'bytes', nullable=True, minimum=0,
               doc='Bytes the local blob cache may hold; None is '
                   'unbounded.'),
    OptionSpec('blob-cache-size-check', 10, 'int', minimum=0, maximum=100,
               doc='Percent of blob-cache-size written before the cache '
                   'is checked.'),
    OptionSpec('blob-cache-size-check-external', False, 'bool',
               doc='Run the blob cache check in a separate process.'),
    OptionSpec('blob-chunk-size', 1048576, 'bytes', minimum=1,
               doc='Bytes per database chunk of a blob.'),
    OptionSpec('replica-conf', None, 'str', nullable=True,
               doc='File listing the read-write servers to fail over '
                   'between, in order.'),
    OptionSpec('ro-replica-conf', None, 'str', nullable=True,
               doc='File listing read-only replicas used for loads.'),
    OptionSpec('replica-timeout', 600.0, 'float', minimum=0,
               doc='Seconds on a later server before going back to the '
                   'first; 0: never.'),
    OptionSpec('replica-max-lag', 2.0, 'float', minimum=0,
               doc='Seconds to wait for a replica to replay what this '
                   'process has seen before loading from the read-write '
                   'server.'),
    OptionSpec('revert_when_stale', False, 'bool',
               doc='On a database older than what was seen (transactions '
                   'lost in a failover), go back to its view, saying so in '
                   'the log, instead of raising StaleDatabase.'),
    OptionSpec('poll-interval', 0.0, 'float', minimum=0,
               doc='Seconds a connection may skip polling for changes.'),
    OptionSpec('pack-gc', True, 'bool',
               doc='Remove unreachable objects when packing.'),
    OptionSpec('pack-prepack-only', False, 'bool',
               doc='Only run the pre-pack analysis.'),
    OptionSpec('pack-skip-prepack', False, 'bool',
               doc='Reuse the previous pre-pack analysis.'),
    OptionSpec('pack-batch-timeout', 1.0, 'float', minimum=0,
               doc='Seconds of deletion per batch before the commit lock '
                   'is released.'),
    OptionSpec('pack-commit-busy-delay', 5.0, 'float', minimum=0,
               doc='Seconds the packer sleeps when commits are waiting.'),
    OptionSpec('pack-graph-mb', 512, 'number', minimum=0,
               doc='Megabytes the pre-pack may hold its reference graph '
                   'in; a larger graph is followed in the database. 0 '
                   'always uses the database.'),
    OptionSpec('pack-workers', None, 'int', nullable=True, minimum=0,
               maximum=64,
               doc='Worker processes the pre-pack reads references in; '
                   '0: none. None: as many as the CPUs this process may '
                   'use, at most 4, and none with a single CPU.'),
    OptionSpec('cache-servers', None, 'strings', nullable=True,
               doc='Shared cache servers (host:port ...).'),
    OptionSpec('cache-module-name', None, 'str', nullable=True,
               doc='Module implementing the shared cache client.'),
    OptionSpec('cache-prefix', None, 'str', nullable=True,
               doc='Prefix of shared cache keys.'),
    # 100 MB, not RelStorage's 10 (from 2008): a Zope-style script's
    # 100,000 small objects take about 25 MB here, and a process whose
    # working set does not fit reads it from the database again.
    OptionSpec('cache-local-mb', 100, 'number', minimum=0,
               doc='Megabytes of the process-wide pickle cache; 0 '
                   'disables it.'),
    OptionSpec('cache-local-object-max', 16384, 'bytes', minimum=0,
               doc='Largest pickle, in bytes, the local cache keeps.'),
    OptionSpec('cache-local-compression', 'none', 'choice',
               choices=('none', 'zlib', 'bz2'),
               doc='Compression of pickles in the local cache.'),
    OptionSpec('cache-local-dir', None, 'str', nullable=True,
               doc='Directory where the local cache is saved between runs.'),
    OptionSpec('cache-delta-size-limit', 100000, 'int', minimum=0,
               doc='Objects tracked by the cache between full polls.'),
    # Not a RelStorage option: see relstorage.metrics.
    OptionSpec('metrics', False, 'bool',
               doc='Record Prometheus metrics (commits, conflicts, loads, '
                   'polls, caches, packs) in prometheus_client\'s default '
                   'registry; needs the metrics extra.'),
)

_BY_ATTR = {spec.attr: spec for spec in OPTIONS}

#: Keys a RelStorage 4 configuration may carry that this storage accepts
#: and ignores, each with the reason a warning gives (RelStorage itself
#: ignores or deprecates them, or they tune machinery this storage does
#: not have). Only the ``<relstorage>`` keys; ``<sqlite3>`` has
#: IGNORED_SQLITE_KEYS.
IGNORED = {
    'cache-local-dir-count':
        'deprecated by RelStorage, which ignores it',
    'cache-local-dir-read-count':
        'deprecated by RelStorage, which ignores it',
    'cache-local-dir-compress':
        'deprecated by RelStorage, which ignores it',
    'cache-local-dir-write-max-size':
        'the persistent cache here is bounded by cache-local-mb',
    'cache-local-storage':
        'the local cache implementation is not pluggable here',
}

#: Options accepted (they are part of RelStorage's configuration) that
#: have no effect here: a warning names them, once per process.
UNUSED = {
    'cache-servers':
        'memcache is not used (RelStorage marks it for removal); the '
        'process-wide cache is kept coherent by polls',
    'cache-module-name':
        'memcache is not used (RelStorage marks it for removal)',
}
_warned = set()


def warn_ignored(name, reason):
    """Log, once per process, that option *name* is ignored."""
    if name not in _warned:
        _warned.add(name)
        log.warning('relstorage option %s is ignored: %s', name, reason)
IGNORED_SQLITE_KEYS = {
    'gevent_yield_interval':
        'gevent is not in use (neither driver gevent sqlite3 nor gevent\'s '
        'monkey-patching)',
}

# Accepted options whose feature does not exist yet. Setting one of them to
# anything but its default makes Options.check_supported() refuse to open
# the storage, instead of silently ignoring the setting. Remove a name here
# when its feature lands.
NOT_YET_SUPPORTED = frozenset({
    'cache-local-compression',
})

_unknown = NOT_YET_SUPPORTED - {spec.name for spec in OPTIONS}
if _unknown:  # pragma: no cover - guards against typos in the set above
    raise AssertionError('NOT_YET_SUPPORTED names unknown options: %s'
                         % sorted(_unknown))
del _unknown


def option_spec(key):
    """The OptionSpec for *key*, spelled with '-' or '_'.

    Raises ConfigurationError naming *key* when there is no such option.
    """
    spec = _BY_ATTR.get(str(key).replace('-', '_'))
    if spec is None:
        raise ConfigurationError('unknown relstorage option: %s' % (key,))
    return spec


class Options:
    """The settings of one storage.

    ``Options(**kw)`` takes option names spelled with '-' or '_' and checks
    every value; ``Options()`` holds the defaults. Assigning an attribute
    is checked the same way, so an Options object never holds a value of
    the wrong type.
    """

    def __init__(self, **kw):
        for spec in OPTIONS:
            default = spec.default
            if isinstance(default, list):  # pragma: no cover - none today
                default = list(default)
            object.__setattr__(self, spec.attr, default)
        for key, value in kw.items():
            self._set(key, value)

    @classmethod
    def defaults(cls):
        """A new Options holding every default."""
        return cls()

    @staticmethod
    def option_names():
        """Every option name, spelled as in zope.conf."""
        return tuple(spec.name for spec in OPTIONS)

    def _set(self, key, value):
        spec = option_spec(key)
        object.__setattr__(self, spec.attr, spec.coerce(value))

    def __setattr__(self, attr, value):
        self._set(attr, value)

    def __delattr__(self, attr):
        raise AttributeError('options cannot be deleted: %s' % attr)

    def copy(self, **changes):
        """A new Options equal to this one except for *changes*."""
        new = self.__class__.__new__(self.__class__)
        for spec in OPTIONS:
            value = getattr(self, spec.attr)
            if isinstance(value, list):
                value = list(value)
            object.__setattr__(new, spec.attr, value)
        for key, value in changes.items():
            new._set(key, value)
        return new

    def as_dict(self):
        """All options as {attribute name: value}."""
        return {spec.attr: getattr(self, spec.attr) for spec in OPTIONS}

    def changed(self):
        """The options that differ from their default, as {attr: value}."""
        return {spec.attr: getattr(self, spec.attr) for spec in OPTIONS
                if getattr(self, spec.attr) != spec.default}

    def is_default(self, key):
        spec = option_spec(key)
        return getattr(self, spec.attr) == spec.default

    def check_supported(self):
        """Raise NotSupportedYet naming every option that asks for a
        feature this release does not have (all of them, in one error)."""
        unsupported = [(spec.name, getattr(self, spec.attr))
                       for spec in OPTIONS
                       if spec.name in NOT_YET_SUPPORTED
                       and not self.is_default(spec.name)]
        if len(unsupported) == 1:
            [(name, value)] = unsupported
            raise NotSupportedYet(name, 'set to %r' % (value,))
        if unsupported:
            raise NotSupportedYet(
                ', '.join(name for name, _ in unsupported),
                'set to ' + ', '.join('%s=%r' % item for item in unsupported))
        for name, reason in UNUSED.items():
            if not self.is_default(name):
                warn_ignored(name, reason)

    def __eq__(self, other):
        if not isinstance(other, Options):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None

    def __repr__(self):
        args = ', '.join('%s=%r' % item for item in self.changed().items())
        return '%s(%s)' % (self.__class__.__name__, args)
