"""Upgrading a RelStorage 4 database on MySQL or MariaDB (see ..upgrade).

MySQL commits every DDL statement at once, so ``prepare`` cannot be one
transaction: it renames the old tables in one ``RENAME TABLE`` (atomic),
then drops whatever an interrupted earlier attempt created of ours and
creates our tables again; an upgrade stopped in between finds the renamed
tables and runs ``prepare`` again. A RelStorage 4 session that has the
old tables open (any transaction that read them) holds a metadata lock
that the rename waits for: the upgrade waits a few seconds, then refuses
and names the sessions.
"""
from ..upgrade import Upgrade
from ...exceptions import UpgradeRefused
from ..sql import SQL
from ..sql import Identifier
from .drivers import error_code

#: How MySQL quotes an identifier.
QUOTE = '`'
RENAME_PAIR = SQL('{old} TO {new}')
RENAME_TABLES = SQL('RENAME TABLE {pairs}')
DROP_PROCEDURE = SQL('DROP PROCEDURE IF EXISTS {name}')
DROP_TABLE = SQL('DROP TABLE IF EXISTS {name}')

#: RelStorage 4's tables whose names ours use.
CLASHING = ('transaction', 'object_state', 'current_object', 'blob_chunk',
            'new_oid')
#: Its other tables, dropped with --drop-old.
OTHER_TABLES = ('commit_row_lock', 'object_ref', 'object_refs_added',
                'pack_object', 'pack_state', 'pack_state_tid')
#: Seconds the rename waits for RelStorage 4 sessions to let go.
LOCK_WAIT = 3
LOCK_WAIT_TIMEOUT = 1205


class MySQLUpgrade(Upgrade):

    old_tables = dict(Upgrade.old_tables, new_oid='rs4_new_oid')

    def step_prepare(self, session):
        self.lock_old(session)
        self.rename_old(session)
        # Whatever an interrupted attempt made of ours holds nothing yet.
        self.adapter.schema.drop(session)
        self.adapter.schema.create(session, complete=False)
        self._done(session, 'transactions')

    def lock_old(self, session):
        session.execute('SET SESSION lock_wait_timeout = %s', (LOCK_WAIT,))

    def rename_old(self, session):
        pairs = [RENAME_PAIR.format(quote=QUOTE, old=Identifier(name),
                                    new=Identifier(self.old_tables[name]))
                 for name in CLASHING if session.table_exists(name)
                 and not session.table_exists(self.old_tables[name])]
        if not pairs:
            return
        try:
            session.execute(RENAME_TABLES.format(pairs=', '.join(pairs)))
        except Exception as e:  # noqa: BLE001 -- checked just below
            if error_code(e) != LOCK_WAIT_TIMEOUT:
                raise
            raise UpgradeRefused(
                "%s is in use: sessions hold RelStorage 4's tables (%s); "
                'stop every RelStorage 4 process and run the upgrade again'
                % (self.adapter.describe(), self._holders())) from None
        # Its stored procedures name the tables: a RelStorage 4 process
        # started by mistake must fail rather than write into ours.
        for (name,) in session.fetchall(
                'SELECT ROUTINE_NAME FROM information_schema.ROUTINES '
                'WHERE ROUTINE_SCHEMA = DATABASE()'):
            session.execute(DROP_PROCEDURE.format(quote=QUOTE,
                                                  name=Identifier(name)))

    def _holders(self):
        session = self.adapter.connect(for_store=False)
        try:
            rows = session.fetchall(
                'SELECT ID, USER, HOST, COMMAND, TIME FROM '
                'information_schema.PROCESSLIST WHERE DB = DATABASE() '
                'AND ID <> CONNECTION_ID()')
        finally:
            session.close()
        return '; '.join('id %s, user %s, from %s, %s for %s s'
                         % row for row in rows) or 'sessions now gone'

    def drop_old_tables(self, session):
        session.execute('DROP VIEW IF EXISTS current_object_state')
        # Its foreign keys tie its tables together; they all go.
        session.execute('SET FOREIGN_KEY_CHECKS = 0')
        try:
            for table in tuple(self.old_tables[name] for name in CLASHING) \
                    + OTHER_TABLES:
                session.execute(DROP_TABLE.format(quote=QUOTE,
                                                  name=Identifier(table)))
        finally:
            session.execute('SET FOREIGN_KEY_CHECKS = 1')
