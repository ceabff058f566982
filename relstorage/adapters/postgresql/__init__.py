"""PostgreSQL adapter (psycopg2)."""
from .adapter import PostgreSQLAdapter  # noqa: F401
