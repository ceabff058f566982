"""Choosing a database's DB-API driver from the ``driver`` option."""
from ..exceptions import ConfigurationError


def choose_driver(name, drivers, spellings, auto, database, supported,
                  extra):
    """An instance of the driver class the ``driver`` option *name* asks
    for (any case): one of *drivers* (``{name: class}``, whose
    constructor imports the module), by one of its *spellings*
    (lower-case spelling -> name), or for ``auto`` the first of *auto*
    that imports. Errors name the option, the *database*, the *supported*
    spellings and the *extra* (pyproject.toml) that installs a driver."""
    key = str(name or 'auto').lower()
    if key == 'auto':
        candidates = auto
    elif key in spellings:
        candidates = (spellings[key],)
    else:
        raise ConfigurationError(
            'driver: unknown or unsupported %s driver %r (supported: %s)'
            % (database, name, supported))
    problems = []
    for candidate in candidates:
        try:
            return drivers[candidate]()
        except ImportError as e:
            problems.append('%s: %s' % (candidate, e))
    raise ConfigurationError(
        'driver: no %s driver could be imported (relstorage\'s %s extra '
        'installs one): %s' % (database, extra, '; '.join(problems)))
