"""Oracle's locks: DBMS_LOCK user locks as the commit and pack locks (LOCK
TABLE where the user may not execute DBMS_LOCK), and ``SELECT ... FOR
UPDATE WAIT`` row locks."""
import logging
import math

from ...exceptions import CommitLockTimeout
from ...exceptions import RelStorageError
from ..locker import Locker
from ..sql import SQL
from .drivers import LOCK_ERRORS
from .drivers import error_codes

log = logging.getLogger(__name__)

#: DBMS_LOCK user lock ids run from 0 to 2**30 - 1; the pack lock is the
#: commit lock's id (the commit-lock-id option) plus half of that range.
USER_LOCK_IDS = 1 << 30
PACK_LOCK_OFFSET = 1 << 29

#: The commit lock (released by COMMIT or ROLLBACK) and the pack lock
#: (held until released, or until the session ends).
REQUEST_LOCK = SQL(
    'BEGIN :status := DBMS_LOCK.REQUEST(id => :lock_id, '
    'lockmode => DBMS_LOCK.X_MODE, timeout => :timeout, '
    'release_on_commit => {on_commit}); END;')
REQUEST_COMMIT_LOCK = REQUEST_LOCK.format(on_commit='TRUE')
REQUEST_PACK_LOCK = REQUEST_LOCK.format(on_commit='FALSE')
RELEASE_LOCK = 'BEGIN :status := DBMS_LOCK.RELEASE(id => :lock_id); END;'

#: A PL/SQL block that does not compile.
PLSQL_COMPILATION_ERROR = 'ORA-06550'

#: The commit lock without DBMS_LOCK (WAIT takes whole seconds, no bind).
LOCK_COMMIT_TABLE = SQL('LOCK TABLE commit_lock IN EXCLUSIVE MODE {wait}')

#: DBMS_LOCK.REQUEST's answers.
LOCK_GRANTED, LOCK_TIMEOUT, LOCK_DEADLOCK, LOCK_OWNED = 0, 1, 2, 4


#: Oracle's row-lock clause waiting at most some seconds.
LOCK_WAIT = SQL(' FOR UPDATE WAIT {seconds}')


class OracleLocker(Locker):
    """Oracle has no shared row locks: readCurrent rows are locked FOR
    UPDATE too (a reader of the same object then waits for another's
    commit, never longer than commit-lock-timeout)."""

    #: Whether this user may execute DBMS_LOCK (None: not known yet).
    dbms_lock = None

    def __init__(self, adapter, mover):
        self.wait = int(math.ceil(adapter.options.commit_lock_timeout))
        self.exclusive_clause = self.shared_clause = (
            LOCK_WAIT.format(seconds=str(self.wait)) if self.wait
            else ' FOR UPDATE NOWAIT')
        super().__init__(adapter, mover)
        lock_id = adapter.options.commit_lock_id % USER_LOCK_IDS
        self.commit_lock_id = lock_id
        self.pack_lock_id = (lock_id + PACK_LOCK_OFFSET) % USER_LOCK_IDS

    def is_lock_error(self, error):
        return any(code in LOCK_ERRORS for code in error_codes(error))

    def _request(self, session, block, lock_id, timeout):
        """DBMS_LOCK.REQUEST's status, or None when this user may not
        execute DBMS_LOCK (then noted, and the LOCK TABLE fallback used
        from now on)."""
        adapter = self.adapter
        if self.dbms_lock is False:
            return None
        try:
            status = session.call_status(block, lock_id=lock_id,
                                         timeout=timeout)
        except adapter.driver.Error as e:
            # The block is fixed text: it fails to compile (ORA-06550, a
            # PLS-00201 within) only where DBMS_LOCK cannot be seen.
            if PLSQL_COMPILATION_ERROR not in error_codes(e):
                raise
            self.dbms_lock = False
            log.warning(
                'the user of the %s may not execute DBMS_LOCK (missing '
                'privilege: GRANT EXECUTE ON SYS.DBMS_LOCK TO %s); the '
                'commit and pack locks fall back to LOCK TABLE, which '
                'waits in whole seconds', adapter.describe(),
                adapter.connector.user_name())
            return None
        self.dbms_lock = True
        if status == LOCK_DEADLOCK:
            raise CommitLockTimeout(
                'taking the commit lock of %s deadlocked; try again'
                % adapter.describe())
        if status not in (LOCK_GRANTED, LOCK_OWNED, LOCK_TIMEOUT):
            raise RelStorageError(
                'DBMS_LOCK.REQUEST(%d) answered %s in %s'
                % (lock_id, status, adapter.describe()))
        return status

    def _take(self, session, timeout):
        """Take the commit lock within *timeout* seconds (whole seconds
        for Oracle); False if busy."""
        wait = int(math.ceil(timeout))
        status = self._request(session, REQUEST_COMMIT_LOCK,
                               self.commit_lock_id, wait)
        if status is not None:
            return status != LOCK_TIMEOUT
        try:
            session.execute(LOCK_COMMIT_TABLE.format(
                wait='WAIT %d' % wait if wait else 'NOWAIT'))
        except self.adapter.driver.Error as e:
            if self.is_lock_error(e):
                return False
            raise
        return True

    def hold_commit_lock(self, session, last_tid_sql):
        if not self._take(session, self.wait):
            raise self.timeout_error()
        # Read committed: this query sees every commit made before the lock
        # was granted.
        return session.scalar(last_tid_sql)

    def try_commit_lock(self, session, last_tid_sql, wait=0):
        if not self._take(session, max(0, wait)):
            return self.BUSY
        return session.scalar(last_tid_sql)

    def try_pack_lock(self, session):
        status = self._request(session, REQUEST_PACK_LOCK,
                               self.pack_lock_id, 0)
        if status is not None:
            return status != LOCK_TIMEOUT
        # A table lock lasts until its transaction ends, and a pack commits
        # many times: the lock is held by a connection of its own that
        # never commits, closed with the pack's session.
        holder = self.adapter.connect(for_store=True)
        try:
            holder.execute('LOCK TABLE pack_lock IN EXCLUSIVE MODE NOWAIT')
        except self.adapter.driver.Error as e:
            holder.close()
            if self.is_lock_error(e):
                return False
            raise
        session.pack_lock_holder = holder
        session.on_close.append(holder.close)
        return True

    def release_pack_lock(self, session):
        holder = getattr(session, 'pack_lock_holder', None)
        if holder is not None:
            session.pack_lock_holder = None
            holder.close()
            return
        session.call_status(RELEASE_LOCK, lock_id=self.pack_lock_id)
