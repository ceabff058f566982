"""Reading a BTree's buckets and values ahead, many buckets at a time.

Iterating a BTree (``values()``, ``items()``, ``len()``, a range from a
key on) goes from bucket to bucket through each bucket's reference to
the next: a chain that reading ahead among one object's references
(readahead.py) can only follow one bucket per query, since the next
bucket is known only once the one before it is read. Yet the tree's
inner nodes list the buckets in order, so a walk can read many at once.
A walk starts at:

- the miss of the first bucket a node lists (iterating a tree of one
  level starts there; so does looking up its smallest key, which then
  reads a few buckets more than it needs);
- the miss of the bucket a node names after its items, its first bucket
  (``_firstbucket``, which only iteration follows; a lookup comes down
  through the children): the walk covers the whole tree under the node.
  The node's children are read with that bucket, then their children
  when they are not yet the level just above the buckets (a node whose
  first reference is its subtree's first bucket lists buckets; one that
  names it last, after its items, lists nodes), one query per level,
  until the buckets are known in order;
- the miss of the bucket that a recent bucket names after its items (its
  next one: a range walked from some key on), when a node seen recently
  lists both;
- the second value missed in a bucket outside any walk (the cache held
  the buckets where the walk would have started), when a node seen
  recently lists the bucket: the walk goes on from there (a lookup
  misses one value per bucket).

Then the buckets are read in order, a few at first and twice as many
each time (up to MAX_BATCH), whether the cache holds them or not (a
bucket is a small row, and its state names its values); their values
are read ahead as they are missed, in order across buckets, in batches
growing the same way, and when the values known run short the next
buckets come in the same query. A tree walked while others are (the
trees in a tree, one after another) starts at half the pace they
reached. Reading 100,000 values of one tree then costs a few hundred
queries, not one or more per bucket.

All of this only reads the pickles: the class of a state (its name,
ending in ``BTree`` or ``TreeSet`` for a node, ``Bucket`` or ``Set`` for
a bucket, as BTrees' classes and subclasses named like them do), the
oids of its persistent references in order (a reference to an oid met
earlier in the same pickle is a memo lookup and not seen: a node whose
children are buckets does not show its first bucket twice), and the few
opcodes after the last reference. What it reads ahead is, like any
read-ahead, put into the shared cache only as states proved current: a
wrong guess costs rows, never a wrong state.
"""
import collections
import pickletools
import re

from ZODB.utils import p64

#: The class of a state (ZODB's pickles: protocol 2 or 3, the class as a
#: GLOBAL): BTrees' own, or subclasses named like them.
_CLASS = re.compile(rb'\x80[\x02\x03]c[\w.]+\n(\w+)\n')
#: Persistent references in ZODB's pickles (protocol 3) start with the
#: referenced oid as an 8-byte ``bytes``. Only oids a database can hold
#: (below 2**63) are taken: the pattern also matches by chance inside
#: other data (an integer whose bytes spell ``C\x08``, say).
_OID_IN_PICKLE = re.compile(rb'C\x08([\x00-\x7f][\x00-\xff]{7})')

NODE = 'node'
BUCKET = 'bucket'


def tree_kind(state):
    """NODE for the state of a BTree or TreeSet node, BUCKET for a bucket
    or a set (the buckets of a TreeSet), else None."""
    if not state.startswith(b'c', 2):
        return None
    match = _CLASS.match(state)
    if match is None:
        return None
    name = match.group(1)
    if name.endswith((b'BTree', b'TreeSet')):
        return NODE
    if _is_bucket_class(name):
        return BUCKET
    return None


def references(state):
    """The oids *state* refers to, in the order the pickle first names
    them."""
    ints = int.from_bytes
    return [ints(raw, 'big') for raw in _OID_IN_PICKLE.findall(state)]


#: The class of a node's first child, named with it (the reference's
#: oid, a memo put, the class).
_CHILD_CLASS = re.compile(rb'(?:q.|r.{4})?c[\w.]+\n(\w+)\n', re.DOTALL)


def _is_bucket_class(name):
    return name.endswith((b'Bucket', b'Set'))


def first_of_buckets(state, key):
    """Whether *state*, a node's, lists buckets and *key* (8 bytes) is
    the first: where iterating a tree of one level starts."""
    at = state.find(b'C\x08')
    if at < 0 or state[at + 2:at + 10] != key:
        return False
    match = _CHILD_CLASS.match(state, at + 10)
    return match is not None and _is_bucket_class(match.group(1))


#: Opcodes that only name memo entries or a reference's class.
_MEMO_OPS = frozenset(('BINPUT', 'LONG_BINPUT', 'MEMOIZE', 'BINGET',
                       'LONG_BINGET', 'GLOBAL'))


def refers_after_items_to(state, key):
    """Whether *state*, a node's or a bucket's, ends with a reference to
    the oid *key* (8 bytes) after its items: a node's first bucket, a
    bucket's next one (the state is ``(items, that reference)``). The
    last child of a node, or the last value of a bucket without a next
    one, is not: a tuple of items closes after it."""
    at = state.rfind(b'C\x08')
    if at < 0 or state[at + 2:at + 10] != key:
        return False
    try:
        ops = [op.name for op, _, _ in pickletools.genops(state[at:])
               if op.name not in _MEMO_OPS]
    except ValueError:
        return False
    if 'BINPERSID' not in ops:
        return False
    return ops[ops.index('BINPERSID') + 1:] == ['TUPLE2', 'STOP']


class _Walk:
    """One iteration over a tree's buckets."""

    __slots__ = ('first', 'nodes', 'buckets', 'pos', 'next', 'batch',
                 'expected', 'values', 'value_batch')

    def __init__(self, first_batch):
        #: The first bucket of the nodes being read (while they are).
        self.first = None
        #: The nodes asked for, in order, whose states give the buckets.
        self.nodes = ()
        #: The buckets in key order, and their positions.
        self.buckets = []
        self.pos = {}
        #: The position of the first bucket not asked for yet.
        self.next = 0
        self.batch = first_batch
        #: Buckets asked for whose states are to give their values.
        self.expected = []
        #: Values of the buckets read, in order, not asked for yet.
        self.values = collections.deque()
        self.value_batch = first_batch


class TreeWalks:
    """The walks through BTrees of one storage instance (used by its
    ReadAhead, under the load lock). *holds(oid)* tells whether the
    shared cache has an entry for oid."""

    #: Walks kept at once (a BTree of BTrees walks the inner trees while
    #: the outer walk goes on).
    WALKS = 8
    #: Inner nodes remembered as where a walk of one level may start.
    NODES = 16
    #: The most inner nodes a walk reads to learn its buckets.
    MAX_NODES = 5000
    #: States longer than this are not searched for a missed oid, which
    #: bounds what a miss costs (ReadAhead's searches too).
    MAX_SEARCHED = 1 << 16
    #: Values of a walk's buckets kept waiting for their misses (a walk
    #: that never loads them, as ``len(tree)``, forgets the oldest).
    MAX_VALUES = 1 << 15

    def __init__(self, holds, first_batch, max_batch):
        self._holds = holds
        self._first_batch = first_batch
        self._max_batch = max_batch
        #: Buckets and values not yet asked for -> their walk.
        self._walk_of = {}
        self._walks = collections.deque()
        #: Recently seen inner nodes: oid -> state.
        self._nodes = collections.OrderedDict()
        #: Buckets outside walks whose value missed once (see
        #: _among_values).
        self._value_misses = {}
        #: Whether a query's rows are to be looked at (see arrived).
        self.expecting = False

    def forget(self):
        self._walk_of.clear()
        self._walks.clear()
        self._nodes.clear()
        self._value_misses.clear()
        self.expecting = False

    # Misses

    def along_with(self, oid, recent):
        """The oids to read with *oid* (not cached) when it is a step of
        a walk through a tree (a list starting with oid), else None.
        *recent* holds the ``(oid, state)`` last read, oldest first."""
        walk = self._walk_of.get(oid)
        if walk is not None:
            if oid in walk.pos:
                return self._buckets_from(walk, walk.pos[oid])
            return self._values_from(walk, oid)
        key = p64(oid)
        for parent, state in reversed(recent):
            if (parent == oid or len(state) > self.MAX_SEARCHED
                    or key not in state):
                continue
            kind = tree_kind(state)
            if kind is NODE:
                self._remember_node(parent, state)
                return self._from_node(state, oid, key)
            if kind is BUCKET:
                if refers_after_items_to(state, key):
                    return self._step(parent, oid)
                return self._among_values(parent, state, oid, recent)
            # The most recent state that refers to oid decides.
            return None
        # A node read before the last few states (going down a deep tree
        # to its last bucket, as iteration does first, reads many).
        for parent, state in reversed(self._nodes.items()):
            if parent != oid and key in state:
                return self._from_node(state, oid, key)
        return None

    def _from_node(self, state, oid, key):
        """The walk that a miss of *oid*, which the node's *state* refers
        to, starts, if any."""
        if refers_after_items_to(state, key):
            return self._start(state, oid)
        if first_of_buckets(state, key):
            return self._buckets_from(self._new_walk(references(state)), 0)
        return None

    def _remember_node(self, oid, state):
        nodes = self._nodes
        nodes[oid] = state
        nodes.move_to_end(oid)
        if len(nodes) > self.NODES:
            nodes.popitem(last=False)

    def _start(self, state, first):
        """*first* is the first bucket of the node whose *state* refers
        to it last: a walk over the node's tree starts; its children are
        read with that bucket."""
        refs = references(state)
        if len(refs) < 2 or refs[0] == first or refs[-1] != first:
            return None
        walk = self._new_walk()
        walk.first = first
        walk.nodes = refs[:-1]
        # The nodes whatever the cache holds: their states are wanted.
        self.expecting = True
        return [first] + [node for node in walk.nodes if node != first]

    def _step(self, bucket, oid):
        """*oid* follows *bucket*: the walk through the recent node that
        lists both, from *oid* on; None when none does."""
        walk = self._walk_listing(reversed(self._nodes.values()), bucket,
                                  oid)
        if walk is None:
            return None
        return self._buckets_from(walk, walk.pos[oid])

    def _among_values(self, bucket, state, oid, recent):
        """*oid* is a value of *bucket* (not in a walk: the cache held the
        bucket when the walk would have read it, or no walk reached it):
        at the second value missed there, the walk through a node seen
        lately that lists the bucket, from *oid* on (a lookup misses one
        value per bucket); None otherwise."""
        misses = self._value_misses
        if misses.pop(bucket, None) is None:
            misses[bucket] = True
            if len(misses) > self.NODES:
                del misses[next(iter(misses))]
            return None
        nodes = [node for _, node in reversed(recent)
                 if tree_kind(node) is NODE]
        nodes.extend(reversed(self._nodes.values()))
        walk = self._walk_listing(nodes, bucket)
        if walk is None:
            return None
        walk.next = walk.pos[bucket] + 1
        values = references(state)
        if oid not in values:
            return None
        self._add_values(walk, values[values.index(oid):])
        return self._values_from(walk, oid)

    def _walk_listing(self, nodes, *buckets):
        """A new walk over the buckets of the first of the node states
        *nodes* that lists all of *buckets*; None when none does."""
        keys = [p64(bucket) for bucket in buckets]
        for node in nodes:
            if not all(key in node for key in keys):
                continue
            refs = references(node)
            if all(bucket in refs for bucket in buckets):
                return self._new_walk(refs)
            # (the oids' bytes there by chance)
        return None

    def _new_walk(self, buckets=None):
        """A new walk, over *buckets* when they are known."""
        walks = self._walks
        if len(walks) >= self.WALKS:
            old = walks.popleft()
            for oid in list(old.pos) + list(old.values):
                self._release(old, oid)
        # A tree walked while others are (the trees in a tree, one after
        # another) starts at half the pace they reached.
        pace = max([self._first_batch] + [
            other.value_batch // 2 for other in walks])
        walk = _Walk(pace)
        walks.append(walk)
        if buckets is not None:
            self._set_buckets(walk, buckets)
        return walk

    def _release(self, walk, oid):
        """*oid* no longer waits in *walk*; whether it did."""
        if self._walk_of.get(oid) is walk:
            del self._walk_of[oid]
            return True
        return False

    def _set_buckets(self, walk, buckets):
        walk.buckets = buckets
        pos = walk.pos
        walk_of = self._walk_of
        for index, bucket in enumerate(buckets):
            pos.setdefault(bucket, index)
            walk_of[bucket] = walk

    def _buckets_from(self, walk, index):
        """The bucket at position *index* (missed) and those after it, as
        many as the walk has reached; None when it was asked for already
        (by a lookup, or evicted since)."""
        if index < walk.next:
            return None
        batch = [walk.buckets[index]]
        walk.expected.append(batch[0])
        self._more_buckets(walk, index + 1, batch, walk.batch - 1)
        return batch

    def _more_buckets(self, walk, index, batch, want=None):
        """Add to *batch* the buckets from position *index* on, *want* of
        them or as many as the walk has reached."""
        if want is None:
            want = walk.batch
        walk.batch = min(walk.batch * 2, self._max_batch)
        take = walk.buckets[index:index + want]
        walk.next = index + len(take)
        # Whether the cache holds them or not: their states name the
        # values to read ahead (a bucket is a small row).
        batch.extend(take)
        walk.expected.extend(take)
        self.expecting = True

    def _values_from(self, walk, oid):
        """Values of the walk's buckets from *oid* on (those before it
        never missed), as many as the walk has reached, and the next
        buckets when the values known run short."""
        values = walk.values
        release = self._release
        while values:
            other = values.popleft()
            release(walk, other)
            if other == oid:
                break
        want = walk.value_batch
        walk.value_batch = min(want * 2, self._max_batch)
        holds = self._holds
        batch = [oid]
        while values and len(batch) < want:
            other = values.popleft()
            if release(walk, other) and not holds(other):
                batch.append(other)
        if len(values) < want and walk.next < len(walk.buckets):
            self._more_buckets(walk, walk.next, batch)
        return batch if len(batch) > 1 else None

    # Rows read

    def arrived(self, found):
        """Look at the rows (``{oid: (state, tid)}``) a query read for the
        walks; the oids to read next for them (the next level of a tree's
        nodes, or the first buckets once the nodes above them are
        known), or None."""
        more = []
        for walk in self._walks:
            if walk.expected:
                self._buckets_arrived(walk, found)
            if walk.nodes:
                self._nodes_arrived(walk, found, more)
        self.expecting = bool(more)
        return more or None

    def _nodes_arrived(self, walk, found, more):
        states = [found[node][0] for node in walk.nodes
                  if node in found and found[node][0]]
        walk.nodes = ()
        if not states:
            return
        first = references(states[0])
        if first and first[0] == walk.first:
            # Their children are buckets: the walk goes on from the
            # first, whose values are wanted too.
            buckets = []
            for state in states:
                buckets.extend(references(state))
            self._set_buckets(walk, buckets)
            start = walk.pos.get(walk.first)
            if start is None:
                return
            row = found.get(walk.first)
            if row is not None and row[0]:
                self._add_values(walk, references(row[0]))
            else:
                more.append(walk.first)
                walk.expected.append(walk.first)
            self._more_buckets(walk, start + 1, more)
            return
        if not first or first[-1] != walk.first:
            return    # not a tree as understood here: walk no further
        children = []
        for state in states:
            children.extend(references(state)[:-1])
        if len(children) <= self.MAX_NODES:
            walk.nodes = children
            more.extend(children)

    def _buckets_arrived(self, walk, found):
        for bucket in walk.expected:
            row = found.get(bucket)
            if row is not None and row[0]:
                self._add_values(walk, references(row[0]))
        walk.expected = []
        values = walk.values
        while len(values) > self.MAX_VALUES:
            self._release(walk, values.popleft())

    def _add_values(self, walk, refs):
        """The values among a bucket's references *refs* wait for their
        misses (its next bucket is no value)."""
        pos = walk.pos
        values = walk.values
        walk_of = self._walk_of
        for value in refs:
            if value not in pos:
                values.append(value)
                walk_of[value] = walk
