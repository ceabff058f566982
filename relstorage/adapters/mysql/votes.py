"""MySQL's vote claims: a shared lock, in the commit transaction, on the
schema version's row of relstorage_meta (which only a schema upgrade
writes); InnoDB drops it with the transaction (see adapters.votes).
Another session asks by trying that row exclusively without waiting.

(On a Galera cluster row locks are those of one node: a vote on another
node is not seen.)"""
from ..sql import SQL
from ..votes import VoteClaims
from .drivers import LOCK_ERRORS
from .drivers import error_code

#: The row claimed.
ROW = 'schema_version'
SELECT_ROW = SQL('SELECT value FROM relstorage_meta WHERE name = %s{lock}')
#: Without NOWAIT (MySQL 5.7, MariaDB before 10.3), the exclusive try
#: waits at most a second, in a transaction of the watching session.
SHORT_WAIT = 'SET SESSION innodb_lock_wait_timeout = 1'
#: MySQL 8's "could not lock at once" (MariaDB says 1205).
NOWAIT_ERROR = 3572


class MySQLVoteClaims(VoteClaims):

    takes_claims = True

    def __init__(self, adapter):
        super().__init__(adapter)
        self.claim_sql = SELECT_ROW.format(lock=adapter.locker.shared_clause)
        server = adapter.server
        self.nowait = server.version >= ((10, 3, 0) if server.mariadb
                                         else (8, 0, 1))
        self.try_sql = SELECT_ROW.format(
            lock=' FOR UPDATE NOWAIT' if self.nowait else ' FOR UPDATE')

    def claim(self, session):
        session.execute(self.claim_sql, (ROW,))

    def pending(self, session):
        if not self.nowait:
            session.execute(SHORT_WAIT)
        session.begin()
        try:
            session.execute(self.try_sql, (ROW,))
        except Exception as e:
            if error_code(e) in LOCK_ERRORS + (NOWAIT_ERROR,):
                return True
            raise
        finally:
            session.rollback_quietly()
        return False
