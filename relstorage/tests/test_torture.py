"""Torture: several processes move amounts between accounts held in one
BTree, with many conflicts (hot accounts, buckets that split) and retries,
while others check, in read-only transactions, that the total never
changes. At the end the total is what it was, and every transfer a worker
saw committed is recorded exactly once, and none other.

Bounded in time: each configuration runs for TORTURE_SECONDS (default 4)
per worker, on every database and history mode."""
import json
import os
import subprocess
import sys

import ZODB

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env

from .chaos import open_bank
from .chaos import read_bank
from .chaos import replay

ACCOUNTS = 12
START = 1000
WORKERS = 3

WORKER = r'''
import json, random, sys, time
import transaction, ZODB
from ZODB.POSException import ConflictError
from relstorage.testing.dbs import DatabaseFactory
db_name, keep_history, data_dir, worker, seconds, accounts_n, total = \
    sys.argv[1:8]
storage = DatabaseFactory.in_child(db_name, keep_history, data_dir).storage(
    commit_lock_timeout=60)
db = ZODB.DB(storage)
rng = random.Random(int(worker))
tm = transaction.TransactionManager()
conn = db.open(transaction_manager=tm)
committed, conflicts, gave_up, checks, bad_sums = [], 0, 0, 0, []
deadline = time.monotonic() + float(seconds)
seq = 0
while time.monotonic() < deadline:
    if rng.random() < 0.25:
        # A reader: within one transaction the total never changes.
        tm.begin()
        balances = conn.root()['accounts']
        seen = sum(balances[k] for k in range(int(accounts_n)))
        if seen != int(total):
            bad_sums.append(seen)
        checks += 1
        tm.abort()
        continue
    seq += 1
    key = '%s-%d' % (worker, seq)
    for attempt in range(30):
        try:
            tm.begin()
            root = conn.root()
            balances = root['accounts']
            # Accounts 0 and 1 are hot: most transfers touch one of them.
            a = rng.choice([0, 1, rng.randrange(int(accounts_n))])
            b = rng.choice([k for k in range(int(accounts_n)) if k != a])
            amount = rng.randint(1, 25)
            balances[a] -= amount
            balances[b] += amount
            root['transfers'][key] = (a, b, amount)
            tm.get().note('transfer %s' % key)
            tm.commit()
        except ConflictError:
            tm.abort()
            conflicts += 1
            time.sleep(rng.random() * 0.01)
        else:
            committed.append(key)
            break
    else:
        gave_up += 1
conn.close()
db.close()
print(json.dumps({'committed': committed, 'conflicts': conflicts,
                  'gave_up': gave_up, 'checks': checks,
                  'bad_sums': bad_sums[:10]}))
'''


def test_transfers_between_accounts_keep_the_total(factory):
    seconds = float(os.environ.get('TORTURE_SECONDS', '4'))
    total = ACCOUNTS * START
    open_bank(factory.storage(), ACCOUNTS, START)

    env = child_env()
    procs = [subprocess.Popen(
        [sys.executable, '-c', WORKER, factory.db, str(factory.keep_history),
         factory.data_dir(), str(worker), str(seconds), str(ACCOUNTS),
         str(total)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for worker in range(WORKERS)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=seconds + 120)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))

    committed = [key for r in reports for key in r['committed']]
    print('%s: %d transfers committed, %d conflicts retried, %d gave up, '
          '%d consistent reads' % (
              factory.db, len(committed),
              sum(r['conflicts'] for r in reports),
              sum(r['gave_up'] for r in reports),
              sum(r['checks'] for r in reports)))
    assert len(committed) == len(set(committed))
    assert len(committed) > 10 * WORKERS, reports  # it did run
    assert sum(r['conflicts'] for r in reports) > 0, 'no conflict exercised'
    assert sum(r['checks'] for r in reports) > 0
    assert [r['bad_sums'] for r in reports] == [[]] * WORKERS

    storage = factory.storage()
    db = ZODB.DB(storage)
    try:
        accounts, transfers = read_bank(db)
        # Every transfer a worker saw committed is there exactly once, and
        # no other (none that a worker saw fail).
        assert sorted(transfers) == sorted(committed)
        assert sum(accounts.values()) == total
        assert accounts == replay(transfers, ACCOUNTS, START)
        if factory.keep_history:
            # One transaction per committed transfer, none half-applied.
            notes = [t['description'] for t in storage.undoLog(0, 1000000)
                     if t['description'].startswith(b'transfer ')]
            assert sorted(n.split()[1].decode() for n in notes) == \
                sorted(committed)
    finally:
        db.close()
