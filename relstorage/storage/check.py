"""The integrity check of ``zodbcheck``: everything reachable from the
root, read through one snapshot.

Like the pre-pack, the check reads every current state once, in oid
order, a page at a time, in one read-only snapshot (which neither takes
nor waits for a lock, so writers go on), keeps only the reference graph
(see ReferenceGraph) and a class number per object, and checks the blobs
of each page as it goes. The snapshot ends before the graph is walked
from the root; the walk finds the references to objects that do not
exist (or were deleted) and, on request, the objects nothing reaches.
"""
import os
import time
from array import array

from ZODB.serialize import referencesf
from ZODB.utils import oid_repr
from ZODB.utils import p64
from ZODB.utils import tid_repr
from ZODB.utils import u64

from ..blobs.files import reading_helper
from ..pickledrefs import cross_references
from ..pickledrefs import refers_elsewhere
from ..pickledclasses import class_name
from .pack.graph import ReferenceGraph

#: Current states read per query.
PAGE = 1000
#: Findings listed per kind by default; the counts are always complete.
LISTED = 1000
#: The class of ZODB's blobs, whose data lives beside the state.
BLOB_CLASS = 'ZODB.blob.Blob'
#: Kinds of findings that mean the database is broken.
BROKEN = ('dangling', 'dangling_elsewhere', 'damaged', 'missing_blobs',
          'future')
#: Oids looked up per query in another database.
LOOKED_UP = 1000


class CheckResult(dict):
    """Counts (``objects``, ``references``, ``reachable``, ``blobs``,
    ``<kind>_count``), the findings of each kind (lists of dicts, at most
    the check's *listed* each), the snapshot's ``tid`` and ``seconds``."""

    @property
    def broken(self):
        return any(self[kind + '_count'] for kind in BROKEN)


class Check:
    """One run of the check over an adapter's database.

    *blob_dir*: with *shared_blob_dir*, the directory whose files are the
    only home of the blobs; otherwise blobs are looked for in the
    database. *progress*, if given, is called after each page with
    ``(objects read, estimated total)``. At most *listed* findings of
    each kind are kept (None: all)."""

    def __init__(self, adapter, blob_dir=None, shared_blob_dir=False,
                 unreachable=False, progress=None, listed=LISTED):
        self.adapter = adapter
        self.listed = listed
        self.files = (reading_helper(blob_dir)
                      if blob_dir and shared_blob_dir else None)
        self.progress = progress
        self.unreachable = unreachable
        kinds = BROKEN + (('unreachable',) if unreachable else ())
        self.result = CheckResult(objects=0, references=0, reachable=0,
                                  blobs=0)
        for kind in kinds:
            self.result[kind] = []
            self.result[kind + '_count'] = 0
        self.names = []        # class names, by number
        self.numbers = {}      # class name -> number
        self.classes = array('i')   # class number of each object read
        #: ``{database name: {oid: [(oid, class) of the objects of this
        #: database referring to it]}}``: the references to other
        #: databases of a multi-database (see check_elsewhere).
        self.elsewhere = {}

    def found(self, kind, **entry):
        self.result[kind + '_count'] += 1
        if self.listed is None or len(self.result[kind]) < self.listed:
            self.result[kind].append(entry)

    @staticmethod
    def class_of(state):
        """The class *state* names, None when deleted or unreadable."""
        if state is None:
            return None
        try:
            return class_name(state)
        except ValueError:
            return None

    def class_number(self, name):
        number = self.numbers.get(name)
        if number is None:
            number = self.numbers[name] = len(self.names)
            self.names.append(name)
        return number

    def run(self):
        started = time.monotonic()
        graph = ReferenceGraph()
        session = self.adapter.open_load_session()
        try:
            self.result['tid'] = session.restart()
            self.read(session, graph)
        finally:
            session.close()
        self.walk(graph)
        self.result['seconds'] = time.monotonic() - started
        return self.result

    def read(self, session, graph):
        """Every state current in the snapshot, a page at a time (deleted
        objects are left out of the graph, so that references to them are
        missing)."""
        total = session.estimated_object_count()
        after = -1
        while True:
            rows = session.object_rows(after, PAGE)
            if not rows:
                break
            with_blobs = []
            oids = []
            found = []
            for row in rows:
                if row[1] > self.result['tid']:
                    # No commit made it: polls never announce it, and the
                    # next commit would get an older tid than this one's.
                    self.found('future', oid=row[0], tid=row[1],
                               class_=self.class_of(row[2]),
                               last=self.result['tid'])
                if row[2] is not None:
                    oids.append(row[0])
                    refs = self.examine(row, with_blobs)
                    if refs:
                        found.append((row[0], refs))
            graph.add_page(oids, found)
            if with_blobs:
                self.check_blobs(session, with_blobs)
            after = rows[-1][0]
            if self.progress is not None:
                self.progress(len(graph), max(total, len(graph) + 1))
        self.result['objects'] = len(graph)
        if self.progress is not None:
            self.progress(len(graph), len(graph))

    def examine(self, row, with_blobs):
        """The oids the state of *row* refers to (none when it is
        damaged, which is recorded); a blob goes to *with_blobs*."""
        oid, tid, state, size, blob_id = row
        name = None
        refs = ()
        try:
            if len(state) != size:
                raise ValueError('%d bytes stored where %d were written'
                                 % (len(state), size))
            name = class_name(state)
        except ValueError as e:
            self.found('damaged', oid=oid, tid=tid, class_=name,
                       error=str(e))
        else:
            try:
                refs = sorted({u64(ref) for ref in referencesf(state)})
            except Exception as e:  # noqa: BLE001 -- what bad bytes raise
                why = type(e).__name__ + (': %s' % e if str(e) else '')
                self.found('damaged', oid=oid, tid=tid, class_=name,
                           error='the state does not unpickle (%s)' % why)
        self.classes.append(self.class_number(name))
        self.result['references'] += len(refs)
        if name is not None and refers_elsewhere(state):
            try:
                for database, target in cross_references(state):
                    self.elsewhere.setdefault(database, {}).setdefault(
                        target, []).append((oid, name))
            except Exception:  # noqa: BLE001 -- found damaged above
                pass
        if blob_id is not None or name == BLOB_CLASS:
            with_blobs.append((oid, tid, blob_id, name))
        return refs

    def check_blobs(self, session, rows):
        """Every blob of *rows* ``(oid, tid, blob_id, class)`` whole: a
        file in the shared directory, or chunks 0 to n in the database."""
        self.result['blobs'] += len(rows)
        if self.files is not None:
            for oid, tid, _blob_id, name in rows:
                path = self.files.getBlobFilename(p64(oid), p64(tid))
                if not os.path.exists(path):
                    self.found('missing_blobs', oid=oid, tid=tid, class_=name,
                               why='no file %s in the shared blob-dir'
                               % path)
            return
        chunks = session.blob_chunk_counts(
            [blob_id for _, _, blob_id, _ in rows if blob_id is not None])
        for oid, tid, blob_id, name in rows:
            have = chunks.get(blob_id)
            if blob_id is None:
                why = ('its revision names no blob in the database (blobs '
                       'kept in a shared directory need blob-dir and '
                       'shared-blob-dir true in the configuration)')
            elif have is None:
                why = 'blob %d has no chunk in the database' % blob_id
            elif have[0] != have[1] + 1:
                why = ('blob %d lacks %d of its chunks 0 to %d'
                       % (blob_id, have[1] + 1 - have[0], have[1]))
            else:
                continue
            self.found('missing_blobs', oid=oid, tid=tid, class_=name,
                       why=why)

    def check_elsewhere(self, own_name, adapters):
        """Look up, in the other databases of the multi-database this
        one (named *own_name* there) belongs to, the objects its states
        refer to: *adapters* is ``{database name: callable}``, each
        opening that database's adapter (closed here). A reference to an
        object that does not exist there is a ``dangling_elsewhere``
        finding; references to databases not among them are counted in
        ``elsewhere_unchecked``. Called after run()."""
        self.result['elsewhere_unchecked'] = 0
        for database, targets in sorted(self.elsewhere.items()):
            if database == own_name:
                continue
            if database not in adapters:
                self.result['elsewhere_unchecked'] += sum(
                    map(len, targets.values()))
                continue
            for target in missing_in(adapters[database](), sorted(targets)):
                for referrer, name in targets[target]:
                    self.found('dangling_elsewhere', oid=referrer,
                               class_=name, database=database,
                               missing=target)
        for entry in self.result['dangling_elsewhere']:
            if 'class' not in entry:
                readable(entry)

    def walk(self, graph):
        classes, names, index = self.classes, self.names, graph.index

        def missing(referrer, oid):
            self.found('dangling', oid=referrer,
                       class_=names[classes[index(referrer)]], missing=oid)

        if len(graph) and index(0) < 0:
            self.found('dangling', oid=None, class_=None, missing=0)
        reached = graph.reach({0}, missing)
        self.result['reachable'] = len(graph) - reached.count(0)
        if self.unreachable:
            for oid in graph.unreached(reached):
                self.found('unreachable', oid=oid,
                           class_=names[classes[index(oid)]])
        for kind in ('damaged', 'missing_blobs', 'future'):
            for entry in self.result[kind]:
                at = index(entry['oid'])   # -1: deleted, not in the graph
                entry['reachable'] = at >= 0 and bool(reached[at])
        for kind in BROKEN + ('unreachable',):
            for entry in self.result.get(kind, ()):
                readable(entry)


def readable(entry):
    """Oids and tids as ZODB prints them; ``class`` for ``class_``."""
    entry['class'] = entry.pop('class_')
    for key in ('oid', 'missing'):
        if entry.get(key) is not None:
            entry[key] = oid_repr(p64(entry[key]))
    for key in ('tid', 'last'):
        if key in entry:
            entry[key] = tid_repr(p64(entry[key]))


def missing_in(adapter, oids):
    """Those of *oids* (sorted) that have no current state in the
    database of *adapter* (which is closed), read through one snapshot."""
    try:
        session = adapter.open_load_session()
        try:
            session.restart()
            missing = []
            for at in range(0, len(oids), LOOKED_UP):
                lot = oids[at:at + LOOKED_UP]
                found = session.load_many(lot)
                missing.extend(oid for oid in lot
                               if found.get(oid, (None,))[0] is None)
            return missing
        finally:
            session.close()
    finally:
        adapter.close()
