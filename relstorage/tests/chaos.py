"""Chaos under load: writer processes move amounts between accounts (the
bank-transfer workload of test_torture) and reader processes check that
the total never changes, while a controller, at random intervals,
SIGKILLs a writer (and starts another), kills the database backends of
the test account, restarts the database server (a private one this run
started: private_servers) and packs.

    python -m relstorage.tests.chaos --db postgresql --seconds 120

At the end: the total is conserved, every transfer a writer saw committed
is there exactly once (writers log each commit to a file before going
on, so a killed writer's commits are accounted for), any other is one
whose outcome the writer was told is unknown, the balances are the
replay of the transfers, no commit lock is left, and no reader saw a
wrong total. A summary gives transactions, faults injected by kind,
retries and the longest stall. Exit status 0 when all holds.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types

from relstorage.children import child_env

ACCOUNTS = 16
START = 1000
#: Seconds between faults, drawn uniformly.
PAUSE = (0.5, 2.0)
#: Seconds the workers may take to start and open their database.
STARTUP = 120
#: Seconds the workers of a run that ends have to stop before they are
#: killed.
STOP_WAIT = 120
#: The port argument of workers whose host argument is a whole DSN (a
#: server with a dsn() method: several hosts, say).
DSN = 'dsn'


def _factory(db, keep_history, data_dir, host=None, port=None):
    from relstorage.testing.dbs import DatabaseFactory
    server = None
    if port == DSN:
        # host: the DSN, with {} for the database's name.
        server = types.SimpleNamespace(dsn=host.format)
    elif host:
        server = types.SimpleNamespace(host=host, port=int(port),
                                       user='relstoragetest',
                                       password='relstoragetest')
    factory = DatabaseFactory(db, keep_history, child=True, server=server)
    factory._dirs['main'] = data_dir
    return factory


def open_bank(storage, accounts, start):
    """Fill *storage* with *accounts* accounts holding *start* each and no
    transfers (shared with test_torture), and close it."""
    import ZODB
    from BTrees.OOBTree import OOBTree
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            balances = conn.root()['accounts'] = OOBTree()
            for k in range(accounts):
                balances[k] = start
            conn.root()['transfers'] = OOBTree()
    finally:
        db.close()


def read_bank(db):
    """``(accounts, transfers)`` of the bank-transfer workload in *db*,
    as dicts (shared with test_torture)."""
    import transaction
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    try:
        root = conn.root()
        return (dict(root['accounts'].items()),
                dict(root['transfers'].items()))
    finally:
        tm.abort()
        conn.close()


def replay(transfers, accounts, start):
    """The balances *transfers* leave *accounts* accounts holding
    *start* each."""
    balances = dict.fromkeys(range(accounts), start)
    for a, b, amount in transfers.values():
        balances[a] -= amount
        balances[b] += amount
    return balances


# -- the processes -----------------------------------------------------------

def worker(role, kind, keep_history, data_dir, host, port, log_path, seed,
           stop_path):
    """A writer or reader, working until the file *stop_path* exists (or,
    its controller gone, for an hour); logs one line per event to
    *log_path*: ``O`` its database opened the first time, ``C key time``
    committed, ``U key`` outcome unknown, ``R error`` a retry, ``B n`` a
    reader saw total n, ``G old new`` a reader was served accounts of an
    older transaction than before, ``S seconds`` the longest stall."""
    import transaction
    import ZODB
    from transaction.interfaces import TransientError

    from relstorage.exceptions import CommitOutcomeUnknown
    from relstorage.exceptions import DatabaseUnavailable

    rng = random.Random(seed)
    log = open(log_path, 'a', buffering=1)
    # Storage options of the run (replica-conf, say), as JSON.
    extra = json.loads(os.environ.get('RELSTORAGE_CHAOS_OPTIONS') or '{}')

    def note(line):
        log.write(line + '\n')
        log.flush()
        os.fsync(log.fileno())

    total = ACCOUNTS * START
    newest_read = b'\0' * 8
    db = None
    tm = transaction.TransactionManager()
    seq = 0
    last_success = time.monotonic()
    longest = 0.0
    opened_once = False
    give_up = time.monotonic() + 3600
    while not os.path.exists(stop_path) and time.monotonic() < give_up:
        try:
            if db is None:
                opened = ZODB.DB(_factory(kind, keep_history, data_dir, host,
                                          port).storage(commit_lock_timeout=10,
                                                        network_timeout=5,
                                                        **extra))
                try:
                    conn = opened.open(transaction_manager=tm)
                except BaseException:
                    opened.close()
                    raise
                db = opened
                if not opened_once:
                    opened_once = True
                    note('O')
            tm.begin()
            accounts = conn.root()['accounts']
            if role == 'reader':
                seen = sum(accounts[k] for k in range(ACCOUNTS))
                if seen != total:
                    note('B %d' % seen)
                # Every transfer changes the accounts: their revision is
                # the newest transaction this reader was served.
                serial = accounts._p_serial
                if serial < newest_read:
                    note('G %s %s' % (newest_read.hex(), serial.hex()))
                newest_read = max(newest_read, serial)
                tm.abort()
            else:
                seq += 1
                key = '%s-%d' % (seed, seq)
                a = rng.choice([0, 1, rng.randrange(ACCOUNTS)])
                b = rng.choice([k for k in range(ACCOUNTS) if k != a])
                amount = rng.randint(1, 25)
                accounts[a] -= amount
                accounts[b] += amount
                conn.root()['transfers'][key] = (a, b, amount)
                # Logged before and after: a writer killed in between
                # leaves a transfer whose outcome only the database knows.
                note('T ' + key)
                try:
                    tm.commit()
                except CommitOutcomeUnknown:
                    note('U ' + key)
                    raise
                except Exception:
                    # Any other error: the storage says it did not commit.
                    note('F ' + key)
                    raise
                note('C %s %.3f' % (key, time.time()))
            now = time.monotonic()
            longest = max(longest, now - last_success)
            last_success = now
        except (TransientError, DatabaseUnavailable, CommitOutcomeUnknown) \
                as e:
            tm.abort()
            note('R ' + type(e).__name__)
            time.sleep(rng.random() * 0.05)
        except Exception as e:  # noqa: BLE001 -- a lost server, say
            tm.abort()
            note('R')
            note('X %s: %s' % (type(e).__name__, str(e).splitlines()[0]
                               if str(e) else ''))
            traceback.print_exc()  # to the worker's .err file
            # Start afresh: a new DB, new connections.
            try:
                if db is not None:
                    db.close()
            except Exception:  # noqa: BLE001 -- it is going anyway
                pass
            db = None
            time.sleep(0.1)
    note('S %.3f' % longest)
    if db is not None:
        db.close()


# -- the controller ----------------------------------------------------------

class Chaos:

    #: Storage options every process of the run opens with.
    options = {}

    def __init__(self, db, keep_history, seconds, writers, readers, seed,
                 rotate=False, server=None):
        #: Faults in turn rather than drawn (a short run meets each kind).
        self.rotate = rotate
        self.injected = 0
        self.db = db
        self.keep_history = keep_history
        self.seconds = seconds
        self.writers = writers
        self.readers = readers
        self.rng = random.Random(seed)
        self.dir = tempfile.mkdtemp(prefix='relstorage-chaos-')
        self.server = None
        self.host = self.port = ''
        if db != 'sqlite':
            from relstorage.testing.private_servers import private_server
            self.server = server or private_server(db)
            if hasattr(self.server, 'dsn'):
                self.host, self.port = self.server.dsn('{}'), DSN
            else:
                self.host, self.port = (self.server.host,
                                        str(self.server.port))
        self.procs = {}
        self.faults = {'kill writer': 0, 'kill backends': 0,
                       'restart server': 0, 'pack': 0, 'pack failed': 0}

    def factory(self):
        from relstorage.testing.dbs import DatabaseFactory
        factory = DatabaseFactory(self.db, self.keep_history,
                                  server=self.server, options=self.options)
        factory._dirs['main'] = os.path.join(self.dir, 'db')
        return factory

    def setup(self):
        os.makedirs(os.path.join(self.dir, 'db'), exist_ok=True)
        open_bank(self.factory().storage(zap=True), ACCOUNTS, START)

    def start(self, role, index):
        name = '%s%d.%d' % (role, index, len(self.procs))
        log_path = os.path.join(self.dir, name + '.log')
        proc = subprocess.Popen(
            [sys.executable, '-m', 'relstorage.tests.chaos', '--worker',
             role, self.db, str(self.keep_history),
             os.path.join(self.dir, 'db'), self.host, self.port, log_path,
             str(self.rng.randrange(1 << 30)), self.stop_path],
            env=dict(child_env(),
                     RELSTORAGE_CHAOS_OPTIONS=json.dumps(self.options)),
            stdout=subprocess.DEVNULL,
            stderr=open(log_path + '.err', 'w'))
        self.procs[name] = (role, index, proc)

    def run(self):
        self.setup()
        self.stop_path = os.path.join(self.dir, 'stop')
        for i in range(self.writers):
            self.start('writer', i)
        for i in range(self.readers):
            self.start('reader', i)
        try:
            # The run's seconds count from when every worker works:
            # starting one (Python, ZODB, a driver) can take seconds on a
            # busy machine, and a fault met before then tests nothing.
            self.wait_until_working()
            self.deadline = time.time() + self.seconds
            self.inject_faults()
        finally:
            # Whatever stopped the run: no worker outlives it (a run that
            # failed left its workers retrying forever, the stop file
            # removed with its directory).
            open(self.stop_path, 'w').close()
            stuck = self.stop_workers()
        if stuck:
            raise AssertionError('workers %s did not stop within %ss of the '
                                 'stop file (killed)' % (stuck, STOP_WAIT))
        return self.check()

    def stop_workers(self):
        """Wait up to STOP_WAIT seconds for the workers to see the stop
        file; kill those still running. Returns their names."""
        deadline = time.monotonic() + STOP_WAIT
        stuck = []
        for name, (role, index, proc) in sorted(self.procs.items()):
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                stuck.append(name)
        return stuck

    def wait_until_working(self, timeout=STARTUP):
        """Wait until each worker has opened its database (its log's
        ``O``); RuntimeError, with what the others wrote, after
        *timeout* seconds."""
        deadline = time.monotonic() + timeout
        waiting = set(self.procs)
        while waiting and time.monotonic() < deadline:
            waiting = {name for name in waiting
                       if not self._opened(name)}
            time.sleep(0.05)
        if waiting:
            raise RuntimeError('workers %s did not open the database within '
                               '%ss: %s' % (sorted(waiting), timeout,
                                            self._errors(sorted(waiting)[0])))

    def _opened(self, name):
        try:
            with open(os.path.join(self.dir, name + '.log')) as f:
                return f.readline() == 'O\n'
        except FileNotFoundError:
            return False

    def _errors(self, name):
        try:
            with open(os.path.join(self.dir, name + '.log.err')) as f:
                return f.read()[-2000:] or '(nothing on stderr)'
        except FileNotFoundError:
            return '(nothing on stderr)'

    def inject_faults(self):
        faults = ['kill writer', 'pack']
        if self.server is not None:
            faults = ['restart server', 'kill backends'] + faults
        while time.time() < self.deadline - 1:
            time.sleep(self.rng.uniform(*PAUSE) / (3 if self.rotate else 1))
            if time.time() >= self.deadline - 1:
                break
            if self.rotate:
                fault = faults[self.injected % len(faults)]
            else:
                fault = self.rng.choice(faults)
            getattr(self, fault.replace(' ', '_'))()
            self.faults[fault] += 1
            self.injected += 1

    # Faults

    def kill_writer(self):
        alive = [(name, index, proc) for name, (role, index, proc)
                 in self.procs.items()
                 if role == 'writer' and proc.poll() is None]
        if not alive:
            return
        name, index, proc = self.rng.choice(alive)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.start('writer', index)

    def kill_backends(self):
        conn = self.server.connect()
        try:
            cur = conn.cursor()
            if self.db == 'postgresql':
                cur.execute(
                    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                    'WHERE usename = %s AND pid <> pg_backend_pid()',
                    ('relstoragetest',))
            else:
                cur.execute("SELECT id FROM information_schema.processlist "
                            "WHERE user = 'relstoragetest' "
                            "AND id <> CONNECTION_ID()")
                for (pid,) in cur.fetchall():
                    try:
                        cur.execute('KILL %s', (pid,))
                    except Exception:  # noqa: BLE001 -- already gone
                        pass
            conn.commit()
        finally:
            conn.close()

    def restart_server(self):
        self.server.restart()

    def pack(self):
        from ZODB.serialize import referencesf
        try:
            storage = self.factory().storage(commit_lock_timeout=10)
            try:
                storage.pack(time.time(), referencesf)
            finally:
                storage.close()
        except Exception:  # noqa: BLE001 -- a fault met another fault
            self.faults['pack failed'] += 1

    # The verdict

    def check(self):
        import ZODB
        committed, unknown, retries, bad, stalls, errors = [], [], 0, [], [], {}
        backwards = []
        by_error = {}
        tried, failed = set(), set()
        for name in self.procs:
            path = os.path.join(self.dir, name + '.log')
            if not os.path.exists(path):
                continue  # killed before it wrote anything
            with open(path) as f:
                for line in f:
                    kind, _, rest = line.rstrip('\n').partition(' ')
                    if kind == 'C':
                        committed.append(rest.split()[0])
                    elif kind == 'U':
                        unknown.append(rest)
                    elif kind == 'T':
                        tried.add(rest)
                    elif kind == 'F':
                        failed.add(rest)
                    elif kind == 'R':
                        retries += 1
                        if rest:
                            by_error[rest] = by_error.get(rest, 0) + 1
                    elif kind == 'B':
                        bad.append(int(rest))
                    elif kind == 'G':
                        backwards.append(rest)
                    elif kind == 'S':
                        stalls.append(float(rest))
                    elif kind == 'X':
                        error = rest.split(':')[0]
                        errors[error] = errors.get(error, 0) + 1
        # What those errors were: the workers' tracebacks (a worker's
        # .err file holds one per unnamed error it met).
        tracebacks = []
        if errors:
            for name in sorted(self.procs):
                path = os.path.join(self.dir, name + '.log.err')
                if os.path.exists(path):
                    with open(path) as f:
                        text = f.read()
                    tracebacks += ['Traceback' + part for part in
                                   text.split('Traceback')[1:]]
        problems = []
        storage = self.factory().storage(commit_lock_timeout=5)
        db = ZODB.DB(storage)
        try:
            accounts, transfers = read_bank(db)
            # No lock left: a commit goes through at once.
            with db.transaction() as c:
                c.root()['checked'] = time.time()
        finally:
            db.close()
        if len(committed) != len(set(committed)):
            problems.append('a key was logged committed twice')
        missing = set(committed) - set(transfers)
        if missing:
            problems.append('%d committed transfers missing: %s'
                            % (len(missing), sorted(missing)[:5]))
        wrong = failed & set(transfers)
        if wrong:
            problems.append('%d transfers the storage said failed are '
                            'there: %s' % (len(wrong), sorted(wrong)[:5]))
        # Tried, and neither committed nor failed: the writer was killed
        # in the middle of the commit.
        cut_short = tried - set(committed) - failed
        extra = set(transfers) - set(committed) - set(unknown) - cut_short
        if extra:
            problems.append('%d transfers nobody tried to commit: %s'
                            % (len(extra), sorted(extra)[:5]))
        if accounts != replay(transfers, ACCOUNTS, START):
            problems.append('balances are not the replay of the transfers')
        if sum(accounts.values()) != ACCOUNTS * START:
            problems.append('total %d, not %d' % (sum(accounts.values()),
                                                  ACCOUNTS * START))
        if bad:
            problems.append('readers saw totals %s' % bad[:5])
        if backwards:
            problems.append('readers were served older transactions than '
                            'before (newest, then served): %s'
                            % backwards[:5])
        if not committed:
            problems.append('nothing was committed')
        summary = {
            'database': '%s-%s' % (self.db,
                                   'HP' if self.keep_history else 'HF'),
            'seconds': self.seconds, 'transfers committed': len(committed),
            'outcome unknown': len(unknown),
            'unknown that committed': len(set(unknown) & set(transfers)),
            'cut short by a kill': len(cut_short),
            'cut short that committed': len(cut_short & set(transfers)),
            'retries': retries, 'retries by error': by_error,
            'faults': self.faults,
            'longest stall s': round(max(stalls or [0]), 2),
            'errors seen by workers': errors,
            'worker tracebacks': tracebacks[:3], 'problems': problems}
        return summary

    def commit_times(self, names=None):
        """The sorted times of the commits of the workers *names* (None:
        all)."""
        times = []
        for name in self.procs if names is None else names:
            path = os.path.join(self.dir, name + '.log')
            if not os.path.exists(path):
                continue
            with open(path) as f:
                times += [float(line.split()[2]) for line in f
                          if line.startswith('C ')]
        return sorted(times)

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == '--worker':
        role, kind, keep_history, data_dir, host, port, log_path, seed, \
            stop_path = args[1:10]
        worker(role, kind, keep_history == 'True', data_dir, host, port,
               log_path, int(seed), stop_path)
        return 0
    parser = argparse.ArgumentParser(prog='python -m relstorage.tests.chaos',
                                     description=__doc__.split('\n\n')[0])
    parser.add_argument('--db', choices=['sqlite', 'postgresql', 'mysql'],
                        action='append')
    parser.add_argument('--mode', choices=['HP', 'HF'], action='append')
    parser.add_argument('--seconds', type=float, default=60)
    parser.add_argument('--writers', type=int, default=8)
    parser.add_argument('--readers', type=int, default=2)
    parser.add_argument('--seed', type=int, default=None)
    options = parser.parse_args(args)
    status = 0
    for db in options.db or ['sqlite', 'postgresql', 'mysql']:
        for mode in options.mode or ['HP', 'HF']:
            chaos = Chaos(db, mode == 'HP', options.seconds, options.writers,
                          options.readers, options.seed)
            summary = chaos.run()
            if (summary['problems'] or summary['errors seen by workers']
                    or os.environ.get('CHAOS_KEEP')):
                print('kept %s' % chaos.dir, file=sys.stderr)
            else:
                chaos.remove()
            print(json.dumps(summary), flush=True)
            if summary['problems'] or summary['errors seen by workers']:
                status = 1
    return status


if __name__ == '__main__':
    sys.exit(main())
