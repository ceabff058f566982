"""What PostgreSQL knows about its tables without reading them: the
planner's row estimates (``pg_class.reltuples``) and sizes on disk."""
from ..inspect import ServerStatistics


class PostgreSQLStatistics(ServerStatistics):

    kind = 'PostgreSQL'
    version_sql = 'SHOW server_version'
    # The planner's estimates (see estimated_rows); where a table was
    # never analyzed (a database just filled), its primary key's size on
    # disk over the bytes an entry takes there (about 32 and 23, pages'
    # overheads included), which dead entries make larger.
    revision_counts_sql = (
        "SELECT COALESCE(MAX(r.rows) FILTER (WHERE r.name = 'object_state'), "
        "pg_relation_size(to_regclass('object_state_pkey')) / 32), "
        "COALESCE(MAX(r.rows) FILTER (WHERE r.name = 'current_object'), "
        "pg_relation_size(to_regclass('current_object_pkey')) / 23) "
        "FROM (SELECT relname AS name, CASE WHEN reltuples < 0 OR "
        "relpages = 0 THEN NULL ELSE reltuples / relpages * "
        "(pg_relation_size(oid) / current_setting('block_size')::int) "
        "END AS rows FROM pg_class WHERE oid IN ("
        "to_regclass('object_state'), to_regclass('current_object'))) r")
    # Both keys read in order and merged: each revision's row once, in
    # order, instead of a search of object_state's key per object.
    along_revisions_setup = ('SET LOCAL enable_nestloop = off',)

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
