"""What each side of ``relstorage_speedtest.iternext`` runs with its own
Python, copied to a directory of its own and started as

    python iternextside.py fill|walk SPEC

It imports ZODB and whichever ``relstorage`` its Python has, never this
package, so that it runs unchanged in the other side's virtualenv. ``fill``
writes the objects (a site's content: mappings of a few hundred bytes in a
BTree, in *commits* transactions); ``walk``, a fresh process on the storage
alone (as zodbverify and zodbupdate open it), walks the current records
with record_iternext, then every transaction and its records with
iterator(). Each prints one JSON line: the seconds of each phase, the CPU
seconds of this process, and what it read (counts, and a digest of the
oids and states, compared by the caller across the contenders).
"""
import hashlib
import json
import resource
import sys
import time

import ZODB.config
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping


IMPORT = '%import relstorage\n'


def do_fill(spec):
    db = ZODB.config.databaseFromString(
        IMPORT + '<zodb>\n%s\n</zodb>\n' % spec['section'])
    try:
        n, commits = spec['objects'], spec['commits']
        with db.transaction() as conn:
            conn.root()['tree'] = OOBTree()
        per = max(1, -(-n // commits))
        for start in range(0, n, per):
            with db.transaction() as conn:
                tree = conn.root()['tree']
                for i in range(start, min(n, start + per)):
                    tree[i] = PersistentMapping(
                        title='object %d' % i,
                        text='x' * (100 + (i * 37) % 900))
    finally:
        db.close()
    return {}


def _walk_records(storage):
    digest = hashlib.sha1()
    count = 0
    next_oid = None
    while True:
        oid, tid, data, next_oid = storage.record_iternext(next_oid)
        count += 1
        digest.update(oid)
        digest.update(data)
        if next_oid is None:
            return count, digest.hexdigest()


def _walk_transactions(storage):
    transactions = records = 0
    it = storage.iterator()
    try:
        for txn in it:
            transactions += 1
            for record in txn:
                records += 1
    finally:
        getattr(it, 'close', lambda: None)()
    return transactions, records


def do_walk(spec):
    storage = ZODB.config.storageFromString(IMPORT + spec['section'])
    try:
        phases = []
        started = time.perf_counter()
        count, digest = _walk_records(storage)
        phases.append(['record_iternext', time.perf_counter() - started])
        started = time.perf_counter()
        transactions, records = _walk_transactions(storage)
        phases.append(['iterator', time.perf_counter() - started])
    finally:
        storage.close()
    return {'phases': phases, 'count': count, 'digest': digest,
            'transactions': transactions, 'records': records}


if __name__ == '__main__':
    SPEC = json.loads(sys.argv[2])
    cpu = time.process_time()
    result = {'fill': do_fill, 'walk': do_walk}[sys.argv[1]](SPEC)
    result.update(cpu=time.process_time() - cpu, peak_mb=resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    print(json.dumps(result))
