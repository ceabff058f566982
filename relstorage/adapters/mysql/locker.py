"""MySQL's locks: GET_LOCK names, global to the server, as the commit,
pack and schema locks (the commit lock released right after COMMIT and on
every rollback), and InnoDB's shared row locks spelled per server."""
from ..locker import Locker
from ..sql import SQL
from ..sql import script
from .drivers import LOCK_ERRORS
from .drivers import error_code

#: GET_LOCK names are global to the server: include the database, hashed to
#: stay under MySQL's 64-character limit.
LOCK_NAME = SQL("CONCAT('relstorage.{kind}.', LEFT(MD5(DATABASE()), 16))")
COMMIT_LOCK = LOCK_NAME.format(kind='commit')
PACK_LOCK = LOCK_NAME.format(kind='pack')
SCHEMA_LOCK = LOCK_NAME.format(kind='schema')
GET_LOCK = SQL('SELECT GET_LOCK({name}, {wait})')
RELEASE_LOCK = SQL('DO RELEASE_LOCK({name})')
#: Takes the commit lock, waiting up to the seconds of its parameter.
GET_COMMIT_LOCK = GET_LOCK.format(name=COMMIT_LOCK, wait='%s')
RELEASE_COMMIT_LOCK = RELEASE_LOCK.format(name=COMMIT_LOCK)
#: Takes the pack lock if it is free.
TRY_PACK_LOCK = GET_LOCK.format(name=PACK_LOCK, wait='0')
RELEASE_PACK_LOCK = RELEASE_LOCK.format(name=PACK_LOCK)
GET_SCHEMA_LOCK = GET_LOCK.format(name=SCHEMA_LOCK, wait='%s')
RELEASE_SCHEMA_LOCK = RELEASE_LOCK.format(name=SCHEMA_LOCK)


class MySQLLocker(Locker):

    def __init__(self, adapter, mover):
        self.shared_clause = (' FOR SHARE' if adapter.server.has_for_share
                              else ' LOCK IN SHARE MODE')
        super().__init__(adapter, mover)

    def is_lock_error(self, error):
        return error_code(error) in LOCK_ERRORS

    def hold_commit_lock(self, session, last_tid_sql):
        timeout = self.adapter.options.commit_lock_timeout
        # Flagged first: if the wait is interrupted after the server granted
        # the lock, the rollback still releases it (releasing a lock one
        # does not hold is harmless).
        session.holds_commit_lock = True
        # One message: the newest tid is read once the lock is granted
        # (the transaction's first plain read, so its snapshot begins
        # then).
        got, last = session.first_values(
            script(GET_COMMIT_LOCK, last_tid_sql),
            (timeout,))
        if got != 1:
            raise self.timeout_error()
        return last

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        session.holds_commit_lock = True
        if session.scalar(GET_COMMIT_LOCK, (max(0, wait),)) != 1:
            session.holds_commit_lock = False
            return self.BUSY
        return session.scalar(last_tid_sql)

    def release_commit_lock(self):
        return [(RELEASE_COMMIT_LOCK, ())]

    def try_pack_lock(self, session):
        # Session-level: the server releases it when the connection ends.
        return session.scalar(TRY_PACK_LOCK) == 1

    def release_pack_lock(self, session):
        session.execute(RELEASE_PACK_LOCK)

    def hold_schema_lock(self, session):
        # Session-level (DDL commits as it goes): released by
        # release_schema_lock, or with the connection.
        timeout = self.adapter.options.commit_lock_timeout
        if session.scalar(GET_SCHEMA_LOCK, (timeout,)) != 1:
            raise self.schema_lock_timeout()

    def release_schema_lock(self, session):
        session.execute(RELEASE_SCHEMA_LOCK)

    def after_rollback(self, session):
        if session.holds_commit_lock:
            session.holds_commit_lock = False
            try:
                session.execute(RELEASE_COMMIT_LOCK)
            except Exception:  # noqa: BLE001 -- a lost connection has
                pass           # released it already
