"""Pack benchmark: build a database with history and garbage, pack it
while another client keeps committing, and report the pack time, the
pack's peak memory and the longest time the writer waited for a commit.

    python -m speedtest.pack [--objects 100000] [--database sqlite]
        [--keep-history|--no-keep-history] [--json FILE] [--verbose]

The pack runs in a child process so that its peak memory (max RSS) is its
own. Not a test: nothing here asserts on time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping

from relstorage.children import child_env
from relstorage.helptext import help_text

CHILD = '''
import json, logging, sys, time
from ZODB.serialize import referencesf
from speedtest.pack import memory_kb, open_storage
spec = json.loads(sys.argv[1])
if spec.get('verbose'):
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                        format='%(asctime)s %(message)s')
storage = open_storage(spec)
before = memory_kb('VmRSS')
started = time.perf_counter()
result = storage.pack_with_result(time.time(), referencesf)
seconds = time.perf_counter() - started
peak = memory_kb('VmHWM')
storage.close()
print(json.dumps({"seconds": seconds, "peak_kb": peak,
                  "rss_before_pack_kb": before, "result": dict(result)}))
'''


def memory_kb(field):
    """VmRSS (now) or VmHWM (peak) of this process, from /proc (Linux);
    unlike getrusage's maxrss, the peak is not inherited from a parent."""
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    return 0


def open_storage(spec, **options):
    """A RelStorage for *spec* (database, keep_history, data_dir)."""
    from relstorage.tests.dbs import DatabaseFactory
    return DatabaseFactory.in_child(
        spec['database'], spec['keep_history'], spec['data_dir']
    ).storage(**options)


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


class Writer(threading.Thread):
    """Commits small transactions until stopped; records each duration."""

    def __init__(self, db):
        super().__init__(daemon=True)
        self.db = db
        self.stop = threading.Event()
        self.durations = []
        self.starts = []  # wall-clock, to set against the pack's log
        self.errors = []

    def run(self):
        tm = transaction.TransactionManager()
        conn = self.db.open(transaction_manager=tm)
        n = 0
        while not self.stop.is_set():
            self.starts.append(time.time())
            started = time.perf_counter()
            try:
                tm.begin()
                conn.root()['writer'] = n
                tm.commit()
            except Exception as e:  # noqa: BLE001 -- counted and reported
                tm.abort()
                self.errors.append(repr(e))
            self.durations.append(time.perf_counter() - started)
            n += 1
            time.sleep(0.005)
        conn.close()


def main(argv=None):
    parser = argparse.ArgumentParser(prog='speedtest.pack',
                                     description=help_text(__doc__))
    parser.add_argument('--objects', type=int, default=100000,
                        help='objects the database is built with '
                             '(%(default)s)')
    parser.add_argument('--database', default='sqlite',
                        choices=['sqlite', 'postgresql', 'mysql'],
                        help='the database to pack (%(default)s; servers: '
                             'the test databases)')
    parser.add_argument('--no-keep-history', dest='keep_history',
                        action='store_false', default=True,
                        help='a history-free database (default: history '
                             'kept)')
    parser.add_argument('--json', help='write the figures to this file')
    parser.add_argument('--verbose', action='store_true',
                        help="show the pack's log (one line per batch)")
    args = parser.parse_args(argv)

    spec = {'database': args.database, 'keep_history': args.keep_history,
            'verbose': args.verbose,
            'data_dir': tempfile.mkdtemp(prefix='speedtest-pack-')}
    # A fresh schema, so that rows deleted by earlier runs do not count.
    open_storage(spec)._adapter.drop_all()
    storage = open_storage(spec)
    db = ZODB.DB(storage)
    started = time.perf_counter()
    build(db, args.objects)
    built = time.perf_counter() - started
    objects_before = len(storage)
    print('built %d objects (%d current) in %.1f s'
          % (args.objects, objects_before, built), flush=True)

    writer = Writer(db)
    writer.start()
    time.sleep(0.5)
    child = subprocess.run([sys.executable, '-c', CHILD, json.dumps(spec)],
                           capture_output=True, text=True, env=child_env())
    time.sleep(0.5)
    writer.stop.set()
    writer.join(60)
    if child.returncode or args.verbose:
        print(child.stderr, file=sys.stderr)
    if child.returncode:
        return 1
    figures = json.loads(child.stdout.strip().splitlines()[-1])
    objects_after = len(storage)
    db.close()
    figures.update(
        database=args.database, keep_history=args.keep_history,
        objects=args.objects, objects_before=objects_before,
        objects_after=objects_after, build_seconds=built,
        writer_commits=len(writer.durations),
        writer_errors=writer.errors[:5],
        writer_longest_wait=max(writer.durations or [0]),
        writer_median=sorted(writer.durations)[len(writer.durations) // 2]
        if writer.durations else 0,
        cpus=os.cpu_count(), python=sys.version.split()[0])
    print('pack: %.1f s, peak RSS %.0f MB (%.0f MB before packing); '
          'objects %d -> %d; %s'
          % (figures['seconds'], figures['peak_kb'] / 1024,
             figures['rss_before_pack_kb'] / 1024, objects_before,
             objects_after, figures['result']))
    print('concurrent writer: %d commits, longest %.3f s, median %.4f s, '
          '%d errors' % (figures['writer_commits'],
                         figures['writer_longest_wait'],
                         figures['writer_median'], len(writer.errors)))
    if args.verbose:
        slowest = sorted(zip(writer.durations, writer.starts))[-3:]
        for seconds, at in reversed(slowest):
            print('  writer waited %.3f s from %s' % (
                seconds, time.strftime('%H:%M:%S', time.localtime(at))
                + ('%.3f' % (at % 1))[1:]))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
