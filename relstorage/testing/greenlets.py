"""Workloads of many greenlets on one PostgreSQL or MySQL storage, each
run in a child process (``command``) that, when cooperative, lets gevent
patch the standard library before anything else is imported. A child
prints one line of JSON.

The database is named by ``(database, address)``: ``postgresql`` and a
dsn, or ``mysql`` and the JSON of the adapter's connection keywords.

- ``batch``: how long one transaction loading objects takes alone, how
  long a batch of such transactions in as many greenlets takes (every
  object a transaction loads is one no other has loaded), and how many
  of the batch's transactions were open at once at most (all of them
  when the greenlets wait for the server together, one when each blocks
  the process).
- ``kill``: greenlets killed at moments spread over a commit, each
  followed by another greenlet's commit, which must find no lock held.
- ``bank``: greenlets each committing TRANSFERS transfers between the
  accounts of the bank workload (tests/chaos.py: ``open_bank``), retried
  on conflicts; the keys of the transfers committed.
"""
import json
import sys
import time

#: Objects each transaction of ``batch`` loads.
LOADS = 4
#: Seconds from its start over which ``kill`` kills a commit (one
#: through the slow proxy of test_gevent takes about this long).
SPREAD = 0.3
#: Transfers each greenlet of ``bank`` commits.
TRANSFERS = 3


def command(mode, task, where, keep_history, greenlets=50,
            driver='psycopg2'):
    """The argv of a child running *task* (``batch`` or ``kill``) on the
    database *where* (``(database, address)``) through *driver*, patched
    by gevent when *mode* is ``cooperative`` (else ``blocking``:
    greenlets unpatched)."""
    patch = ('from gevent import monkey; monkey.patch_all(); '
             if mode == 'cooperative' else '')
    return [sys.executable, '-c',
            patch + 'from relstorage.testing.greenlets import main; main()',
            mode, task, where[0], where[1], 'hp' if keep_history else 'hf',
            str(greenlets), driver]


def populate(db, greenlets):
    """The objects ``batch`` loads: LOADS for each greenlet of the batch
    and for the lone transaction."""
    from persistent.mapping import PersistentMapping
    with db.transaction() as conn:
        root = conn.root()
        for index in range((greenlets + 1) * LOADS):
            root[index] = PersistentMapping(v=index)


def _open_db(where, keep_history, driver, **options):
    import ZODB
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    options = Options(keep_history=keep_history, **options)
    database, address = where
    if database == 'mysql':
        from relstorage.adapters.mysql import MySQLAdapter
        adapter = MySQLAdapter(driver=driver, options=options,
                               **json.loads(address))
    else:
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        adapter = PostgreSQLAdapter(dsn=address, driver=driver,
                                    options=options)
    return ZODB.DB(RelStorage(adapter, options=options), pool_size=100)


def _run(db, count, work):
    import gevent
    jobs = [gevent.spawn(work, db, index) for index in range(count)]
    gevent.joinall(jobs, raise_error=True)


def _load(db, block):
    with db.transaction() as conn:
        root = conn.root()
        for index in range(block * LOADS, (block + 1) * LOADS):
            assert root[index]['v'] == index


def _touch(db, index):
    with db.transaction() as conn:
        conn.root()


def batch(db, greenlets):
    """``{'one': seconds, 'batch': seconds, 'together': n}``."""
    # Every pooled connection opened (and its session) before timing.
    _run(db, greenlets, _touch)
    start = time.perf_counter()
    _load(db, greenlets)
    one = time.perf_counter() - start
    open_now = [0, 0]

    def load(db, block):
        open_now[0] += 1
        open_now[1] = max(open_now)
        try:
            _load(db, block)
        finally:
            open_now[0] -= 1

    start = time.perf_counter()
    _run(db, greenlets, load)
    return {'one': one, 'batch': time.perf_counter() - start,
            'together': open_now[1]}


def kill(db, greenlets):
    """``{'killed': n, 'committed': n}``: *greenlets* commits killed at
    moments spread evenly over SPREAD seconds from their start, each
    followed by a commit that succeeded."""
    import gevent
    from persistent.mapping import PersistentMapping
    with db.transaction() as conn:
        conn.root()['counter'] = PersistentMapping(v=0)
    killed = committed = 0

    def bump(db, index):
        with db.transaction() as conn:
            conn.root()['counter']['v'] += 1
            conn.root()['counter']['by'] = index

    for index in range(greenlets):
        victim = gevent.spawn(bump, db, index)
        gevent.sleep(SPREAD * index / greenlets)
        if not victim.dead:
            victim.kill()
            killed += 1
        bump(db, -1)
        committed += 1
    return {'killed': killed, 'committed': committed}


def bank(db, greenlets):
    """``{'committed': [key, ...]}``: the transfers the greenlets
    committed (each key once; a transfer whose commit failed is
    retried under a new key)."""
    import os
    import random
    committed = []

    def transfers(db, index):
        import transaction
        from transaction.interfaces import TransientError
        rng = random.Random('%s-%s' % (os.getpid(), index))
        manager = transaction.TransactionManager()
        conn = db.open(transaction_manager=manager)
        tries = done = 0
        try:
            while done < TRANSFERS:
                tries += 1
                key = (os.getpid(), index, tries)
                try:
                    _transfer(conn, manager, rng, key)
                except TransientError:
                    manager.abort()
                    continue
                committed.append(key)
                done += 1
        finally:
            conn.close()

    _run(db, greenlets, transfers)
    return {'committed': ['%s-%s-%s' % key for key in committed]}


def _transfer(conn, manager, rng, key):
    manager.begin()
    root = conn.root()
    accounts = root['accounts']
    a, b = rng.sample(sorted(accounts.keys()), 2)
    amount = rng.randint(1, 25)
    accounts[a] -= amount
    accounts[b] += amount
    root['transfers']['%s-%s-%s' % key] = (a, b, amount)
    manager.commit()


def main(argv=None):
    mode, task, database, address, history, greenlets, driver = (
        argv or sys.argv[1:])[:7]
    if mode == 'cooperative':
        driver = 'gevent ' + driver
    db = _open_db((database, address), history == 'hp', driver,
                  commit_lock_timeout=10)
    result = {'batch': batch, 'kill': kill, 'bank': bank}[task](db, int(greenlets))
    # Printed first: a connection whose greenlet was killed within
    # ZODB's tpc_finish can leave ZODB's pool unable to close it.
    print(json.dumps(result), flush=True)
    db.close()
