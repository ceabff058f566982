"""Claims of the commits that have voted and not finished, seen from
other sessions: what a pack of another database of a multi-database asks
before it removes anything (see relstorage.storage.pack.multidb).

A transaction of a multi-database votes in every database before it
finishes in any. Between its first finish and its last, a database that
has finished may no longer refer to an object whose new referrer, in a
database that has not, is not visible yet: a pack of both would find the
object referred to nowhere. So a vote whose states refer to objects of
other databases claims it in its commit transaction (claim()), and the
claim ends with that transaction, whichever way it ends: a COMMIT, a
ROLLBACK, or a connection the server closes because its process died.
The pack of another database asks (VoteWatch.pending) before each batch
of removals, and waits while one is held.
"""
from zope.interface import Attribute
from zope.interface import Interface
from zope.interface import implementer


class IVoteClaims(Interface):
    """What a database package implements for the claims (the role
    ``adapter.vote_claims``)."""

    takes_claims = Attribute(
        """Whether claim() takes anything: where it does not (the commit
        transaction is claim enough, or the database cannot tell), a
        vote need not look for references to other databases.""")

    def claim(session):
        """Claim, in the commit transaction open on *session* (which has
        locked its rows), that this transaction refers to objects of
        other databases; held until that transaction ends."""

    def pending(session):
        """Whether a claim of another session is held (True), none is
        (False), or this database cannot tell (None); *session* is a
        store session holding no transaction, left holding none."""


@implementer(IVoteClaims)
class VoteClaims:
    """A database that cannot tell (its packs then cannot wait for such
    commits; see the multi-database pack's warning)."""

    takes_claims = False

    def __init__(self, adapter):
        self.adapter = adapter

    def claim(self, session):
        """Nothing to claim with."""

    def pending(self, session):
        return None


class VoteWatch:
    """A connection of its own to the read-write server, asking whether
    commits of this database that refer to other databases have voted and
    not finished (see IRelStorageAdapter.open_vote_watch)."""

    def __init__(self, adapter):
        self.claims = adapter.vote_claims
        self.session = adapter.connect(for_store=True)
        self.session.kind = 'pack'  # (only packs watch votes)
        # Set up as a pack's session: on SQLite, trying to become the
        # writer fails at once instead of waiting.
        adapter.prepare_pack_session(self.session)

    def pending(self):
        session = self.session
        try:
            return self.claims.pending(session)
        finally:
            if session.in_transaction or session.pending:
                session.rollback_quietly()

    def close(self):
        self.session.close()
