"""Embedded SQLite adapter (the standard library's sqlite3)."""
from .adapter import SQLiteAdapter  # noqa: F401
