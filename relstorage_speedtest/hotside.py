"""What each side of ``relstorage_speedtest.hot`` runs with its own Python,
copied to a directory of its own and started as

    python hotside.py hot SPEC

It imports ZODB and whichever ``relstorage`` its Python has, never this
package. It commits ``objects`` small objects (as zodbshootout's), then
times, ``repeats`` times over, two hot reads of all of them: ``load``, the
storage's own part (a ZODB connection's storage instance serving each
object from its cache), and ``read``, a whole hot read (the connection's
cache emptied, each object activated: the storage's load and ZODB's
unpickling). Prints one JSON line: the median and range, in microseconds
per object, of each.
"""
import json
import statistics
import sys
import time

import transaction
import ZODB.config
from persistent import Persistent
from persistent.mapping import PersistentMapping


class Item(Persistent):
    """A small object, as zodbshootout's."""

    def __init__(self, data):
        self.data = data


def us_per_object(passes, count, action):
    """The median and range over *passes* of *action*'s microseconds per
    object (each pass reads *count* objects)."""
    spent = []
    for _ in range(passes):
        started = time.perf_counter()
        action()
        spent.append((time.perf_counter() - started) / count * 1e6)
    return statistics.median(spent), min(spent), max(spent)


def hot(spec):
    db = ZODB.config.databaseFromString(
        '%%import relstorage\n<zodb>\n cache-size %d\n%s\n</zodb>\n'
        % (spec['objects'] * 2, spec['section']))
    try:
        conn = db.open()
        items = [Item(b'x' * 128) for _ in range(spec['objects'])]
        conn.root()['items'] = PersistentMapping(enumerate(items))
        transaction.commit()
        oids = [item._p_oid for item in items]
        conn.close()
        conn = db.open()
        items = list(conn.root()['items'].values())
        for item in items:
            item._p_activate()
        load = conn._storage.load
        times = spec['times']

        def loads():
            for _ in range(times):
                for oid in oids:
                    load(oid)

        def reads():
            for _ in range(times):
                for item in items:
                    item._p_deactivate()
                for item in items:
                    item._p_activate()

        count = times * len(oids)
        figures = {'load': us_per_object(spec['repeats'], count, loads),
                   'read': us_per_object(spec['repeats'], count, reads)}
        conn.close()
        return figures
    finally:
        db.close()


if __name__ == '__main__':
    print(json.dumps({'hot': hot}[sys.argv[1]](json.loads(sys.argv[2]))))
