"""ZODB's storage conformance suites on PostgreSQL through psycopg 3
(``<postgresql> driver psycopg``); test_conformance_postgresql.py runs
them through psycopg2, the default."""
from .conformance import make_classes

globals().update(make_classes('postgresql', driver='psycopg'))
