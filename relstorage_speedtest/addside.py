"""What each side of ``relstorage_speedtest.adds`` runs with its own Python,
copied to a directory of its own and started as

    python addside.py prepare|add SPEC

It imports ZODB and whichever ``relstorage`` its Python has, never this
package. ``prepare`` opens the empty database (its schema made) and puts a
mapping for each adding process in the root. ``add`` is one of those
processes: it opens the database, commits ``warmup`` adds untimed, says
it is ready (a file), waits for the word to go (another file), then
commits ``commits`` adds, each ``objects`` new small objects put into its
mapping in one transaction under the same keys (replacing the last add's),
as zodbshootout's add does. Each prints one
JSON line; ``add`` the seconds of each timed add and the CPU seconds it
spent on them.
"""
import json
import os
import sys
import time

import transaction
import ZODB.config
from persistent import Persistent
from persistent.mapping import PersistentMapping

#: Seconds a process waits for the word to go.
GO_TIMEOUT = 300


class Item(Persistent):
    """A small object, as zodbshootout's."""

    def __init__(self, data):
        self.data = data


def open_db(spec):
    return ZODB.config.databaseFromString(
        '%%import relstorage\n<zodb>\n%s\n</zodb>\n' % spec['section'])


def key(number):
    return 'adds-%d' % number


def prepare(spec):
    db = open_db(spec)
    try:
        with db.transaction() as conn:
            for number in range(spec['processes']):
                conn.root()[key(number)] = PersistentMapping()
    finally:
        db.close()
    return {'prepared': spec['processes']}


def add(spec):
    number = spec['number']
    db = open_db(spec)
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(tm)
    data = b'x' * spec['state_bytes']
    keys = range(spec['objects'])

    def one():
        # The same keys every time, as zodbshootout's: the mapping stays
        # as large, its objects replaced by new ones.
        tm.begin()
        conn.root()[key(number)].update((i, Item(data)) for i in keys)
        tm.commit()
    try:
        tm.begin()
        if key(number) not in conn.root():
            # A MappingStorage, each process's own, prepared by no one.
            conn.root()[key(number)] = PersistentMapping()
        tm.commit()
        for _ in range(spec['warmup']):
            one()
        with open(spec['ready'] % number, 'w'):
            pass
        deadline = time.monotonic() + GO_TIMEOUT
        while not os.path.exists(spec['go']):
            if time.monotonic() > deadline:
                raise SystemExit('no word to go within %d s' % GO_TIMEOUT)
            time.sleep(0.002)
        seconds = []
        cpu = time.process_time()
        for _ in range(spec['commits']):
            started = time.perf_counter()
            one()
            seconds.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu
        count = len(conn.root()[key(number)])
    finally:
        conn.close()
        db.close()
    return {'seconds': seconds, 'cpu': cpu, 'count': count}


if __name__ == '__main__':
    print(json.dumps({'prepare': prepare, 'add': add}[sys.argv[1]](
        json.loads(sys.argv[2]))))
