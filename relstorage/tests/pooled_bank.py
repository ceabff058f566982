"""The bank-transfer workload (see chaos) through a transaction pooler:
processes with several ZODB connections each, in threads, move amounts
between accounts through a private pgbouncer, while the controller reads
``pg_stat_activity`` on the PostgreSQL server behind it to see how many
server backends the database gets.

    python -m relstorage.tests.pooled_bank --worker DSN HP LOG SEED \\
        SECONDS THREADS

is one worker process (the test starts them). Each thread logs ``C key``
once its transfer committed (``F key`` when the storage said it did not,
``U key`` when the outcome is unknown), so the controller can check that
every acknowledged transfer is there once and nothing else is.
"""
import os
import random
import subprocess
import sys
import threading
import time

from relstorage.children import child_env

from .chaos import ACCOUNTS
from .chaos import START
from .chaos import read_bank
from .chaos import replay


def _storage(dsn, keep_history):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    return RelStorage(PostgreSQLAdapter(
        dsn, pooler='transaction',
        options=Options(keep_history=keep_history, commit_lock_timeout=60)))


def _transfers(db, note, seed, deadline):
    """One thread: its own ZODB connection, transfers until *deadline*."""
    import transaction
    from transaction.interfaces import TransientError
    from relstorage.exceptions import CommitOutcomeUnknown

    rng = random.Random(seed)
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    seq = 0
    try:
        while time.time() < deadline:
            seq += 1
            key = '%s-%d' % (seed, seq)
            tm.begin()
            accounts = conn.root()['accounts']
            a = rng.randrange(ACCOUNTS)
            b = (a + rng.randrange(1, ACCOUNTS)) % ACCOUNTS
            amount = rng.randint(1, 25)
            accounts[a] -= amount
            accounts[b] += amount
            conn.root()['transfers'][key] = (a, b, amount)
            try:
                tm.commit()
            except TransientError:
                tm.abort()
                note('R')
                continue
            except CommitOutcomeUnknown:
                note('U ' + key)
                raise
            except BaseException:
                note('F ' + key)
                raise
            note('C ' + key)
    finally:
        tm.abort()
        conn.close()


def worker(dsn, keep_history, log_path, seed, seconds, threads):
    """Transfers for *seconds* from when the storage is open (a loaded
    machine may take seconds to start eight processes)."""
    import ZODB
    lock = threading.Lock()
    log = open(log_path, 'a', buffering=1)

    def note(line):
        with lock:
            log.write(line + '\n')
            log.flush()

    db = ZODB.DB(_storage(dsn, keep_history), pool_size=threads)
    deadline = time.time() + seconds
    errors = []

    def run(index):
        try:
            _transfers(db, note, '%d.%d' % (seed, index), deadline)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)
            note('X %s: %s' % (type(e).__name__, e))
    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    db.close()
    return 1 if errors else 0


class Sampler(threading.Thread):
    """Counts, every few milliseconds until stopped, the client backends
    of *database* on the PostgreSQL *server* (pg_stat_activity) and the
    client connections pgbouncer *pooler* holds for it."""

    def __init__(self, server, pooler, database):
        super().__init__(daemon=True)
        self.server = server
        self.pooler = pooler
        self.database = database
        self.stopping = threading.Event()
        self.backends = []
        self.clients = []

    def run(self):
        conn = self.server._admin_connect()
        try:
            cur = conn.cursor()
            while not self.stopping.wait(0.02):
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                            "datname = %s AND backend_type = "
                            "'client backend'", (self.database,))
                self.backends.append(cur.fetchone()[0])
                if len(self.backends) % 25 == 0:
                    self.clients.append(sum(
                        row['cl_active'] + row['cl_waiting']
                        for row in self.pooler.show('POOLS')
                        if row['database'] == self.database))
        finally:
            conn.close()

    def stop(self):
        self.stopping.set()
        self.join(30)


def run_bank(pooler, database, keep_history, workdir, processes=8,
             threads=3, seconds=10.0):
    """The workload through *pooler* (a PgBouncer) on *database*; a dict
    of what happened (see check_bank)."""
    import ZODB
    from .chaos import open_bank
    dsn = pooler.dsn(database)
    storage = _storage(dsn, keep_history)
    storage.zap_all()
    open_bank(storage, ACCOUNTS, START)
    sampler = Sampler(pooler.backend, pooler, database)
    sampler.start()
    procs = []
    try:
        for index in range(processes):
            log_path = os.path.join(workdir, 'worker%d.log' % index)
            procs.append((log_path, subprocess.Popen(
                [sys.executable, '-m', 'relstorage.tests.pooled_bank',
                 '--worker', dsn, str(keep_history), log_path,
                 str(1000 + index), str(seconds), str(threads)],
                env=child_env(), stdout=subprocess.DEVNULL,
                stderr=open(log_path + '.err', 'w'))))
        statuses = [proc.wait(timeout=seconds + 600) for _, proc in procs]
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        sampler.stop()
    lines = []
    for log_path, _ in procs:
        with open(log_path) as f:
            lines += f.read().splitlines()
    db = ZODB.DB(_storage(dsn, keep_history))
    try:
        accounts, transfers = read_bank(db)
    finally:
        db.close()
    return {'statuses': statuses, 'lines': lines, 'accounts': accounts,
            'transfers': transfers, 'backends': sampler.backends,
            'clients': sampler.clients, 'processes': processes,
            'errors': [line for line in lines if line.startswith('X ')]}


def check_bank(result):
    """The problems found in a run_bank() result (empty: all holds)."""
    problems = []
    keyed = {}
    for line in result['lines']:
        kind, _, key = line.partition(' ')
        keyed.setdefault(kind, []).append(key)
    committed = keyed.get('C', [])
    transfers = result['transfers']
    # Every process committed (keys are seed.thread-seq).
    committers = {key.split('.', 1)[0] for key in committed}
    if len(committers) < result['processes']:
        problems.append('%d of %d processes committed nothing' % (
            result['processes'] - len(committers), result['processes']))
    if len(committed) != len(set(committed)):
        problems.append('a transfer was acknowledged twice')
    missing = set(committed) - set(transfers)
    if missing:
        problems.append('%d acknowledged transfers missing: %s'
                        % (len(missing), sorted(missing)[:5]))
    unacknowledged = set(transfers) - set(committed) - set(keyed.get('U', ()))
    if unacknowledged:
        problems.append('%d transfers present that nobody was told '
                        'committed: %s' % (len(unacknowledged),
                                           sorted(unacknowledged)[:5]))
    accounts = result['accounts']
    if sum(accounts.values()) != ACCOUNTS * START:
        problems.append('total %d, not %d' % (sum(accounts.values()),
                                              ACCOUNTS * START))
    if accounts != replay(transfers, ACCOUNTS, START):
        problems.append('the balances are not the transfers applied once')
    if result['errors']:
        problems.append('workers failed: %s' % result['errors'][:3])
    if any(result['statuses']):
        problems.append('worker exit statuses %s' % result['statuses'])
    return problems


if __name__ == '__main__':
    if sys.argv[1:2] != ['--worker']:
        sys.exit('usage: python -m relstorage.tests.pooled_bank --worker '
                 'DSN HP LOG SEED SECONDS THREADS')
    _dsn, _hp, _log, _seed, _seconds, _threads = sys.argv[2:8]
    sys.exit(worker(_dsn, _hp == 'True', _log, int(_seed), float(_seconds),
                    int(_threads)))
