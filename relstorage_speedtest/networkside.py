"""What each side of ``relstorage_speedtest.network`` runs with its own
Python, copied to a directory of its own and started as

    python networkside.py fill|pages|traverse|prefetch|iternext SPEC

It imports ZODB (and ZEO, or whichever ``relstorage`` its Python has),
never this package, so that it runs unchanged in the other side's
virtualenv. ``fill`` writes a site's content straight to the database:
``folders`` folders (BTrees, as a large Plone folder keeps its items) of
``items`` items each, every item a mapping with a title, some text and two
persistent sub-objects (its annotations and its body). The other actions,
each in a fresh process, open the storage through a delaying proxy (the
spec's ``proxy`` command, started here, forwarding to ``target`` with
``delay`` seconds added to every message the client sends) and measure
one kind of work, with the round trips the proxy carried meanwhile:

- ``pages``: one page view per folder (a transaction that reads the
  folder and its items' titles), every folder once through cold caches,
  then every folder again (all cached);
- ``traverse``: every item and both its sub-objects, caches cold;
- ``prefetch``: ``Connection.prefetch`` of 500 items (ghosts), then
  reading them all;
- ``iternext``: every current record with ``record_iternext``.

Each prints one JSON line: per phase, its seconds, round trips and the
units of work it did (page views, objects, records), and what it read (a
digest, compared by the caller across the contenders).
"""
import hashlib
import json
import resource
import subprocess
import sys
import time

import transaction
import ZODB.config
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping


#: Items prefetched at once.
PREFETCH = 500


def _database(spec, section):
    """The DB of *section*, with ZODB's connection cache as Zope's
    default (5,000 objects)."""
    return ZODB.config.databaseFromString(
        '%s\n<zodb>\n cache-size 5000\n%s\n</zodb>\n'
        % (spec['imports'], section))


def do_fill(spec):
    db = _database(spec, spec['section'])
    try:
        for f in range(spec['folders']):
            with db.transaction() as conn:
                folder = conn.root()['folder%d' % f] = OOBTree()
                for i in range(spec['items']):
                    folder['item%d' % i] = PersistentMapping(
                        title='item %d of folder %d' % (i, f),
                        text='x' * (200 + (i * 37) % 800),
                        annotations=PersistentMapping(
                            workflow='published', votes=i),
                        body=PersistentMapping(html='<p>%s</p>' % (
                            'y' * (300 + (i * 53) % 1200))))
    finally:
        db.close()
    return {}


class Proxy:
    """The delaying, counting proxy, in a process of its own."""

    def __init__(self, spec):
        host, port = spec['target']
        self.process = subprocess.Popen(
            spec['proxy'] + [host, str(port), str(spec['delay'])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    def trips(self):
        self.process.stdin.write('?\n')
        self.process.stdin.flush()
        return int(self.process.stdout.readline().split()[0])

    def close(self):
        self.process.terminate()
        self.process.wait()


class Phases:
    """The measured phases: seconds, round trips, units of work."""

    def __init__(self, proxy):
        self.proxy = proxy
        self.found = []

    def measure(self, name, work):
        trips = self.proxy.trips()
        started = time.perf_counter()
        units = work()
        seconds = time.perf_counter() - started
        self.found.append([name, {'seconds': seconds,
                                  'trips': self.proxy.trips() - trips,
                                  'units': units}])


def _open(spec, proxy):
    db = _database(spec, spec['proxied'].replace('PROXYPORT',
                                                 str(proxy.port)))
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    # Connected, the root read: out of what is measured.
    tm.begin()
    len(conn.root())
    tm.abort()
    return db, tm, conn


def _folders(spec):
    return ['folder%d' % f for f in range(spec['folders'])]


def do_measure(spec, action):
    proxy = Proxy(spec)
    digest = hashlib.sha1()
    try:
        db, tm, conn = _open(spec, proxy)
        phases = Phases(proxy)
        try:
            globals()['_' + action](spec, tm, conn, phases, digest)
        finally:
            conn.close()
            db.close()
    finally:
        proxy.close()
    return {'phases': phases.found, 'digest': digest.hexdigest()}


def _pages(spec, tm, conn, phases, digest):
    def views():
        for name in _folders(spec):
            tm.begin()
            folder = conn.root()[name]
            titles = [item['title'] for item in folder.values()]
            digest.update(repr(titles).encode())
            tm.abort()
        return spec['folders']
    phases.measure('page cold', views)
    phases.measure('page cached', views)


def _traverse(spec, tm, conn, phases, digest):
    def walk():
        count = 0
        tm.begin()
        for name in _folders(spec):
            for item in conn.root()[name].values():
                digest.update(item['title'].encode())
                digest.update(item['annotations']['workflow'].encode())
                digest.update(item['body']['html'].encode())
                count += 3
        tm.abort()
        return count
    phases.measure('traversal', walk)


def _prefetch(spec, tm, conn, phases, digest):
    tm.begin()
    items = []
    for name in _folders(spec):
        items.extend(conn.root()[name].values())  # ghosts
        if len(items) >= PREFETCH:
            break
    items = items[:PREFETCH]

    def fetch():
        conn.prefetch(items)
        for item in items:
            digest.update(item['title'].encode())
        return len(items)
    phases.measure('prefetch 500', fetch)
    tm.abort()


def _iternext(spec, tm, conn, phases, digest):
    storage = conn.db().storage

    def walk():
        count = 0
        next_oid = None
        while True:
            oid, tid, data, next_oid = storage.record_iternext(next_oid)
            count += 1
            digest.update(oid)
            digest.update(data)
            if next_oid is None:
                return count
    phases.measure('record_iternext', walk)


if __name__ == '__main__':
    SPEC = json.loads(sys.argv[2])
    ACTION = sys.argv[1]
    cpu = time.process_time()
    result = (do_fill(SPEC) if ACTION == 'fill'
              else do_measure(SPEC, ACTION))
    result.update(cpu=time.process_time() - cpu, peak_mb=resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    print(json.dumps(result))
