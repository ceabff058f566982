"""What each side of ``relstorage_speedtest.bulk`` runs with its own Python:
a Zope-style bulk script, copied to a directory of its own and started as

    python bulkside.py work|read SPEC

It imports ZODB and whichever ``relstorage`` its Python has, never this
package, so that it runs unchanged in the other side's virtualenv. ``work``
inserts, modifies, deletes and reads back in one process (its cache filling
as it goes); ``read`` is a fresh process reading everything. Each prints one
JSON line: the seconds of each phase, in order, the CPU seconds this
process spent on them, and what it read (checked by the caller against the
other contenders).
"""
import hashlib
import json
import resource
import sys
import time

import ZODB.config
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping

#: Objects per inner tree with ``nested`` (BTrees of BTrees).
PER_INNER = 1000


def open_db(spec):
    return ZODB.config.databaseFromString(
        '%%import relstorage\n<zodb>\n cache-size %d\n%s\n</zodb>\n'
        % (spec['connection_cache'], spec['section']))


class Tree:
    """The objects, by number: one BTree, or BTrees of BTrees."""

    def __init__(self, root, nested):
        self.root = root
        self.nested = nested

    def _inner(self, i, create=False):
        outer = self.root['tree']
        key = i // PER_INNER
        if create and key not in outer:
            outer[key] = OOBTree()
        return outer[key]

    def set(self, i, value):
        if self.nested:
            self._inner(i, True)[i] = value
        else:
            self.root['tree'][i] = value

    def get(self, i):
        return (self._inner(i) if self.nested else self.root['tree'])[i]

    def delete(self, i):
        del (self._inner(i) if self.nested else self.root['tree'])[i]

    def values(self):
        if not self.nested:
            return self.root['tree'].values()
        return (value for inner in self.root['tree'].values()
                for value in inner.values())


def in_commits(db, numbers, commits, action):
    """Apply *action(tree, i)* to each of *numbers*, in *commits*
    transactions."""
    numbers = list(numbers)
    per = max(1, -(-len(numbers) // commits))
    for start in range(0, len(numbers), per):
        with db.transaction() as conn:
            tree = Tree(conn.root(), SPEC['nested'])
            for i in numbers[start:start + per]:
                action(tree, i)


def new_object(i):
    return PersistentMapping(value=i, text='x' * SPEC['state_bytes'])


def bump(tree, i):
    tree.get(i)['value'] += 1


def read_all(db):
    """Every remaining object's value: (count, digest)."""
    conn = db.open()
    try:
        values = [obj['value'] for obj in Tree(conn.root(),
                                               SPEC['nested']).values()]
    finally:
        conn.close()
    return len(values), hashlib.sha256(
        json.dumps(values).encode()).hexdigest()[:16]


def timed(phases, name, call, *args):
    started = time.perf_counter()
    result = call(*args)
    phases.append([name, time.perf_counter() - started])
    return result


def do_work(db):
    n, commits = SPEC['objects'], SPEC['commits']
    phases = []
    with db.transaction() as conn:
        conn.root()['tree'] = OOBTree()
    timed(phases, 'insert', in_commits, db, range(n), commits,
          lambda tree, i: tree.set(i, new_object(i)))
    for name in ('modify', 'modify again'):
        timed(phases, name, in_commits, db, range(0, n, 2), commits, bump)
    timed(phases, 'delete', in_commits, db,
          [i for i in range(n) if (i // 2) % 2 == 0], commits,
          lambda tree, i: tree.delete(i))
    left = [i for i in range(n) if (i // 2) % 2 == 1]
    if SPEC['reindex']:
        timed(phases, 'reindex', in_commits, db, left, commits, bump)
    if SPEC['migrate']:
        timed(phases, 'migrate', migrate, db)
    found = timed(phases, 'read', read_all, db)
    return phases, found


def migrate(db):
    """Read every object and write what it holds to a new tree, in
    *commits* transactions (a schema migration)."""
    conn = db.open()
    try:
        pairs = [(i, obj['value']) for i, obj in enumerate(
            Tree(conn.root(), SPEC['nested']).values())]
    finally:
        conn.close()
    per = max(1, -(-len(pairs) // SPEC['commits']))
    with db.transaction() as conn:
        conn.root()['migrated'] = OOBTree()
    for start in range(0, len(pairs), per):
        with db.transaction() as conn:
            target = conn.root()['migrated']
            for i, value in pairs[start:start + per]:
                target[i] = PersistentMapping(value=value)


def do_read(db):
    phases = []
    found = timed(phases, 'fresh read', read_all, db)
    return phases, found


SPEC = {}

if __name__ == '__main__':
    SPEC.update(json.loads(sys.argv[2]))
    database = open_db(SPEC)
    cpu = time.process_time()
    try:
        steps, (count, digest) = {'work': do_work,
                                  'read': do_read}[sys.argv[1]](database)
    finally:
        database.close()
    print(json.dumps({'phases': steps, 'count': count, 'digest': digest,
                      'cpu': time.process_time() - cpu,
                      'peak_mb': resource.getrusage(
                          resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
