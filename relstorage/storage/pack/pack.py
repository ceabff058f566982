"""Packing: drop revisions that are no longer current as of the pack time
and (with pack-gc) objects no longer reachable from the root.

The pre-pack reads one snapshot without any lock: it reads the states
current at the pack time a page at a time and keeps their references, in
flat arrays (see graph), while they take at most ``pack-graph-mb``; it
then follows them from the root (and from everything committed after the
pack time) and so finds the garbage. A larger graph goes into scratch
tables of the database, where one recursive query follows it, the
packing process holding no more than a few pages (see
relstorage.adapters.packer). With more than one CPU, worker processes
unpickle the pages (see workers); an object unchanged since the last
pack is not unpickled again (see keptrefs). The
removal then runs in batches, each a short transaction holding the commit
lock for at most about ``pack-batch-timeout`` seconds, so that writers wait
at most one batch; when the commit lock is busy the pack waits
``pack-commit-busy-delay`` seconds and tries again, letting commits go
first. Before each batch, commits made since the pre-pack are
read and anything they reference is rescued from the garbage. Each batch is
atomic, so an interrupted pack leaves a consistent database and the next
pack finishes the job.
"""
import logging
import numbers
import time
from contextlib import closing

from ZODB.POSException import StorageError

from ..._util import chunks
from ...exceptions import CorruptRecord
from ...exceptions import InvalidPackTime
from ...exceptions import PackAlreadyRunning  # re-exported too
from ...exceptions import PackedFurtherAlready
from ...pickledrefs import cross_references
from ...pickledrefs import page_references
from ...wording import counted
from .keptrefs import KeptReferences
from .prepackio import REFS_WRITTEN
from .prepackio import ReferenceWriter
from .prepackio import read_pages
from ..load import MAX_ID
from .graph import ReferenceGraph
from .workers import Workers
from ZODB.serialize import referencesf
from ZODB.TimeStamp import TimeStamp
from ZODB.utils import p64
from ZODB.utils import u64

log = logging.getLogger(__name__)

#: Objects removed per statement group inside a batch.
STEP = 500
#: The share of pack-batch-timeout a batch aims to end within, leaving the
#: rest for the commit waiting behind it (whose own work adds to its wait).
BATCH_SHARE = 0.8


#: The range of pack times: the times a tid can name (1900-01-01 to
#: 5908-11-23 UTC, where tids pass what a signed 64-bit column holds).
EARLIEST_TIME = TimeStamp(p64(0)).timeTime()
LATEST_TIME = TimeStamp(p64(MAX_ID)).timeTime()


def tid_for_time(t):
    """The tid of time *t* (seconds since the epoch); InvalidPackTime for
    anything else, before the database is asked."""
    if (not isinstance(t, numbers.Real) or isinstance(t, bool)
            or not EARLIEST_TIME <= t < LATEST_TIME):
        raise InvalidPackTime(
            'pack time %r is not a time a transaction id can name (seconds '
            'since the epoch, from 1900-01-01 to 5908-11-23 UTC)' % (t,))
    t = float(t)
    return u64(TimeStamp(*time.gmtime(t)[:5] + (t % 60,)).raw())


class PackResult(dict):
    """What a pack did, for the summary of zodbpack: objects removed
    (garbage), revisions, transactions and bytes of state removed,
    batches, times it found the commit lock busy and waited (and the
    seconds so spent), seconds in all."""


class Pack:
    """One run of pack() over one storage's *adapter*, with its *options*,
    shared *cache* (told what is removed), blob helper *blobs* (or None)
    and *metrics* recorder."""

    #: Only read the states and keep their references (see keptrefs),
    #: finding no garbage and removing nothing.
    refs_only = False

    def __init__(self, adapter, options, cache, blobs, metrics, t,
                 referencesf, gc, progress=None, prepack_only=False,
                 use_prepack_state=False, workers=None, company=None):
        self.cache = cache
        self.blobs = blobs
        #: Worker processes of the pre-pack (None: as many as the CPUs,
        #: see workers.default_count).
        self.workers = workers
        self.prepack_only = prepack_only
        self.use_prepack_state = use_prepack_state
        self.progress = progress
        self.total = 0
        self.adapter = adapter
        self.options = options
        self.referencesf = referencesf
        self.gc = gc
        self.graph_bytes = int(self.options.pack_graph_mb * 1024 * 1024)
        self.pack_tid = tid_for_time(t)
        # Seconds that ending a batch (COMMIT, and on SQLite the WAL
        # checkpoint) costs per step of work in it, measured on the last
        # batch; until then, assume as much as the work itself.
        self.finish_per_step = None
        #: Batches a cluster refused (and that were done again).
        self.batch_conflicts = 0
        self.metrics = metrics
        #: The other databases this one packs together with (see
        #: pack.multidb), or None alone: a Company, whose referred()
        #: gives the oids of this database that the others' commits since
        #: they were read refer to (spared by each batch, as this
        #: database's own commits are), whose wait_for_votes(pack,
        #: session, newest tid), once a batch holds the commit lock,
        #: waits while a commit that may refer to this database has voted
        #: in another and not finished, returning the newest tid, and
        #: whose cross_references() reads what this database's records
        #: refer to in the others (where the pre-pack's state is used and
        #: no state is read).
        self.company = company
        #: In company, a dict: the ``[(database name, oid)]`` each object
        #: read by the pre-pack refers to in other databases, by oid; and
        #: a set, those the roots (objects committed after the pack time)
        #: refer to.
        self.cross = {} if company is not None else None
        self.rooted_cross = set()
        #: Whether cross was read from the records (see outgoing()).
        self.cross_read = company is None
        self.result = PackResult(
            objects_removed=0, revisions_removed=0, bytes_removed=0,
            batches=0, busy_waits=0, busy_seconds=0.0)
        if self.adapter.keep_history:
            self.result['transactions_removed'] = 0

    def run(self):
        for _ in self.stages():
            pass
        return self.result

    def stages(self):
        """run(), as a generator: it stops once, giving the removing
        session, when the garbage is found and nothing is removed yet
        (see multidb: the references of other databases then spare
        what they refer to), and once more, giving None, when that is
        committed and the removal is about to begin; an empty database
        ends it at once."""
        adapter = self.adapter
        started = time.monotonic()
        # The session that removes also holds the pack lock throughout.
        writer = adapter.open_pack_writer()
        try:
            if not writer.lock_pack():
                raise PackAlreadyRunning(
                    'another pack of the %s is running; not starting a '
                    'second one' % adapter.describe())
            writer.before_pack()
            yield from self.prepack_and_remove(writer)
            writer.wrote_outside_commits()
            self.result['seconds'] = time.monotonic() - started
        finally:
            self.metrics.pack_ended(self.result.get('seconds'))
            writer.close()
        return self.result

    def prepack_and_remove(self, writer):
        started = time.monotonic()
        adapter = self.adapter
        session = adapter.open_pack_reads()
        try:
            view = session.restart()
            if not view:
                return  # empty database
            writer.begin_scratch()
            if self.use_prepack_state:
                state = writer.load_prepack()
                if state is None:
                    raise StorageError(
                        'no pre-pack state in the %s to pack with: run a '
                        'pre-pack first (zodbpack --prepack, or '
                        'pack-prepack-only true)' % adapter.describe())
                self.pack_tid, checked_tid = state
            else:
                checked_tid = self.prepack(session, writer, view)
            if self.refs_only:
                self.result['prepack_seconds'] = time.monotonic() - started
                return
            yield writer
            if self.prepack_only:
                self.save_prepack(writer, checked_tid)
                return
            garbage = writer.garbage_count()
            writer.commit()
            # Counting the objects with old revisions reads the whole
            # table once more: only for a progress display.
            old = (session.count_old_revisions(self.pack_tid)
                   if self.progress is not None else 0)
            self.result['prepack_seconds'] = time.monotonic() - started
        finally:
            session.close()
            writer.rollback()
        writer.end_reads()
        yield None
        self.remove(writer, old + garbage, checked_tid)
        blobs = self.blobs
        if blobs is not None and not adapter.keep_history:
            # Replaced blobs of history-free objects have no revision of
            # their own for the batches to find; look at the files.
            session = adapter.open_pack_reads()
            try:
                session.restart()
                blobs.prune_history_free(session.current_tids, self.pack_tid)
            finally:
                session.close()

    def prepack(self, session, writer, view):
        """Find the garbage, reading the snapshot *view* of *session*,
        into the scratch tables of *writer*; return the tid up to which
        commits were taken into account."""
        self.pack_tid = min(self.pack_tid, view)
        last = session.last_pack_tid()
        if last is not None and self.pack_tid < last:
            raise PackedFurtherAlready(
                'cannot pack to %016x: an earlier pack already went to '
                '%016x, so older states are gone' % (self.pack_tid, last))
        deleted = None
        if self.gc:
            # The graph's pages tell which objects are deleted as of the
            # pack time: find_garbage need not look at every row again.
            deleted = []
            if self.graph(session, writer, deleted):
                return view  # pack_gc is filled
        writer.find_garbage(self.pack_tid, self.gc, deleted)
        return view

    def save_prepack(self, writer, checked_tid):
        """Keep what the pre-pack found for a later pack that skips it."""
        adapter = self.adapter
        garbage = writer.garbage_count()
        writer.save_prepack(self.pack_tid, checked_tid)
        self.result['garbage_found'] = garbage
        log.info('pre-pack of %s to %016x found %s; '
                 'kept for a pack that skips the pre-pack',
                 adapter.describe(), self.pack_tid,
                 counted(garbage, 'unreachable object'))

    def references(self, oid, state):
        """The oids *state* (of object *oid*) refers to. A state that does
        not unpickle stops the pack: what the object refers to, and so
        what may be removed, cannot be known."""
        if not state:
            return ()
        try:
            return [u64(ref) for ref in self.referencesf(state)]
        except Exception as e:
            raise CorruptRecord(
                'packing the %s stopped at object 0x%x: its state does not '
                'unpickle (%s: %s), so what it refers to, and so what may '
                'be removed, cannot be known; nothing it keeps alive was '
                'removed' % (self.adapter.describe(), oid, type(e).__name__,
                             e)) from e

    def referring(self, page):
        """``(oid, [oids it refers to])`` for each ``(oid, state)`` of
        *page* that refers to any object, each oid once, in order (a
        state that does not unpickle stops the pack, as in
        references())."""
        if self.referencesf is not referencesf:
            found = []
            for oid, state in page:
                refs = self.references(oid, state)
                if refs:
                    found.append((oid, sorted(set(refs))))
            return found
        return self.checked(page, *page_references(page)[:2])

    def checked(self, page, found, bad):
        """*found*, unless page_references() met a *bad* state: then the
        error that names it."""
        if bad is not None:
            self.references(bad, dict(page)[bad])  # raises CorruptRecord
            raise CorruptRecord('packing the %s stopped at object 0x%x: '
                                'its state does not unpickle'
                                % (self.adapter.describe(), bad))
        return found

    def graph(self, session, writer, deleted=None):
        """Find what the roots reach: the root object and everything
        committed after the pack time, with what it refers to, through the
        references of every state current at the pack time (read on
        *session*; with ZODB's referencesf, by worker processes too, see
        workers). The objects deleted as of the pack time are appended
        to *deleted* (see Packer.states_at).

        The graph is kept in this process (a ReferenceGraph) while it
        takes at most ``pack-graph-mb``; the garbage then goes straight
        into *writer*'s pack_gc, and True is returned. A larger graph goes
        into *writer*'s scratch tables (pack_ref, pack_root), where one
        recursive query marks what is reached (pack_reached) for
        find_garbage(); False is returned then."""
        budget = self.graph_bytes
        memory = ReferenceGraph() if budget > 0 else None
        pairs = []
        cross = self.cross
        if self.referencesf is referencesf:
            workers = Workers(self.workers)
        else:
            workers = Workers(0, lambda page: (self.referring(page), None,
                                               ()))
        use = self.referencesf is referencesf and cross is None
        kept = KeptReferences(use, use and session.checks_kept_references)
        # closing(): on an error, the reader and the writer stop before
        # their sessions are used again.
        reading = read_pages(session, self.pack_tid, deleted, kept.checked)
        with closing(reading) as pages, workers, ReferenceWriter(
                writer, self.adapter.open_pack_keeper) as writing:
            for page, found, bad, other in workers.read_in_order(
                    kept.to_read(pages)):
                found = self.checked(page, found, bad)
                oids, found, keep, stale = kept.merged(page, found)
                if keep or stale:
                    writing.keep(keep, stale)
                if cross is not None:
                    cross.update(other)
                if memory is not None:
                    memory.add_page(oids, found)
                    if memory.nbytes > budget:
                        log.info('the reference graph outgrew '
                                 'pack-graph-mb (%g) at %d objects: going '
                                 'on with it in the database',
                                 self.options.pack_graph_mb, len(memory))
                        for lot in chunks(memory.pairs(), REFS_WRITTEN):
                            writing.add(lot)
                        memory = None
                else:
                    for oid, refs in found:
                        pairs.extend([(oid, ref) for ref in refs])
                if len(pairs) >= REFS_WRITTEN:
                    writing.add(pairs)
                    pairs = []
                self.metrics.pack_examined(len(oids))
            writing.add(pairs)
            writing.keep((), (), flush=True)
        self.result['prepack_workers'] = workers.started
        self.result['prepack_unpickled'] = kept.read
        self.result['prepack_refs_kept'] = kept.reused
        self.result['prepack_worker_pages'] = workers.by_workers
        self.result['prepack_graph'] = ('memory' if memory is not None
                                        else 'database')
        roots = {0}
        for oid, state in session.states_after(self.pack_tid):
            roots.add(oid)
            roots.update(self.references(oid, state))
            if cross is not None and state:
                self.rooted_cross.update(cross_references(state))
        if memory is None:
            writer.add_roots(roots)
            writer.mark()
            return False
        self.garbage_in_memory(writer, memory, roots, deleted)
        return True

    def garbage_in_memory(self, writer, graph, roots, deleted):
        """Put into *writer*'s pack_gc the objects of *graph* that
        *roots* do not reach, and those *deleted* (a deletion current at
        the pack time goes, reached or not)."""
        reached = graph.reach(roots)
        index = graph.index
        for oid in deleted or ():
            i = index(oid)
            if i >= 0:
                reached[i] = 0
        for lot in chunks(graph.unreached(reached), REFS_WRITTEN):
            writer.add_garbage(lot)

    def rescue(self, session, since):
        """Take out of the garbage whatever commits after *since* touched
        or reference, directly or through other garbage (whose references
        are read from the database again)."""
        touched = set()
        for oid, state in session.states_after(since):
            touched.add(oid)
            touched.update(self.references(oid, state))
        return self.spare(session, touched)

    def spare(self, session, oids):
        """Take *oids* out of the garbage, and whatever they reference
        through other garbage; return the oids so taken out."""
        spared = set()
        alive = session.still_garbage(oids)
        while alive:
            session.spare(alive)
            spared.update(alive)
            referenced = set()
            found = session.load_many(alive)
            for oid, (state, _tid) in found.items():
                referenced.update(self.references(oid, state))
            alive = session.still_garbage(referenced)
        return spared

    def outgoing(self, session):
        """The ``(database name, oid)`` this database keeps alive in
        others: what its roots refer to, and the objects of the pre-pack
        that are not garbage (in *session*'s pack_gc)."""
        found = set(self.rooted_cross)
        if self.use_prepack_state and not self.cross_read:
            # Its states were not read: its records are (once), and what
            # is not garbage counts.
            self.cross = self.company.cross_references()
            self.cross_read = True
        if self.cross:
            garbage = set(session.still_garbage(list(self.cross)))
            for oid, refs in self.cross.items():
                if oid not in garbage:
                    found.update(refs)
        return found

    def remove(self, session, total, checked_tid):
        """Remove pack_gc's objects, then the old revisions, in batches;
        *total* is how many objects that is, for progress (without a
        progress display, the old revisions are not counted first)."""
        self.total = total
        self.left = total
        self.garbage_after = self.old_after = -1
        while self.garbage_after is not None or self.old_after is not None \
                or not self.result['batches']:
            if self.result['batches']:
                session.pause_between_batches()
            checked_tid = self.batch(session, checked_tid)

    def step(self, session, gone, kept):
        """Remove the next run of garbage, or else of old revisions;
        False when there is nothing left."""
        if self.garbage_after is not None:
            oids = session.garbage_after(self.garbage_after, STEP)
            if oids:
                self.garbage_after = oids[-1]
                revisions, size = session.remove_garbage(oids)
                self.result['objects_removed'] += len(oids)
                gone.extend(oids)
                return self.removed(len(oids), revisions, size)
            self.garbage_after = None
        if self.old_after is not None:
            keep = session.old_revisions_after(self.pack_tid,
                                               self.old_after, STEP)
            if keep:
                self.old_after = keep[-1][0]
                revisions, size = session.remove_old_revisions(keep)
                kept.update(keep)
                return self.removed(len(keep), revisions, size)
            self.old_after = None
        return False

    def removed(self, objects, revisions, size):
        self.left = max(self.left - objects, 0)
        self.result['revisions_removed'] += revisions
        self.result['bytes_removed'] += size
        return True

    def take_commit_lock(self, session):
        """Begin a transaction holding the commit lock, yielding to
        committers: while a commit holds it, wait in line for it, up to
        pack-commit-busy-delay seconds at a time (the commit ends first;
        the commits after it wait for one batch at most). Returns the
        newest tid."""
        last = session.begin_batch()
        if last is not session.BUSY:
            return last
        started = time.monotonic()
        self.result['busy_waits'] += 1
        wait = max(self.options.pack_commit_busy_delay, 0.01)
        while last is session.BUSY:
            last = session.begin_batch(wait)
        self.result['busy_seconds'] += time.monotonic() - started
        return last

    def more(self, started, steps):
        """Whether a batch that began at *started* and has done *steps*
        steps may take another and still end, commit included, within
        BATCH_SHARE of pack-batch-timeout. (A commit that writes back many
        scattered pages, as SQLite's does, may cost more than the deletes
        did.)"""
        elapsed = time.monotonic() - started
        finish = self.finish_per_step
        if finish is None:
            finish = elapsed / steps
        per_step = elapsed / steps + finish
        return elapsed + steps * finish + per_step <= \
            BATCH_SHARE * self.options.pack_batch_timeout

    def batch(self, session, checked_tid):
        """One short transaction under the commit lock, taking its work
        from pack_gc and then the old revisions; the last one also marks
        transactions packed. The session runs it (see
        IPackWriter.run_batch): again, from where it began, where a
        cluster refused its commit."""
        saved = (self.garbage_after, self.old_after, self.left,
                 dict(self.result))
        attempts = []

        def attempt():
            if attempts:  # refused: nothing of the batch happened
                (self.garbage_after, self.old_after, self.left,
                 result) = saved
                self.result.update(result)
                self.batch_conflicts += 1
                self.result['batch_conflicts'] = self.batch_conflicts
            attempts.append(None)
            return self._batch(session, checked_tid)
        return session.run_batch(attempt)

    def _batch(self, session, checked_tid):
        last = self.take_commit_lock(session)
        company = self.company if self.garbage_after is not None else None
        if company is not None:
            last = company.wait_for_votes(self, session, last)
        started = time.monotonic()
        if self.garbage_after is not None and last and last > checked_tid:
            self.rescue(session, checked_tid)
        if company is not None:
            self.spare(session, company.referred())
        steps = 0  # every batch makes progress, whatever the timeout
        gone, kept = [], {}
        removed_before = (self.result['objects_removed'],
                          self.result['revisions_removed'])
        while not steps or self.more(started, steps):
            if not self.step(session, gone, kept):
                break
            steps += 1
        done = self.garbage_after is None and self.old_after is None
        if done:
            removed = session.finish(self.pack_tid)
            if 'transactions_removed' in self.result:
                self.result['transactions_removed'] += removed
        worked = time.monotonic()
        session.commit_batch()
        ended = time.monotonic()
        self.finish_per_step = (ended - worked) / max(steps, 1)
        log.debug('pack batch %d: %s, %.3f s of work, %.3f s to '
                  'commit', self.result['batches'] + 1,
                  counted(steps, 'step'),
                  worked - started, ended - worked)
        self.cache.invalidate(gone)
        blobs = self.blobs
        if blobs is not None:
            # Only now that the rows are gone for good.
            blobs.packed(gone, kept)
        self.result['batches'] += 1
        self.metrics.pack_progress(
            self.result['objects_removed'] - removed_before[0],
            self.result['revisions_removed'] - removed_before[1],
            0 if done else self.left)
        if self.progress is not None:
            self.progress(self.total - (0 if done else self.left), self.total)
        return max(checked_tid, last or 0)
