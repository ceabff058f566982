"""What each side of ``relstorage_speedtest.pack`` runs with its own Python:
one script, kept here as source text and written to a file of its own, that
builds the database, commits beside the pack, or reads what is left.

It imports ZODB and whichever ``relstorage`` its Python has, never this
package, so that the same text runs in the other side's virtualenv.

    python packside.py build|writer|churn|verify SPEC
    python packside.py zodbpack --days DAYS CONFIG

The last packs the storage CONFIG opens as zodbpack does, for a storage
that comes without one (zodb-pgjsonb): its storage's own pack, garbage
collection included, with ZODB's reference finder.

On MariaDB, RelStorage 4.3 is adjusted by the start-up module
relstorage_speedtest.othervenv installs in its virtualenv (the environment of
each of its processes asks for it): as installed it cannot create its schema
there, and its zodbpack, taking the server for MySQL 8, replaces the stored
procedures a writer committing meanwhile is using.
"""
import os

SCRIPT = r'''
import hashlib
import json
import signal
import sys
import time

import transaction
import ZODB.config
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping


def open_db(spec):
    return ZODB.config.databaseFromString(
        spec.get('imports', '%import relstorage') + '\n<zodb>\n'
        + spec['section'] + '\n</zodb>\n')


def build(db, objects, batch=1000):
    """*objects* objects in a BTree; a fifth then changed (history), a
    third unlinked (garbage)."""
    with db.transaction() as conn:
        conn.root()['tree'] = OOBTree()
    for start in range(0, objects, batch):
        with db.transaction() as conn:
            tree = conn.root()['tree']
            for i in range(start, min(start + batch, objects)):
                tree[i] = PersistentMapping(value=i)
    for start in range(0, objects, batch * 5):
        with db.transaction() as conn:
            tree = conn.root()['tree']
            for i in range(start, min(start + batch * 5, objects), 5):
                tree[i]['value'] = -i
    for start in range(0, objects, batch * 3):
        with db.transaction() as conn:
            tree = conn.root()['tree']
            for i in range(start, min(start + batch * 3, objects), 3):
                del tree[i]


def tree_digest(db):
    """Items in the tree and a digest of their keys and values."""
    conn = db.open()
    try:
        pairs = [[key, value['value']]
                 for key, value in conn.root()['tree'].items()]
    finally:
        conn.close()
    return len(pairs), hashlib.sha256(
        json.dumps(pairs).encode()).hexdigest()[:16]


def do_build(spec):
    db = open_db(spec)
    started = time.perf_counter()
    build(db, spec['objects'])
    seconds = time.perf_counter() - started
    print(json.dumps({'build_seconds': seconds}))
    db.close()


def do_writer(spec):
    """Small commits until SIGTERM, one JSON line per commit."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *args: stopping.append(1))
    db = open_db(spec)
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    n = 0

    def commit():
        tm.begin()
        conn.root()['writer'] = n
        tm.commit()
    commit()  # the first one opens and loads: not counted
    print(json.dumps({'ready': True}), flush=True)
    while not stopping:
        n += 1
        at = time.time()
        started = time.perf_counter()
        error = None
        try:
            commit()
        except Exception as e:  # noqa: BLE001 -- reported to the parent
            tm.abort()
            error = repr(e)
        print(json.dumps({'at': at, 'seconds': time.perf_counter() - started,
                          'error': error}), flush=True)
        time.sleep(0.005)
    conn.close()
    db.close()


def do_churn(spec):
    """A day of a site's work between two nightly packs: a *churn* share
    of the objects changed, half as many unlinked, half as many added."""
    db = open_db(spec)
    objects = spec['objects']
    step = max(1, int(round(1 / spec['churn'])))
    started = time.perf_counter()
    with db.transaction() as conn:
        tree = conn.root()['tree']
        for i in range(1, objects, step):
            if i in tree:
                tree[i]['value'] = i + 1
        for i in range(2, objects, step * 2):
            tree.pop(i, None)
        for i in range(objects, objects + objects // (step * 2)):
            tree[i] = PersistentMapping(value=i)
    print(json.dumps({'churn_seconds': time.perf_counter() - started}))
    db.close()


def do_verify(spec):
    db = open_db(spec)
    items, digest = tree_digest(db)
    print(json.dumps({'tree_items': items, 'tree_digest': digest}))
    db.close()


def do_zodbpack(argv):
    from ZODB.serialize import referencesf
    days = float(argv[argv.index('--days') + 1]) if '--days' in argv else 0
    with open(argv[-1]) as f:
        storage = ZODB.config.storageFromFile(f)
    try:
        storage.pack(time.time() - days * 86400, referencesf)
    finally:
        storage.close()
    print('packed')


if __name__ == '__main__':
    if sys.argv[1] == 'zodbpack':
        do_zodbpack(sys.argv[2:])
    else:
        {'build': do_build, 'writer': do_writer, 'churn': do_churn,
         'verify': do_verify}[sys.argv[1]](json.loads(sys.argv[2]))
'''


def write_script(directory):
    """The script, written to *directory* (which then comes first on the
    child's ``sys.path``, not the working directory); its path."""
    path = os.path.join(directory, 'packside.py')
    with open(path, 'w') as f:
        f.write(SCRIPT)
    return path
