"""Packing the databases of a multi-database together.

In a ZODB multi-database (``ZODB.DB(..., databases=...)``, the
``<zodb_db>`` sections of a zope.conf, the ``<zodb>`` sections of a
ZODB config) an object of one database may be referred to only from
another: its pickles hold ``['m', (database, oid, class)]`` or ``['n',
(database, oid)]`` persistent ids, which ZODB's referencesf leaves out. A
garbage collection of one database alone would remove such an object.

pack_databases() packs some databases of a multi-database, the *chosen*
ones, knowing the references of all of them:

- Each chosen RelStorage that collects garbage runs its pre-pack (see
  pack.Pack.stages), which also notes, for every object it reads, the
  objects of other databases it refers to. Then, before anything is
  removed, each such database spares the objects that the others' live
  objects refer to, with whatever those reach through its garbage; a
  spared object may refer to others in turn, so this goes on until no
  database spares anything more. Garbage that only garbage of another
  database refers to (a cycle across databases included) is removed.
- Every other database (not chosen, packed without garbage collection,
  or not a RelStorage) is read whole, one current record after another
  (``record_iternext``; every revision, from its transactions, where it
  cannot list records): everything its records refer to elsewhere is
  spared, as if those records were all alive.
- A chosen storage that is not a RelStorage (a FileStorage) is packed by
  its own pack(); when another database refers to any of its objects,
  without garbage collection, so that none of them is removed.

The pre-packs run one after the other; each database keeps its pack
lock, and the pre-pack's scratch state, until every database's garbage
is known; the removals then run one database after the other. Each
batch of removals also spares what the other databases' commits since
they were read refer to (see _Newer); and first, while a commit whose
states refer to other databases has voted in another database and not
finished there (its new references not visible yet, though its finish
here may have removed the old ones), it releases the commit lock and
waits (see adapters.votes, _Newer.wait).
"""
import logging
import time

from ZODB.POSException import Unsupported

from ZODB.serialize import referencesf as zodb_referencesf
from ZODB.utils import p64
from ZODB.utils import u64

from ...exceptions import PackedFurtherAlready
from ...pickledrefs import cross_references
from ...wording import counted

log = logging.getLogger(__name__)

#: The first pause of a batch waiting for a commit voted in another
#: database (see _Newer.wait); each one after is twice as long.
VOTE_PAUSE = 0.01
#: Seconds between the warnings of a batch that goes on waiting so.
VOTE_WAIT_WARNING = 60


def _is_relstorage(storage):
    return callable(getattr(storage, 'new_pack', None))


def read_cross_references(name, storage):
    """``{oid: [(database name, oid)]}``: what each current record of
    *storage* (the database *name*) refers to in other databases, for
    those that refer to any (oids as integers)."""
    iternext = getattr(storage, 'record_iternext', None)
    if iternext is None:
        if callable(getattr(storage, 'iterator', None)):
            return _every_revision(storage)
        raise Unsupported(
            'the references of database %r (a %s) to the other databases '
            'cannot be read: it lists neither its records '
            '(record_iternext) nor its transactions (iterator); pack the '
            'other databases without garbage collection (pack-gc false in '
            'their sections)' % (name, type(storage).__name__))
    found = {}
    next_oid = None
    while True:
        try:
            oid, _tid, data, next_oid = iternext(next_oid)
        except ValueError:
            break  # empty
        refs = cross_references(data) if data else None
        if refs:
            found[u64(oid)] = refs
        if next_oid is None:
            break
    return found


def _every_revision(storage):
    """read_cross_references() of a storage that lists its transactions
    but not its current records (MappingStorage, DemoStorage): what every
    revision refers to, which holds what the current ones do."""
    found = {}
    for transaction in storage.iterator():
        for record in transaction:
            refs = cross_references(record.data) if record.data else None
            if refs:
                found.setdefault(u64(record.oid), set()).update(refs)
    return {oid: sorted(refs) for oid, refs in found.items()}


class _Newer:
    """What the databases commit after they were read, for each packed
    database the references into it (Company.referred): read from the
    others' transaction iterators, under the packed database's commit
    lock (a batch's), so that a reference moved from one database into
    another while the pack runs is seen."""

    def __init__(self, storages):
        self.storages = storages
        #: The newest tid of each database before it was read.
        self.start = {name: u64(storage.lastTransaction())
                      for name, storage in storages.items()}
        #: A VoteWatch of each RelStorage, opened when first asked.
        self.watches = {}
        #: The databases whose watch cannot tell (warned of once).
        self.unknown = set()

    def voted_elsewhere(self, name):
        """Another database than *name* where a commit that refers to
        other databases has voted and not finished, or None."""
        for other in self.storages:
            if other != name and self.pending(other):
                return other
        return None

    def wait(self, name, pack, session, last):
        """While a commit of the multi-database has voted in another
        database and not finished there, its new references are not
        visible yet, although its finish in *name* may have removed the
        old ones: end the batch *pack* began on *session* (releasing the
        commit lock, which that commit may want) and begin again later.
        Returns the newest tid, the commit lock held and no such commit
        pending."""
        started = warned = None
        pause = VOTE_PAUSE
        result = pack.result
        while True:
            other = self.voted_elsewhere(name)
            if other is None:
                break
            session.abort_batch()
            now = time.monotonic()
            if started is None:
                started = warned = now
                result['vote_waits'] = result.get('vote_waits', 0) + 1
                log.info('pack of database %r waits: a commit that may '
                         'refer to it has voted in database %r and not '
                         'finished', name, other)
            elif now - warned >= VOTE_WAIT_WARNING:
                # A process stopped between its finishes (a live one: a
                # dead one's claim is gone).
                warned = now
                log.warning('pack of database %r still waits, for %.0f s '
                            'now: a commit voted in database %r has not '
                            'finished', name, now - started, other)
            # A commit ends milliseconds after its vote, unless its
            # process is stalled: pauses from short to
            # pack-commit-busy-delay.
            time.sleep(pause)
            pause = min(pause * 2, max(pack.options.pack_commit_busy_delay,
                                       VOTE_PAUSE))
            last = pack.take_commit_lock(session)
        if started is not None:
            result['vote_wait_seconds'] = result.get(
                'vote_wait_seconds', 0.0) + time.monotonic() - started
        return last

    def pending(self, name):
        """Whether a commit of database *name* that refers to other
        databases has voted and not finished (see adapters.votes)."""
        watch = self.watches.get(name)
        if watch is None:
            if not _is_relstorage(self.storages[name]):
                return False  # it says nothing (see the module docstring)
            watch = self.watches[name] = \
                self.storages[name].adapter.open_vote_watch()
        pending = watch.pending()
        if pending is None and name not in self.unknown:
            self.unknown.add(name)
            log.warning(
                'database %r cannot tell of commits that have voted and '
                'not finished: a commit moving an object between databases '
                'while this pack removes garbage may leave a reference to a '
                'removed object', name)
        return bool(pending)

    def close(self):
        for watch in self.watches.values():
            watch.close()
        self.watches.clear()

    def referred(self, name):
        """Company.referred for the database *name*."""
        since = dict(self.start)

        def referred():
            found = set()
            for other, tid in since.items():
                if other != name:
                    since[other] = self.scan(other, tid, name, found)
            return found
        return referred

    def scan(self, other, tid, name, found):
        """Add to *found* the oids of database *name* that the records
        committed in database *other* after *tid* refer to; return the
        newest tid read."""
        iterator = getattr(self.storages[other], 'iterator', None)
        if iterator is None:
            return tid
        transactions = iterator(p64(tid + 1))
        try:
            for transaction in transactions:
                for record in transaction:
                    if record.data:
                        found.update(oid for database, oid
                                     in cross_references(record.data)
                                     if database == name)
                tid = max(tid, u64(transaction.tid))
        finally:
            close = getattr(transactions, 'close', None)
            if close is not None:
                close()
        return tid


def _all(cross):
    """Every reference of *cross* (read_cross_references())."""
    return {ref for refs in cross.values() for ref in refs}


class Company:
    """What the pack of the database *name* (*storage*) asks of the
    databases it packs together with (Pack.company)."""

    def __init__(self, newer, name, storage):
        self.newer = newer
        self.name = name
        self.storage = storage
        #: The oids the others' commits since they were read refer to.
        self.referred = newer.referred(name)

    def wait_for_votes(self, pack, session, last):
        return self.newer.wait(self.name, pack, session, last)

    def cross_references(self):
        return read_cross_references(self.name, self.storage)


class _Together:
    """The chosen RelStorages that collect garbage, each stopped once
    its garbage is known (at the yield of Pack.stages)."""

    def __init__(self):
        self.packs = {}  # database name -> (Pack, its stages, session)

    def start(self, name, pack):
        """Run *pack* until its garbage is known; False if it ended
        instead (an empty database)."""
        stages = pack.stages()
        try:
            session = next(stages)
        except StopIteration:
            return False
        self.packs[name] = (pack, stages, session)
        return True

    def outgoing(self):
        """``(database name, oid)`` that the packs' live objects refer
        to."""
        found = set()
        for pack, _, session in self.packs.values():
            found.update(pack.outgoing(session))
        return found

    def spare(self, name, oids):
        """Spare *oids* (and what they reach through garbage) in the pack
        of database *name*, if there is one; how many were garbage."""
        if name not in self.packs:
            return 0
        pack, _, session = self.packs[name]
        spared = pack.spare(session, oids)
        pack.result['objects_kept_for_other_databases'] = \
            pack.result.get('objects_kept_for_other_databases', 0) \
            + len(spared)
        return len(spared)

    def settle(self):
        """Let every pack commit what it found (and end its reading
        session) before any removes: none keeps a transaction open while
        another removes. Returns ``{database name: result}`` of those
        that ended there (a pre-pack only)."""
        ended = {}
        for name, (pack, stages, _) in list(self.packs.items()):
            try:
                next(stages)
            except StopIteration:
                del self.packs[name]
                ended[name] = pack.result
        return ended

    def finish(self, name):
        pack, stages, _ = self.packs.pop(name)
        for _ in stages:
            pass
        return pack.result

    def close(self):
        """End the packs not finished (after an error): nothing of theirs
        is removed."""
        for _, stages, _ in self.packs.values():
            stages.close()
        self.packs.clear()


def _by_database(refs):
    found = {}
    for name, oid in refs:
        found.setdefault(name, set()).add(oid)
    return found


def pack_databases(storages, t, referencesf, chosen=None, gc=None,
                   progress=None, workers=None, prepack_only=None,
                   use_prepack_state=None):
    """Pack the databases *chosen* (names; default all) of the
    multi-database *storages* (``{database name: storage}``, every
    database whose references count) to time *t*, none of them removing
    an object that another database refers to (see the module's
    docstring). *gc* (default: each RelStorage's pack-gc option; other
    storages: their own default), *workers*, *prepack_only* and
    *use_prepack_state* are as for RelStorage.pack_with_result; *progress*
    is ``{database name: progress callable}``. Returns ``{database name:
    result}``: a PackResult for each RelStorage, None for others, or the
    PackedFurtherAlready error of a database an earlier pack took further
    than *t* (not packed; its references count all the same)."""
    names = list(storages) if not chosen else list(chosen)
    unknown = [name for name in names if name not in storages]
    if unknown:
        raise ValueError('no database named %s among %s'
                         % (', '.join(map(repr, unknown)),
                            ', '.join(map(repr, storages))))
    progress = progress or {}
    if prepack_only or use_prepack_state:
        others = [name for name in names
                  if not _is_relstorage(storages[name])]
        if others:
            raise Unsupported(
                'a pre-pack (and the use of its state) applies to '
                'RelStorage only, not to database %s'
                % ', '.join(map(repr, others)))
    packs = {}

    def new_pack(name, company=None):
        packs[name] = storages[name].new_pack(
            t, referencesf, gc, progress.get(name), prepack_only,
            use_prepack_state, workers, company)
    for name in names:
        if _is_relstorage(storages[name]):
            new_pack(name)
    collecting = [name for name in names
                  if (packs[name].gc if name in packs else gc is not False)]
    results = {}
    if not collecting:
        # No garbage collection: no reference matters.
        for name in names:
            results[name] = _pack_alone(name, storages[name], packs, t,
                                        referencesf, gc)
        return results
    gathered = [name for name in collecting if name in packs]
    if gathered and referencesf is not zodb_referencesf:
        # What another reader leaves out, nothing here can tell.
        raise Unsupported(
            'packing databases together reads their cross-database '
            'references as ZODB\'s pickles hold them: pass '
            'ZODB.serialize.referencesf, or pack without garbage '
            'collection')
    newer = _Newer(storages)
    together = _Together()
    try:
        # The databases whose garbage is not found here: everything
        # their records refer to stays.
        fixed = set()
        for name, storage in storages.items():
            if name not in gathered:
                fixed.update(_all(read_cross_references(name, storage)))
        for name in gathered:
            # (Made again, now in company.)
            new_pack(name, Company(newer, name, storages[name]))
            pack = packs[name]
            try:
                if not together.start(name, pack):
                    results[name] = pack.result
            except PackedFurtherAlready as e:
                # Nothing to pack there; what it refers to still counts.
                results[name] = e
                fixed.update(_all(read_cross_references(name,
                                                        storages[name])))
                continue
        spared = {}
        while True:
            wanted = _by_database(fixed | together.outgoing())
            more = False
            for name, oids in wanted.items():
                new = oids - spared.setdefault(name, set())
                if new:
                    spared[name] |= new
                    together.spare(name, new)
                    more = True
            if not more:
                break
        _warn_unknown(spared, storages)
        results.update(together.settle())
        for name in names:
            if name in together.packs:
                results[name] = together.finish(name)
            elif name not in results:
                # A database packed on its own: with
                # garbage collection only when nothing refers into it.
                results[name] = _pack_alone(
                    name, storages[name], packs, t, referencesf,
                    False if spared.get(name) else gc)
    finally:
        together.close()
        newer.close()
    return results


def _pack_alone(name, storage, packs, t, referencesf, gc):
    if name in packs:
        pack = packs[name]
        if gc is False:
            pack.gc = False
        return pack.run()
    if gc is None:
        storage.pack(t, referencesf)
    else:
        try:
            storage.pack(t, referencesf, gc=gc)
        except TypeError:
            if gc:
                raise
            raise Unsupported(
                'database %r (a %s) has objects that other databases '
                'refer to, and its pack cannot be told to keep them (it '
                'takes no gc argument): pack it without garbage '
                'collection by its own means' % (
                    name, type(storage).__name__)) from None
        if not gc:
            log.info('packed database %r without garbage collection: '
                     'other databases refer to its objects', name)
    return None


def _warn_unknown(spared, storages):
    for name, oids in sorted(spared.items()):
        if name not in storages:
            log.warning(
                '%s of the databases packed %s to objects of '
                'database %r, which is not among them (%s...): nothing '
                'of it was looked at', counted(len(oids), 'object'),
                'refers' if len(oids) == 1 else 'refer', name,
                ', '.join('0x%x' % oid for oid in sorted(oids)[:3]))
