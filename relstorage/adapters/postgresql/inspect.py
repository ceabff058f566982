"""What PostgreSQL knows about its tables without reading them: the
planner's row estimates (``pg_class.reltuples``) and sizes on disk."""
from ..inspect import ServerStatistics


class PostgreSQLStatistics(ServerStatistics):

    kind = 'PostgreSQL'
    version_sql = 'SHOW server_version'

    def estimated_rows(self, session, table):
        rows = session.scalar(
            'SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)',
            (table,))
        # -1: never vacuumed or analyzed, so no estimate at all.
        return int(rows) if rows is not None and rows >= 0 else None

    def table_bytes(self, session, table):
        return int(session.scalar(
            'SELECT pg_total_relation_size(to_regclass(%s))', (table,)) or 0)

    def database_bytes(self, session):
        return int(session.scalar(
            'SELECT pg_database_size(current_database())'))
