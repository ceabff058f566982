"""The relstorage speed test: time writing and reading objects through any
ZODB storage configured in a zope.conf-style file."""
