"""What each contender of ``relstorage_speedtest.gevent_mode`` runs with its
own Python: a process serving requests from many workers at once, copied to
a directory of its own and started as

    python geventside.py gevent|threads|serial SPEC

``gevent`` patches the standard library with gevent's monkey-patching before
anything else is imported and runs the workers as greenlets; ``threads``
runs them as threads, unpatched (the database drivers block their thread);
``serial`` runs the requests one after another. It imports ZODB and
whichever ``relstorage`` its Python has, never this package, so that it runs
unchanged in the other side's virtualenv.

The database (emptied by the caller) is filled with SPEC's ``objects``
counters in a BTree, then each worker serves ``requests`` requests, each a
transaction of its own: it loads ``reads`` counters chosen at random and,
with probability ``write_ratio``, adds one to one of them and commits (a
conflict is retried as a new transaction). It prints one JSON line: the
seconds the requests took, how many were served and written, the retries,
and the sum of the counters read back afterwards by a new connection, which
must equal the writes committed.
"""
import sys

if __name__ == '__main__' and sys.argv[1] == 'gevent':
    from gevent import monkey
    monkey.patch_all()

import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402

import transaction  # noqa: E402
import ZODB.config  # noqa: E402
from BTrees.OOBTree import OOBTree  # noqa: E402
from persistent.mapping import PersistentMapping  # noqa: E402
from ZODB.POSException import ConflictError  # noqa: E402

#: Objects per transaction while filling the database.
BATCH = 1000


def open_db(spec):
    return ZODB.config.databaseFromString(
        '%%import relstorage\n<zodb>\n pool-size %d\n%s\n</zodb>\n'
        % (spec['workers'], spec['section']))


def fill(db, objects):
    with db.transaction() as conn:
        conn.root()['items'] = OOBTree()
    for start in range(0, objects, BATCH):
        with db.transaction() as conn:
            items = conn.root()['items']
            for i in range(start, min(start + BATCH, objects)):
                items[i] = PersistentMapping(n=0)


class Worker:
    """One worker's requests and what it counted."""

    def __init__(self, db, spec, index):
        self.db = db
        self.spec = spec
        self.rng = random.Random('%s-%d' % (spec.get('seed', 0), index))
        self.served = self.written = self.retries = 0

    def request(self):
        spec = self.spec
        keys = [self.rng.randrange(spec['objects'])
                for _ in range(spec['reads'])]
        write = self.rng.random() < spec['write_ratio']
        while True:
            manager = transaction.TransactionManager()
            conn = self.db.open(transaction_manager=manager)
            try:
                manager.begin()
                items = conn.root()['items']
                values = [items[key]['n'] for key in keys]
                if write:
                    items[keys[0]]['n'] = values[0] + 1
                manager.commit()
            except ConflictError:
                manager.abort()
                self.retries += 1
                continue
            finally:
                conn.close()
            break
        self.served += 1
        self.written += write

    def run(self):
        for _ in range(self.spec['requests']):
            self.request()

    def touch(self):
        """Open a pooled connection (and its database session) before
        the clock starts."""
        with self.db.transaction() as conn:
            conn.root()['items']


def run_workers(how, workers, method):
    if how == 'gevent':
        import gevent
        gevent.joinall([gevent.spawn(getattr(w, method)) for w in workers],
                       raise_error=True)
    elif how == 'threads':
        import threading
        failed = []

        def call(worker):
            try:
                getattr(worker, method)()
            except BaseException as e:  # noqa: BLE001 -- raised below
                failed.append(e)
        threads = [threading.Thread(target=call, args=(w,)) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failed:
            raise failed[0]
    else:
        for worker in workers:
            getattr(worker, method)()


def counted(db):
    conn = db.open()
    try:
        return sum(obj['n'] for obj in conn.root()['items'].values())
    finally:
        conn.close()


def driver_name(db):
    """The adapter's driver, as this storage (its ``adapter``, a driver
    class and whether it cooperates) or RelStorage 4 (its ``_adapter``,
    a driver named like the option) tells it."""
    storage = db.storage
    adapter = getattr(storage, 'adapter', None) or getattr(
        storage, '_adapter', None)
    driver = getattr(adapter, 'driver', None)
    name = getattr(driver, '__name__', None) or (
        type(driver).__name__ if driver is not None else 'sqlite3')
    if getattr(adapter, 'cooperative', False):
        name += ' (cooperative)'
    return name


def main(how, spec):
    db = open_db(spec)
    try:
        driver = driver_name(db)
        fill(db, spec['objects'])
        workers = [Worker(db, spec, i) for i in range(spec['workers'])]
        run_workers(how, workers, 'touch')
        started = time.perf_counter()
        run_workers(how, workers, 'run')
        seconds = time.perf_counter() - started
        total = counted(db)
    finally:
        db.close()
    served = sum(w.served for w in workers)
    return {'seconds': seconds, 'served': served,
            'written': sum(w.written for w in workers),
            'retries': sum(w.retries for w in workers),
            'counted': total, 'per_second': served / seconds,
            'driver': driver}


if __name__ == '__main__':
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))))
