"""What MySQL and MariaDB know about their tables without reading them:
InnoDB's row estimates and sizes, from ``information_schema.TABLES``
(which MySQL 8 may cache for up to information_schema_stats_expiry)."""
from ..inspect import ServerStatistics
from ..sql import SQL

#: A figure of the tables of the current database, of one of them where
#: ``{which}`` is the table's name as a parameter.
_FIGURE = SQL('SELECT {figure} FROM information_schema.TABLES '
              'WHERE TABLE_SCHEMA = DATABASE(){which}')
_ONE = ' AND TABLE_NAME = %s'
ROWS = _FIGURE.format(figure='TABLE_ROWS', which=_ONE)
TABLE_BYTES = _FIGURE.format(figure='DATA_LENGTH + INDEX_LENGTH', which=_ONE)
DATABASE_BYTES = _FIGURE.format(figure='SUM(DATA_LENGTH + INDEX_LENGTH)',
                                which='')


class MySQLStatistics(ServerStatistics):

    joins_along_the_key = True

    def version(self, session):
        server = self.adapter.server
        return '%s %s' % (server.flavour, server.version_string)

    def estimated_rows(self, session, table):
        rows = session.scalar(ROWS, (table,))
        return int(rows) if rows is not None else None

    def table_bytes(self, session, table):
        return int(session.scalar(TABLE_BYTES, (table,)) or 0)

    def database_bytes(self, session):
        return int(session.scalar(DATABASE_BYTES) or 0)
