"""What MySQL and MariaDB know about their tables without reading them:
InnoDB's row estimates and sizes, from ``information_schema.TABLES``
(which MySQL 8 may cache for up to information_schema_stats_expiry)."""
from ..inspect import ServerStatistics

_TABLE = ('FROM information_schema.TABLES '
          'WHERE TABLE_SCHEMA = DATABASE()')


class MySQLStatistics(ServerStatistics):

    def version(self, session):
        server = self.adapter.server
        return '%s %s' % (server.flavour, server.version_string)

    def estimated_rows(self, session, table):
        rows = session.scalar('SELECT TABLE_ROWS ' + _TABLE +
                              ' AND TABLE_NAME = %s', (table,))
        return int(rows) if rows is not None else None

    def table_bytes(self, session, table):
        return int(session.scalar(
            'SELECT DATA_LENGTH + INDEX_LENGTH ' + _TABLE +
            ' AND TABLE_NAME = %s', (table,)) or 0)

    def database_bytes(self, session):
        return int(session.scalar(
            'SELECT SUM(DATA_LENGTH + INDEX_LENGTH) ' + _TABLE) or 0)
