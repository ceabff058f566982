"""The Oracle adapter (python-oracledb or cx_Oracle)."""
from .adapter import OracleAdapter  # noqa: F401
