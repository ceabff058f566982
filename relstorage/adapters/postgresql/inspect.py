"""What PostgreSQL knows about its tables without reading them: the
planner's row estimates (``pg_class.reltuples``) and sizes on disk."""
from ..inspect import ServerStatistics


class PostgreSQLStatistics(ServerStatistics):

    kind = 'PostgreSQL'
    version_sql = 'SHOW server_version'

    def estimated_rows(self, session, table):
        # As the planner does: the rows per page the last ANALYZE (or
        # VACUUM) saw, times the pages the table has now, so that a table
        # that grew since is not taken for its old size. reltuples -1:
        # never analyzed, no estimate at all.
        rows = session.scalar(
            "SELECT CASE WHEN reltuples < 0 OR relpages = 0 THEN NULL "
            "ELSE reltuples / relpages * (pg_relation_size(oid) / "
            "current_setting('block_size')::int) END "
            "FROM pg_class WHERE oid = to_regclass(%s)", (table,))
        return int(rows) if rows is not None else None

    def table_bytes(self, session, table):
        return int(session.scalar(
            'SELECT pg_total_relation_size(to_regclass(%s))', (table,)) or 0)

    def database_bytes(self, session):
        return int(session.scalar(
            'SELECT pg_database_size(current_database())'))
