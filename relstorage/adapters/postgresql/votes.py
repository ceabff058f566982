"""PostgreSQL's vote claims: a shared advisory lock of the commit
transaction, which the server drops with it (see adapters.votes), seen
by others in pg_locks without waiting for, or blocking, anyone."""
from ..votes import VoteClaims

#: The advisory lock key of the claims (beside the commit and pack
#: locks' keys, in postgresql.adapter).
VOTE_CLAIM_KEY = 0x52656c56

CLAIM = 'SELECT pg_advisory_xact_lock_shared(%s)'
#: A one-number advisory key shows as classid (the high 32 bits), objid
#: (the low ones) and objsubid 1.
HELD_ELSEWHERE = """
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted
      AND database = (SELECT oid FROM pg_database
                      WHERE datname = current_database())
      AND classid = %s AND objid = %s AND objsubid = 1
      AND pid <> pg_backend_pid())
"""


class PostgreSQLVoteClaims(VoteClaims):

    takes_claims = True

    def claim(self, session):
        session.execute(CLAIM, (VOTE_CLAIM_KEY,))

    def pending(self, session):
        session.begin()
        held = session.scalar(HELD_ELSEWHERE, (VOTE_CLAIM_KEY >> 32,
                                               VOTE_CLAIM_KEY & 0xffffffff))
        session.rollback()
        return bool(held)
