"""A ZODB storage that keeps pickles in a relational database.

Kept small on purpose: ZConfig's ``%import relstorage`` imports this package
to find ``component.xml``, so nothing heavy is imported here.
"""


def __getattr__(name):
    if name == '__version__':
        from importlib import metadata
        try:
            return metadata.version('relstorage')
        except metadata.PackageNotFoundError:
            return 'unknown'
    raise AttributeError('module %r has no attribute %r' % (__name__, name))
