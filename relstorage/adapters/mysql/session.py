"""MySQL sessions: several statements per message with each result read
in turn, and the isolation level of a session by whether it stores."""
from ..session import Session
from .drivers import DISCONNECT_ERRORS
from .drivers import error_code
from ..sql import SQL


#: A session's isolation level, by whether it stores.
ISOLATION_LEVEL = SQL('SET SESSION TRANSACTION ISOLATION LEVEL {level}')
ISOLATION = {True: ISOLATION_LEVEL.format(level='READ COMMITTED'),
             False: ISOLATION_LEVEL.format(level='REPEATABLE READ')}
#: Set before a stream: the server sends a stream's rows as the client
#: reads them, and gives up on a client that read nothing for
#: net_write_timeout (60 s by default), while a walk's caller may spend
#: longer than that on the rows it has (zodbupdate committing what it
#: converted). A client that is gone closes its socket, which ends the
#: statement at once.
STREAM_SETUP = 'SET SESSION net_write_timeout = 86400'


class MySQLSession(Session):

    # The connection allows several statements per message, and each
    # result set is read in turn: the deferred verbs' results (none, only
    # their status) are passed over to reach the statement's.
    defers_verbs = True
    #: Whether every statement goes in a message of its own. A Galera
    #: node may abort a transaction (to apply another node's) while it
    #: runs a message of several statements: the abort's error was then
    #: lost, the statements after it ran outside any transaction and the
    #: COMMIT reported success for a transaction that never committed.
    #: So on a cluster, store sessions send nothing but single statements.
    one_by_one = False

    def is_permission_error(self, error):
        # command denied for a table; access denied to a database; needs
        # a privilege (CREATE TEMPORARY TABLES, say)
        return error_code(error) in (1142, 1143, 1044, 1227)

    def is_full_error(self, error):
        # The table is full (its tablespace cannot grow: disk full, or
        # innodb_data_file_path's max); disk full.
        return error_code(error) in (1114, 1021)

    def is_disconnect(self, error):
        adapter = self.adapter
        code = error_code(error)
        return (isinstance(error, adapter.driver.module.InterfaceError)
                or code in DISCONNECT_ERRORS
                or code in adapter.kind.disconnect_errors)

    def execute(self, stmt, params=()):
        with self.lock:
            verbs = self.pending.count('; ')
            if hasattr(self.conn, 'quick_results'):
                # The answers of the verbs after the first come at once
                # (they wait for nobody): mysqlclient under gevent reads
                # them without a thread (see cooperative). Set for every
                # message, so that none left over by a message that
                # failed counts for the next one.
                self.conn.quick_results = max(verbs - 1, 0)
            cursor = super().execute(stmt, params)
            if verbs:
                self._next_results(cursor, verbs)
            return cursor

    def _next_results(self, cursor, count):
        # A later statement's error (a lock wait, a lost connection)
        # comes while moving on to its result.
        with self.guarded():
            for _ in range(count):
                cursor.nextset()

    def flush(self):
        with self.lock, self.guarded():
            if self.pending:
                verbs = self.pending.count('; ')
                cursor = self.live_cursor()
                self.round_trips += 1
                # Without the last separator: an empty statement after it
                # would be an error.
                cursor.execute(self.pending[:-2])
                self.pending = ''
                for _ in range(verbs - 1):
                    cursor.nextset()

    def first_values(self, script, params=()):
        """Run a message of several SELECTs; the first column of each
        one's first row."""
        if self.one_by_one:
            return self._values_one_by_one(script, params)
        with self.lock:
            cursor = self.execute(script, params)
            values = []
            for index in range(script.count('; ') + 1):
                if index:
                    self._next_results(cursor, 1)
                row = cursor.fetchone()
                values.append(row[0] if row is not None else None)
            return values

    def _values_one_by_one(self, script, params):
        values = []
        params = list(params)
        with self.lock:
            for stmt in script.split('; '):
                count = stmt.count('%s')
                values.append(self.scalar(stmt, params[:count]))
                del params[:count]
        return values

    def execute_script(self, statements):
        # The connection allows several statements per message; every
        # result set must be consumed before the next command.
        if self.one_by_one:
            return Session.execute_script(self, statements)
        with self.lock:
            sql = '; '.join(stmt for stmt, _ in statements)
            params = [p for _, ps in statements for p in ps]
            cursor = self.execute(sql, params)
            # The later statements' results (a COMMIT's among them) come
            # back here: a connection lost now is lost in the middle of
            # the script, and must say so (the storage then asks whether
            # a commit happened).
            with self.guarded():
                while cursor.nextset():
                    pass

    def stream_cursor(self):
        return self.adapter.driver.streaming_cursor(self.conn)

    def stream(self, stmt, params=()):
        with self.lock:
            # (With the verbs waiting: a round trip per walk.)
            self.execute(STREAM_SETUP)
            return super().stream(stmt, params)

    def table_exists(self, name):
        return self.scalar(
            'SELECT COUNT(*) FROM information_schema.tables '
            'WHERE table_schema = DATABASE() AND table_name = %s',
            (name,)) > 0
