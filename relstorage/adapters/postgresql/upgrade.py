"""Upgrading a RelStorage 4 database on PostgreSQL (see ..upgrade).

PostgreSQL changes tables in transactions, so ``prepare`` renames the old
tables, their indexes, sequence and functions and creates ours in one
transaction: an interruption leaves either RelStorage 4's database as it
was or both sets of tables. RelStorage 4 keeps each blob in large
objects; they are cut into chunks of blob-chunk-size on the server.
"""
from ..upgrade import Upgrade
from ...exceptions import UpgradeRefused
from ..sql import SQL
from ..sql import Identifier
from ..sql import listed

#: RelStorage 4's tables (their names clash with ours, or its clients
#: would still find them) and the other objects it creates.
OLD_TABLES = ('transaction', 'object_state', 'current_object', 'blob_chunk')
OLD_FUNCTIONS = (
    'blob_chunk_delete_trigger', 'lock_and_choose_tid',
    'lock_and_choose_tid_and_move', 'lock_objects_and_detect_conflicts',
    'make_current_tid', 'make_tid_for_epoch', 'merge_blob_chunks',
    'temp_blob_chunk_delete_trigger')
OLD_OTHER_TABLES = ('commit_row_lock', 'object_ref', 'object_refs_added',
                    'pack_object', 'pack_state', 'pack_state_tid')

LOCK_TABLES = SQL('LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE NOWAIT')
RENAME_INDEX = SQL('ALTER INDEX {old} RENAME TO {new}')
RENAME_TABLE = SQL('ALTER TABLE {old} RENAME TO {new}')
RENAME_FUNCTION = SQL('ALTER FUNCTION {signature} RENAME TO {new}')
DROP_TABLE = SQL('DROP TABLE IF EXISTS {name} CASCADE')
DROP_FUNCTION = SQL('DROP FUNCTION {signature} CASCADE')

#: lo_open's mode for reading.
INV_READ = 0x40000


class PostgreSQLUpgrade(Upgrade):

    def lock_old(self, session):
        present = [t for t in OLD_TABLES + ('commit_row_lock',)
                   if session.table_exists(t)]
        try:
            session.execute('SET LOCAL lock_timeout = 0')
            session.execute(LOCK_TABLES.format(tables=listed(present)))
        except self.adapter.driver.errors.LockNotAvailable as e:
            session.rollback_quietly()
            raise UpgradeRefused(
                '%s is in use: another session holds locks on RelStorage '
                "4's tables (%s); stop every RelStorage 4 process and run "
                'the upgrade again (%s)'
                % (self.adapter.describe(), self._holders(present),
                   str(e).strip().splitlines()[0])) from None

    def _holders(self, tables):
        """Who holds locks on *tables*, for the refusal."""
        session = self.adapter.connect(for_store=False)
        try:
            rows = session.fetchall(
                'SELECT DISTINCT a.pid, a.usename, a.application_name, '
                'a.client_addr FROM pg_locks l JOIN pg_stat_activity a '
                'ON a.pid = l.pid WHERE l.relation = ANY(%s::regclass[]) '
                'AND a.pid <> pg_backend_pid()',
                ([Identifier(t).quoted() for t in tables],))
        finally:
            session.close()
        return '; '.join(
            'pid %s, user %s, application %r, from %s'
            % (pid, user, app or '', addr or 'the local socket')
            for pid, user, app, addr in rows) or 'sessions now gone'

    def rename_old(self, session):
        for table in OLD_TABLES:
            if not session.table_exists(table):
                continue
            # Index names are per schema: ours would clash with some.
            for (index,) in session.fetchall(
                    'SELECT indexname FROM pg_indexes WHERE schemaname = '
                    'current_schema() AND tablename = %s', (table,)):
                session.execute(RENAME_INDEX.format(
                    old=Identifier(index), new=Identifier('rs4_' + index)))
            session.execute(RENAME_TABLE.format(
                old=Identifier(table), new=Identifier(self.old_tables[table])))
        session.execute('ALTER SEQUENCE IF EXISTS zoid_seq '
                        'RENAME TO rs4_zoid_seq')
        # Its functions name the tables: a RelStorage 4 client left running
        # must fail rather than write into ours.
        for (signature, name) in session.fetchall(
                'SELECT p.oid::regprocedure::text, p.proname FROM pg_proc p '
                'WHERE p.pronamespace = current_schema()::regnamespace '
                'AND p.proname = ANY(%s::text[])', (list(OLD_FUNCTIONS),)):
            # The signature is the server's own text (regprocedure).
            session.execute(RENAME_FUNCTION.format(
                signature=signature, new=Identifier('rs4_' + name)))

    def copy_chunks(self, session, lo, hi):
        """Cut each blob's large objects (one per old chunk, in chunk_num
        order) into chunks of blob-chunk-size, all full but the last,
        which is shorter (see blobs.upload_blob)."""
        session.execute(
            'WITH parts AS ('
            ' SELECT m.blob_id, c.chunk_num, c.chunk AS loid, s.size,'
            ' (SUM(s.size) OVER (PARTITION BY m.blob_id'
            ' ORDER BY c.chunk_num) - s.size)::bigint AS start'
            ' FROM rs4_blob_chunk c JOIN upgrade_blob_map m'
            ' ON m.zoid = c.zoid AND m.tid = c.tid'
            ' CROSS JOIN LATERAL (SELECT lo_lseek64(lo_open(c.chunk, %(read)s),'
            ' 0, 2) AS size) s'
            ' WHERE c.zoid > %(lo)s AND c.zoid <= %(hi)s),'
            ' totals AS (SELECT blob_id, SUM(size)::bigint AS total FROM parts'
            ' GROUP BY blob_id) '
            'INSERT INTO blob_chunk (blob_id, chunk_num, chunk) '
            'SELECT t.blob_id, k.num, COALESCE(string_agg(lo_get(p.loid,'
            ' GREATEST(k.num * %(size)s - p.start, 0),'
            ' (LEAST((k.num + 1) * %(size)s, p.start + p.size)'
            ' - GREATEST(k.num * %(size)s, p.start))::integer), \'\'::bytea'
            ' ORDER BY p.chunk_num), \'\'::bytea) '
            'FROM totals t CROSS JOIN LATERAL'
            ' generate_series(0, t.total / %(size)s) k(num)'
            ' LEFT JOIN parts p ON p.blob_id = t.blob_id'
            ' AND p.start < (k.num + 1) * %(size)s'
            ' AND p.start + p.size > k.num * %(size)s '
            'GROUP BY t.blob_id, k.num',
            {'read': INV_READ, 'lo': lo, 'hi': hi, 'size': self.chunk_size})

    def drop_old_tables(self, session):
        if session.table_exists('rs4_blob_chunk'):
            # Dropping the table leaves its large objects behind.
            session.execute('SELECT lo_unlink(chunk) FROM rs4_blob_chunk')
        session.execute('DROP VIEW IF EXISTS current_object_state')
        for table in tuple(self.old_tables.values()) + OLD_OTHER_TABLES:
            session.execute(DROP_TABLE.format(name=Identifier(table)))
        session.execute('DROP SEQUENCE IF EXISTS rs4_zoid_seq')
        for (signature,) in session.fetchall(
                'SELECT p.oid::regprocedure::text FROM pg_proc p '
                'WHERE p.pronamespace = current_schema()::regnamespace '
                'AND p.proname = ANY(%s::text[])',
                (['rs4_' + name for name in OLD_FUNCTIONS],)):
            session.execute(DROP_FUNCTION.format(signature=signature))
