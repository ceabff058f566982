"""ZODB's storage conformance suites on the embedded SQLite adapter."""
from .conformance import make_classes

globals().update(make_classes('sqlite'))
