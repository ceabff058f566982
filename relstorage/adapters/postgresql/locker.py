"""PostgreSQL's locks: advisory locks as the commit, pack and schema
locks, and row locks of long runs of oids taken as ranges."""
from ..locker import Locker
from ..sql import script


#: The advisory lock keys used as the commit lock and the pack lock (any
#: constants will do; these spell "RelS" and "RelP").
COMMIT_LOCK_KEY = 0x52656c53
PACK_LOCK_KEY = 0x52656c50
SCHEMA_LOCK_KEY = 0x52656c44


#: Runs of consecutive oids at least this long are locked as a range; at
#: most LOCK_RANGES of them per statement (each is one more index scan,
#: OR'd together: 250 ranges took 14 ms for 1,000 rows).
LONG_RUN = 32
LOCK_RANGES = 16


class PostgreSQLLocker(Locker):

    # One statement, whatever the number. The oids that are not in a long
    # run travel as one array literal: the server parses a string, not an
    # expression of one node per oid (what psycopg2 makes of a list).
    # 1,000 rows locked: 8 ms as ARRAY[...], 5 ms as a literal, 2.7 ms as
    # a range.
    min_range = LONG_RUN
    max_ranges = LOCK_RANGES

    def singles_where(self, singles):
        return ('zoid = ANY(%s::bigint[])',
                ['{%s}' % ','.join(map(str, singles))])

    def singles_params(self, count):
        return 1 if count else 0

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        if wait <= 0:
            if not session.scalar('SELECT pg_try_advisory_xact_lock(%s)',
                                  (COMMIT_LOCK_KEY,)):
                return self.BUSY
            return session.scalar(last_tid_sql)
        session.execute('SET LOCAL lock_timeout = %s', (int(wait * 1000),))
        try:
            session.execute('SELECT pg_advisory_xact_lock(%s)',
                            (COMMIT_LOCK_KEY,))
        except self.adapter.driver.errors.LockNotAvailable:
            return self.BUSY
        session.execute('SET LOCAL lock_timeout = %s', (
            int(self.adapter.options.commit_lock_timeout * 1000),))
        return session.scalar(last_tid_sql)

    def try_pack_lock(self, session):
        # A session-level advisory lock: the server drops it with the
        # connection.
        return session.scalar('SELECT pg_try_advisory_lock(%s)',
                              (PACK_LOCK_KEY,))

    def release_pack_lock(self, session):
        session.execute('SELECT pg_advisory_unlock(%s)', (PACK_LOCK_KEY,))

    def hold_schema_lock(self, session):
        # Released with the transaction; the session's lock_timeout bounds
        # the wait.
        try:
            session.execute('SELECT pg_advisory_xact_lock(%s)',
                            (SCHEMA_LOCK_KEY,))
        except self.adapter.driver.errors.LockNotAvailable:
            raise self.schema_lock_timeout() from None

    def is_lock_error(self, error):
        errors = self.adapter.driver.errors
        return isinstance(error, (errors.LockNotAvailable,
                                  errors.DeadlockDetected))

    def hold_commit_lock(self, session, last_tid_sql):
        try:
            # One message; the second statement's snapshot is taken after
            # the lock is granted, so it sees the newest commit.
            return session.scalar(
                script('SELECT pg_advisory_xact_lock(%s)', last_tid_sql),
                (COMMIT_LOCK_KEY,))
        except self.adapter.driver.errors.LockNotAvailable:
            raise self.timeout_error() from None
