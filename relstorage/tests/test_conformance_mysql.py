"""ZODB's storage conformance suites on MySQL/MariaDB."""
from .conformance import make_classes

globals().update(make_classes('mysql'))
