"""The pack's part of the contract between ``relstorage.storage`` and an
adapter (see interfaces): the snapshot a pre-pack reads (IPackReads),
where it keeps the references it read (IPackKeeper), and the session
that holds the pack lock, fills the scratch tables and removes in short
transactions under the commit lock (IPackWriter)."""
from zope.interface import Attribute
from zope.interface import Interface

from .interfaces import ILoadSession


class IPackReads(ILoadSession):
    """The snapshot a pre-pack reads, on the read-write server."""

    def last_pack_tid():
        """The tid the last pack went to, or None."""

    checks_kept_references = Attribute(
        "Whether the database checks kept references itself when the "
        "pages are read checked (see states_at).")

    def states_at(pack_tid, after_oid, limit, deleted=None, checked=False):
        """``[(oid, state, tid, kept_tid, kept)]``: a page of at most
        *limit* states current at *pack_tid*, with oid > *after_oid*, in
        oid order, each with its tid and the references a pack kept for
        the object (``kept``: 8 bytes per oid, then a digest; see
        relstorage.storage.pack.keptrefs) with the tid of the revision they
        were read from (None, None: none kept); the oids deleted as of
        *pack_tid* are appended to *deleted* (a list), if given. With
        *checked*, where checks_kept_references, a row whose kept
        references the database found were read from that very state
        comes with an empty state (b'') instead of the state, and
        either as it is otherwise or lean: ``(oid, b'', None, None,
        kept)``, no tids (which no other row lacks), and ``kept`` None
        where it holds no oid."""

    def states_after(after_tid):
        """``(oid, state)`` of every revision committed after
        *after_tid*."""

    def count_old_revisions(pack_tid):
        """How many objects hold revisions a pack to *pack_tid* removes
        (0 without history)."""


class IPackKeeper(Interface):
    """The connection a pre-pack keeps the references it read with, for
    later packs (see IPackReads.states_at)."""

    session = Attribute("The ISession it runs on.")

    def keep_references(rows, stale=()):
        """Keep ``[(oid, tid, refs)]``, in place of those kept for the
        oids *stale*, in a short transaction of its own (it waits for
        the database's writer, as a commit does, where there is one)."""

    def close():
        """Close the connection."""


class IPackWriter(Interface):
    """The connection a pack writes with. It holds the pack lock for its
    life; it fills the pack's scratch tables in one transaction, and then
    removes in batches, each a transaction of its own under the commit
    lock."""

    BUSY = Attribute("What begin_batch() returns when the lock stays busy.")

    def lock_pack():
        """Take the pack lock for the life of the session; False when
        another pack holds it."""

    def before_pack():
        """Refresh what the query planner knows before the pre-pack's big
        reads (a nightly pack often follows heavy writes)."""

    def begin_scratch():
        """Begin the transaction that fills the scratch tables (taking no
        write lock on the tables commits use), and empty them."""

    def commit():
        """Commit the scratch transaction."""

    def rollback():
        """Roll back the scratch transaction, if one is open."""

    def end_reads():
        """Called once the pre-pack's long read has ended."""

    def save_prepack(pack_tid, checked_tid):
        """Commit the scratch transaction, then keep its garbage for a
        later pack to *pack_tid* that skips the pre-pack (commits up to
        *checked_tid* taken into account), in a transaction of its own."""

    def load_prepack():
        """Restore the garbage a pre-pack kept: ``(pack_tid,
        checked_tid)``, or None when none was kept."""

    def garbage_count():
        """How many objects the scratch tables name as garbage."""

    def find_garbage(pack_tid, gc, deleted=None):
        """Fill the garbage: with *gc*, the objects the graph's roots do
        not reach and those *deleted* as of *pack_tid*; without, only
        deleted ones."""

    def add_references(pairs):
        """Add ``[(oid, referenced oid)]`` to the scratch graph."""

    def add_roots(oids):
        """Add the graph's roots."""

    def mark():
        """Mark what the roots reach, through the scratch graph."""

    def add_garbage(oids):
        """Add *oids* to the garbage."""

    def begin_batch(wait=0):
        """Begin a batch: a transaction holding the commit lock, waiting
        at most *wait* seconds for it. Return the newest tid, or BUSY
        (and no transaction)."""

    def states_after(after_tid):
        """``(oid, state)`` of every revision committed after *after_tid*
        (in the batch, so with the commit lock held)."""

    def still_garbage(oids):
        """Those of *oids* still in the garbage."""

    def spare(oids):
        """Take *oids* out of the garbage."""

    def load_many(oids):
        """``{oid: (state, tid)}`` of the current states of *oids*."""

    def garbage_after(after, limit):
        """At most *limit* garbage oids above *after*, in order."""

    def remove_garbage(oids):
        """Remove the objects *oids*; ``(revisions, bytes)`` removed."""

    def old_revisions_after(pack_tid, after, limit):
        """``[(oid, tid kept)]``: at most *limit* objects above *after*
        whose revisions older than their state at *pack_tid* go."""

    def remove_old_revisions(keep):
        """Remove those revisions; ``(revisions, bytes)`` removed."""

    def finish(pack_tid):
        """In the last batch: forget any kept pre-pack, record the pack
        to *pack_tid*, and remove or mark what the pack leaves behind
        (emptied transactions). Return how many transactions were
        removed."""

    def commit_batch():
        """Commit the batch and release the commit lock."""

    def pause_between_batches():
        """Wait, where the server does not queue lock waiters, so that the
        commits waiting for the commit lock go before the next batch."""

    def run_batch(attempt):
        """Run *attempt* (one batch, from begin_batch to commit_batch) and
        return what it returns. Where the database is a cluster that may
        refuse a batch's commit (ClusterConflict: a commit on another
        node came first; nothing of the batch happened), the batch is
        aborted and *attempt* called again, which must then begin from
        where the batch began, as often as the cluster's refusals are
        worth waiting out."""

    def abort_batch():
        """Roll back a batch whose commit failed (a cluster refused it:
        ClusterConflict) and release the commit lock; the batch may be
        done again."""

    def wrote_outside_commits():
        """Called when the pack is done: replicas are read from only once
        they have replayed it too."""

    def close():
        """Roll back whatever is open, release the pack lock and close
        the connection."""
