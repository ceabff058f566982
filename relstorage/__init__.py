"""A ZODB storage that keeps pickles in a relational database.

Kept small on purpose: ZConfig's ``%import relstorage`` imports this package
to find ``component.xml``, so nothing heavy is imported here.
"""

#: The release, set here only: pyproject.toml reads it (a dynamic
#: version) and so does the documentation's conf.py. The scheme is
#: semantic versioning, counted on from RelStorage 4, whose databases and
#: configuration files this release takes over: the major number changes
#: when an upgrade asks something of a site (a schema conversion, a
#: configuration key that stops opening), the minor with new features,
#: the last with fixes; ``.devN`` marks what is not released yet.
__version__ = '5.0.0.dev0'
