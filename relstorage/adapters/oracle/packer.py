"""Oracle's pack: global temporary scratch tables, and the reach of the
roots found a level at a time."""
from ..packer import PACK_TABLES
from ..packer import HistoryFreePacker
from ..packer import HistoryPreservingPacker
from ..sql import SQL
from ..sql import EMPTY_TABLE


#: The pack's scratch tables (see relstorage.adapters.packer): rows are
#: each session's own and last until it ends or deletes them. Created by
#: the first pack that needs them. pack_reached has the depth at which
#: each object was reached, for the level by level walk (OraclePackerMixin).
PACK_TABLES_DDL = tuple(SQL(
    'CREATE GLOBAL TEMPORARY TABLE {table} ({cols}) ON COMMIT PRESERVE ROWS'
    ).format(table=table, cols=cols) for table, cols in (
        ('pack_root', 'zoid NUMBER(20) NOT NULL PRIMARY KEY'),
        ('pack_ref', 'zoid NUMBER(20) NOT NULL, to_zoid NUMBER(20) NOT NULL, '
                     'PRIMARY KEY (zoid, to_zoid)'),
        ('pack_reached', 'zoid NUMBER(20) NOT NULL PRIMARY KEY, '
                         'depth NUMBER(10) NOT NULL'),
        ('pack_gc', 'zoid NUMBER(20) NOT NULL PRIMARY KEY')))


class OraclePackerMixin:
    """The scratch tables are global temporary tables, created once; a
    recursive query may not use UNION (only UNION ALL, which would visit
    a shared object once per path to it), so the roots' reach is found a
    level at a time."""

    def start_graph(self, session):
        for table, ddl in zip(PACK_TABLES, PACK_TABLES_DDL):
            if not session.table_exists(table):
                session.execute(ddl)
        for table in PACK_TABLES:
            session.execute(EMPTY_TABLE.format(table=table))

    def mark(self, session):
        session.execute('INSERT INTO pack_reached (zoid, depth) '
                        'SELECT zoid, 0 FROM pack_root')
        depth = 0
        while session.execute(
                'INSERT INTO pack_reached (zoid, depth) SELECT DISTINCT '
                'p.to_zoid, %s FROM pack_ref p JOIN pack_reached r ON '
                'p.zoid = r.zoid WHERE r.depth = %s AND NOT EXISTS (SELECT '
                '1 FROM pack_reached q WHERE q.zoid = p.to_zoid)',
                (depth + 1, depth)).rowcount:
            depth += 1


class OracleHPPacker(OraclePackerMixin, HistoryPreservingPacker):
    pass


class OracleHFPacker(OraclePackerMixin, HistoryFreePacker):
    pass
