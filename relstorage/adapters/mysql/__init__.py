"""MySQL and MariaDB adapter (mysqlclient, or PyMySQL as a fallback)."""
from .adapter import MySQLAdapter  # noqa: F401
