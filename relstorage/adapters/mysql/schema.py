"""What MySQL's schema has beyond the shared one: InnoDB tables, the
AUTO_INCREMENT table oids come from, and the temporary table commits
stage their rows in."""
from ..schema import Schema
from ..schema import Types


TEMP_STORE_DDL = """
CREATE TEMPORARY TABLE IF NOT EXISTS temp_store (
    zoid        BIGINT NOT NULL PRIMARY KEY,
    prev_tid    BIGINT NOT NULL DEFAULT 0,
    state       LONGBLOB,
    blob_id     BIGINT
) ENGINE = InnoDB
"""


class MySQLTypes(Types):
    blob = 'LONGBLOB'
    table_suffix = ' ENGINE = InnoDB'


class MySQLSchema(Schema):
    extra_ddl = (
        'CREATE TABLE new_oid (zoid BIGINT NOT NULL AUTO_INCREMENT '
        'PRIMARY KEY) ENGINE = InnoDB',
    )
    drop_extra_ddl = ('DROP TABLE IF EXISTS new_oid',)
    rs4_transaction_table = '`transaction`'
