"""ZODB's storage conformance suites on PostgreSQL."""
from .conformance import make_classes

globals().update(make_classes('postgresql'))
