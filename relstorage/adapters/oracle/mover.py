"""Oracle's mover: MERGE for upserts, BLOB lengths through DBMS_LOB."""
from ..mover import HistoryFreeMover
from ..mover import HistoryPreservingMover
from ..sql import SQL


#: Oracle's upsert of the rows of a SELECT: a MERGE on the key.
MERGE = SQL('MERGE INTO {table} o USING ({select}) t '
            'ON (o.{key} = t.{key}) '
            'WHEN MATCHED THEN UPDATE SET {sets} '
            'WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({values})')
MERGE_SET = SQL('o.{col} = t.{col}')
MERGE_VALUE = SQL('t.{col}')


class OracleMoverMixin:
    state_length_clause = 'COALESCE(DBMS_LOB.GETLENGTH(state), 0)'
    chunk_length_clause = 'DBMS_LOB.GETLENGTH(chunk)'
    no_table = ' FROM DUAL'

    def upsert_select(self, table, key, cols, select_sql):
        others = [col for col in cols if col != key]
        return MERGE.format(
            table=table, select=select_sql, key=key,
            sets=', '.join(MERGE_SET.format(col=col) for col in others),
            cols=', '.join(cols),
            values=', '.join(MERGE_VALUE.format(col=col) for col in cols))


class OracleHPMover(OracleMoverMixin, HistoryPreservingMover):
    pass


class OracleHFMover(OracleMoverMixin, HistoryFreeMover):
    pass
