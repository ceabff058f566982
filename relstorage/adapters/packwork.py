"""The sessions a pack runs on: PackReads reads the pre-pack's snapshot,
PackWriter fills the scratch tables and removes in batches, each a
transaction of its own under the commit lock.

The storage's pack (relstorage.storage.pack) decides what to remove and
when; these classes own the connections, the transactions and the locks,
and run the packer's SQL on them.
"""
import time

from zope.interface import implementer

from .pack_interfaces import IPackKeeper
from .pack_interfaces import IPackReads
from .pack_interfaces import IPackWriter
from .loadstore import LoadSession
from .locker import Locker


@implementer(IPackReads)
class PackReads(LoadSession):
    """A load session on the read-write server whose snapshot the
    pre-pack reads (see IPackReads)."""

    kind = 'pack'

    def __init__(self, adapter):
        super().__init__(adapter)
        self.packer = adapter.packer

    def last_pack_tid(self):
        return self.packer.last_pack_tid(self.session)

    @property
    def checks_kept_references(self):
        return self.packer.checks_kept_references

    def states_at(self, pack_tid, after_oid, limit, deleted=None,
                  checked=False):
        return self.packer.states_at(self.session, pack_tid, after_oid,
                                     limit, deleted, checked)

    def states_after(self, after_tid):
        return self.packer.states_after(self.session, after_tid)

    def count_old_revisions(self, pack_tid):
        return self.packer.count_old_revisions(self.session, pack_tid)


@implementer(IPackKeeper)
class PackKeeper:
    """A store session keeping the pre-pack's references (see
    IPackKeeper): short transactions of their own, not in the scratch
    transaction, which holds no lock that commits wait for (on SQLite
    any write would be held until its end), nor under the commit lock."""

    def __init__(self, adapter):
        self.packer = adapter.packer
        self.begin_sql = adapter.store_begin_sql
        self.session = adapter.connect(for_store=True)
        self.session.kind = 'pack'

    def keep_references(self, rows, stale=()):
        session = self.session
        session.begin(self.begin_sql)
        try:
            self.packer.keep_references(session, rows, stale)
            session.commit()
        finally:
            if session.in_transaction:
                session.rollback_quietly()

    def close(self):
        self.session.close()


@implementer(IPackWriter)
class PackWriter:
    """The connection a pack writes with (see IPackWriter)."""

    #: What begin_batch() returns when the commit lock stays busy.
    BUSY = Locker.BUSY

    def __init__(self, adapter):
        self.adapter = adapter
        # The components this session runs (the adapter assembled them).
        self.packer = adapter.packer
        self.locker = adapter.locker
        self.schema = adapter.schema
        self.mover = adapter.mover
        self.session = adapter.connect(for_store=True)
        self.session.kind = 'pack'
        self.locked = False
        adapter.prepare_pack_session(self.session)

    # The life of the session

    def lock_pack(self):
        self.locked = self.locker.try_pack_lock(self.session)
        return self.locked

    def before_pack(self):
        self.schema.ensure_state_refs(self.session)
        self.adapter.before_pack(self.session)

    def wrote_outside_commits(self):
        self.adapter.wrote_outside_commits(self.session)

    def close(self):
        session = self.session
        try:
            if session.in_transaction:  # a batch failed
                session.rollback_quietly()
            self.locker.after_rollback(session)
            if self.locked:
                try:
                    self.locker.release_pack_lock(session)
                except Exception:  # noqa: BLE001 -- a lost connection
                    pass           # has released it already
        finally:
            session.close()  # releases whatever is still held

    # The scratch transaction

    def begin_scratch(self):
        self.session.begin(self.adapter.scratch_begin_sql)
        self.packer.start_graph(self.session)

    def commit(self):
        self.session.commit()

    def rollback(self):
        if self.session.in_transaction:
            self.session.rollback_quietly()

    def end_reads(self):
        self.adapter.after_pack_reads(self.session)

    def save_prepack(self, pack_tid, checked_tid):
        session = self.session
        session.commit()
        self.schema.ensure_pack_garbage(session)
        session.begin(self.adapter.store_begin_sql)
        self.packer.save_prepack(session, pack_tid, checked_tid)
        session.commit()

    # Batches

    def begin_batch(self, wait=0):
        return self.locker.begin_with_commit_lock(
            self.session, self.mover.last_tid_sql, wait)

    def pause_between_batches(self):
        """Let the committers waiting for the commit lock go first (see
        IRelStorageAdapter.pack_pause_between_batches)."""
        pause = self.adapter.pack_pause_between_batches
        if pause:
            time.sleep(pause)

    def run_batch(self, attempt):
        """As IPackWriter.run_batch: a single server refuses nothing."""
        return attempt()

    def abort_batch(self):
        """Roll back a batch that failed, releasing the commit lock."""
        if self.session.in_transaction:
            self.session.rollback_quietly()
        self.locker.after_rollback(self.session)

    def commit_batch(self):
        session = self.session
        session.execute_script(self.locker.end_commit())
        session.in_transaction = False
        session.holds_commit_lock = False
        self.adapter.after_pack_reads(session)

    # The packer's statements, run on this session

    def load_prepack(self):
        return self.packer.load_prepack(self.session)

    def garbage_count(self):
        return self.packer.garbage_count(self.session)

    def find_garbage(self, pack_tid, gc, deleted=None):
        self.packer.find_garbage(self.session, pack_tid, gc, deleted)

    def add_references(self, pairs):
        self.packer.add_references(self.session, pairs)

    def add_roots(self, oids):
        self.packer.add_roots(self.session, oids)

    def mark(self):
        self.packer.mark(self.session)

    def add_garbage(self, oids):
        self.packer.add_garbage(self.session, oids)

    def states_after(self, after_tid):
        return self.packer.states_after(self.session, after_tid)

    def still_garbage(self, oids):
        return self.packer.still_garbage(self.session, oids)

    def spare(self, oids):
        self.packer.spare(self.session, oids)

    def load_many(self, oids):
        return self.mover.load_many(self.session, oids)

    def garbage_after(self, after, limit):
        return self.packer.garbage_after(self.session, after, limit)

    def remove_garbage(self, oids):
        return self.packer.remove_garbage(self.session, oids)

    def old_revisions_after(self, pack_tid, after, limit):
        return self.packer.old_revisions_after(self.session, pack_tid,
                                               after, limit)

    def remove_old_revisions(self, keep):
        return self.packer.remove_old_revisions(self.session, keep)

    def finish(self, pack_tid):
        """Forget any pre-pack, record the pack, and do what the last
        batch does; the transactions removed."""
        session = self.session
        self.packer.forget_prepack(session)  # whichever pre-pack made it
        self.packer.record_pack(session, pack_tid)
        return self.packer.finish(session, pack_tid)
