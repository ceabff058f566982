"""Scale test: build a large history-free database, and measure it at a
small size and again at the full size, in the same run.

    python -m relstorage_speedtest.scale [--objects 10000000]
        [--baseline 100000] [--databases postgresql,sqlite] [--json FILE]
        [--keep]

For each database the build adds objects (PersistentMappings in an
LOBTree under the root) in commits of ``--batch``; a tenth of each commit
goes to a mapping the next commit unlinks, so that the database holds
garbage. At ``--baseline`` objects and again at ``--objects`` it
first settles the database as time in use would (PostgreSQL: VACUUM
ANALYZE and CHECKPOINT; SQLite: its WAL checkpointed; MySQL: ANALYZE
TABLE), then measures the database's size on disk and, three times
with a storage opened afresh and objects of its own (the median is
reported, with the range): reading 1,000 objects picked at random from
all built so far (cold: the first read of each, from the database; hot:
again, from the connection's cache; warm: again, from the storage's
cache); committing a change to 1,000 others. With each commit it
measures what explains its cost: the bytes it wrote to the database's
log (PostgreSQL's WAL, the whole server's, by its position; SQLite's
WAL, emptied by a checkpoint first) and, on SQLite, the read system
calls the process made (from /proc, on Linux; about one per page not in
SQLite's page cache), also for the cold reads. At the end it packs
with ``zodbpack --days 0`` (garbage collection on) in a process of its
own, timing it and reading its peak RSS. The build rate is reported
for each tenth of the build: the last against the first shows whether
commits slow down as the database grows.

The server databases are ``PREFIX_hf`` (``--prefix``, default
rsscale), made when missing through the admin connections and emptied
at the start; SQLite goes to a temporary directory (``--keep`` keeps
it). Opt-in, not part of the tests: 10,000,000 objects took 15 minutes
on PostgreSQL and 7 on SQLite here. Nothing here asserts on time.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import transaction
import ZODB
import ZODB.config
from BTrees.LOBTree import LOBTree
from persistent.mapping import PersistentMapping

from relstorage.children import child_env
from relstorage.helptext import help_text

from . import serverstate
from .pack import run_measured
from .shootout import _create_databases
from .shootout import _keywords
from .shootout import adapter_section
from .shootout import server_arguments

IMPORT = '%import relstorage\n'
#: Objects read, and objects changed by the measured commit.
SAMPLE = 1000
#: Measurements at each size, each with objects of its own; the median
#: is reported, with the range.
ROUNDS = 3


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.scale',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--objects', type=int, default=10000000,
        help='objects at the end of the build (%(default)s)')
    add('--baseline', type=int, default=100000,
        help='objects at the first measurement (%(default)s)')
    add('--batch', type=int, default=10000,
        help='objects per build commit (%(default)s)')
    add('--databases', default='postgresql,sqlite',
        help='comma separated, of postgresql, mysql, sqlite '
             '(%(default)s)')
    add('--prefix', default='rsscale',
        help='server databases are PREFIX_hf (%(default)s)')
    server_arguments(add)
    add('--keep', action='store_true',
        help='keep the SQLite directory (printed)')
    add('--seed', type=int, default=1, help='random seed (%(default)s)')
    add('--json', help='write the figures to this file')
    return parser.parse_args(argv)


class Build:
    """Grows the database in commits of *batch*, keeping a uniform random
    sample (a reservoir) of ``(key, oid)`` of the objects kept."""

    def __init__(self, db, batch, rng):
        self.db = db
        self.batch = batch
        self.rng = rng
        self.count = 0
        self.kept = 0
        self.sample = []
        self.rates = []  # (objects so far, objects per second)
        with db.transaction() as conn:
            conn.root()['tree'] = LOBTree()

    def keep(self, item):
        self.kept += 1
        if len(self.sample) < 2 * SAMPLE * ROUNDS:
            self.sample.append(item)
        else:
            i = self.rng.randrange(self.kept)
            if i < len(self.sample):
                self.sample[i] = item

    def grow(self, to):
        conn = self.db.open()
        try:
            root = conn.root()
            tree = root['tree']
            while self.count < to:
                n = min(self.batch, to - self.count)
                started = time.perf_counter()
                kept = []
                limbo = PersistentMapping()  # garbage after the next commit
                for i in range(self.count, self.count + n):
                    obj = PersistentMapping(value=i)
                    if i % 10 == 9:
                        limbo[i] = obj
                    else:
                        tree[i] = obj
                        kept.append((i, obj))
                root['limbo'] = limbo
                transaction.commit()
                self.rates.append(
                    (self.count + n, n / (time.perf_counter() - started)))
                for i, obj in kept:
                    self.keep((i, obj._p_oid))
                self.count += n
                conn.cacheMinimize()
        finally:
            transaction.abort()
            conn.close()


def read_calls():
    """Read system calls this process has made (None off Linux): on
    SQLite, about one per database page not in SQLite's page cache."""
    try:
        with open('/proc/self/io') as f:
            for line in f:
                if line.startswith('syscr:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def log_probe(database, where):
    """A function to call before a commit, returning one to call after
    it that gives the bytes the commit wrote to the database's log:
    PostgreSQL's WAL (the whole server's: a quiet server is assumed),
    *where* being the database's DSN, or SQLite's WAL (checkpointed
    empty first, then counted in frames), *where* being its data
    directory; None for MySQL."""
    if database == 'postgresql':
        import psycopg2
        dsn = where

        def before():
            conn = psycopg2.connect(dsn)
            conn.autocommit = True
            cur = conn.cursor()
            cur.execute('SELECT pg_current_wal_lsn()')
            (start,) = cur.fetchone()

            def after():
                try:
                    cur.execute('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(),'
                                ' %s)', (start,))
                    return int(cur.fetchone()[0])
                finally:
                    conn.close()
            return after
        return before
    if database == 'sqlite':
        import sqlite3
        path = os.path.join(where, 'relstorage.sqlite3')

        def before():
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute('PRAGMA wal_checkpoint(TRUNCATE)')

            def after():
                try:
                    # (busy, frames in the WAL, frames checkpointed): a
                    # passive checkpoint leaves the frames counted.
                    frames = conn.execute(
                        'PRAGMA wal_checkpoint(PASSIVE)').fetchone()[1]
                    page = conn.execute('PRAGMA page_size').fetchone()[0]
                    return frames * page
                finally:
                    conn.close()
            return after
        return before
    return None


def _delta(before, after):
    return None if before is None or after is None else after - before


def measure(section, picked, probe=None, count_reads=False):
    """Through a ZODB connection of a storage opened afresh: reading
    SAMPLE objects of *picked* (cold: from the database; hot: again, from
    the connection's cache; warm: again, from the storage's cache, the
    connection's emptied) and a commit changing SAMPLE others: seconds
    each; with the commit's log bytes by *probe* (see log_probe) and,
    with *count_reads*, the read calls of the cold reads and of the
    commit."""
    calls_now = read_calls if count_reads else (lambda: None)
    # (Half each, in a database too small for SAMPLE of both.)
    count = min(SAMPLE, len(picked) // 2)
    reads = [oid for _, oid in picked[:count]]
    changes = [oid for _, oid in picked[count:2 * count]]
    db = ZODB.DB(ZODB.config.storageFromString(IMPORT + section))
    try:
        figures = {}
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        calls = calls_now()
        started = time.perf_counter()
        objects = [conn.get(oid) for oid in reads]
        for obj in objects:
            obj['value']
        figures['cold'] = time.perf_counter() - started
        figures['cold_read_calls'] = _delta(calls, calls_now())
        for kind in ('hot', 'warm'):
            if kind == 'warm':
                conn.cacheMinimize()  # ghosts: their states are reloaded
            started = time.perf_counter()
            for obj in objects:
                obj['value']
            figures[kind] = time.perf_counter() - started
        for oid in changes:
            obj = conn.get(oid)
            obj['value'] = -obj['value']
        after = probe() if probe is not None else None
        calls = calls_now()
        started = time.perf_counter()
        tm.commit()
        figures['commit'] = time.perf_counter() - started
        figures['commit_read_calls'] = _delta(calls, calls_now())
        figures['commit_log_bytes'] = after() if after is not None else None
        conn.close()
    finally:
        db.close()
    return figures


def measure_rounds(section, sample, probe=None, count_reads=False):
    """measure() ROUNDS times, each on objects of its own: the median of
    each figure, and every round's under ``rounds``."""
    picked = list(sample)
    # (A database smaller than the rounds need is measured once.)
    count = max(min(ROUNDS, len(picked) // (2 * SAMPLE)), 1)
    rounds = [measure(section, picked[i * 2 * SAMPLE:(i + 1) * 2 * SAMPLE],
                      probe, count_reads)
              for i in range(count)]
    figures = {key: (statistics.median(r[key] for r in rounds)
                     if rounds[0][key] is not None else None)
               for key in rounds[0]}
    figures['rounds'] = rounds
    return figures


def settle(database, args, name, data_dir):
    """Bring the database to the state a database of its size is in
    after a while in use, rather than right after a bulk load, before
    each measurement (at either size): PostgreSQL vacuumed and analyzed
    (what autovacuum does in time) and checkpointed; SQLite's WAL
    checkpointed into the database file; MySQL's tables analyzed."""
    if database == 'postgresql':
        import psycopg2
        for dsn, sql in (('%s dbname=%s' % (args.pg_dsn, name),
                          'VACUUM ANALYZE'),
                         (args.pg_admin, 'CHECKPOINT')):
            conn = psycopg2.connect(dsn)
            try:
                conn.autocommit = True
                conn.cursor().execute(sql)
            finally:
                conn.close()
    elif database == 'sqlite':
        import sqlite3
        conn = sqlite3.connect(os.path.join(data_dir, 'relstorage.sqlite3'))
        try:
            conn.execute('PRAGMA wal_checkpoint(TRUNCATE)')
        finally:
            conn.close()
    else:
        import MySQLdb
        conn = MySQLdb.connect(**dict(_keywords(args.mysql), db=name))
        try:
            cursor = conn.cursor()
            cursor.execute('SHOW TABLES')
            for (table,) in cursor.fetchall():
                cursor.execute('ANALYZE TABLE %s' % table)
                cursor.fetchall()
        finally:
            conn.close()


def pack(section, workdir):
    """zodbpack --days 0 in a process of its own: seconds, peak MB (its
    own with its workers', see relstorage_speedtest.pack.run_measured), and its
    summary."""
    config = os.path.join(workdir, 'scale.conf')
    with open(config, 'w') as f:
        f.write(IMPORT + section + '\n')
    seconds, peak_mb, code, output, _ = run_measured(
        [sys.executable, '-m', 'relstorage.zodbpack', '-v', '--days', '0',
         config],
        os.path.join(workdir, 'zodbpack.log'), workdir, child_env())
    figures = {'seconds': seconds, 'peak_mb': peak_mb,
               'summary': [line.strip() for line in output.splitlines()
                           if line.strip().startswith('packed to')]}
    if code:
        figures['error'] = 'zodbpack exited with %d: %s' % (
            code, output.strip()[-2000:])
    return figures


def size_function(database, name, args, data_dir):
    if database == 'sqlite':
        return lambda storage: serverstate.directory_bytes(data_dir)

    def size_of(storage):
        state = (serverstate.postgresql('%s dbname=postgres' % args.pg_dsn,
                                        [name])
                 if database == 'postgresql' else
                 serverstate.mysql(_keywords(args.mysql), [name]))
        return state['database_bytes'][name]
    return size_of


def run_database(database, args, workdir):
    name = '%s_hf' % args.prefix
    data_dir = os.path.join(workdir, 'sqlite-%s' % database)
    section = ('<relstorage>\n keep-history false\n pack-gc true\n%s\n'
               '</relstorage>' % adapter_section(args, database, name,
                                                 data_dir))
    if database != 'sqlite':
        _create_databases(args, [database], [name])
    storage = ZODB.config.storageFromString(IMPORT + section)
    storage.zap_all()
    db = ZODB.DB(storage)
    rng = random.Random(args.seed)
    build = Build(db, args.batch, rng)
    size_of = size_function(database, name, args, data_dir)
    probe = log_probe(database, '%s dbname=%s' % (args.pg_dsn, name)
                      if database == 'postgresql' else data_dir)
    result = {'database': database, 'points': []}
    try:
        for target in sorted({min(args.baseline, args.objects),
                              args.objects}):
            started = time.perf_counter()
            build.grow(target)
            point = {'objects': build.count,
                     'build_seconds': time.perf_counter() - started}
            settle(database, args, name, data_dir)
            storage = ZODB.config.storageFromString(IMPORT + section)
            try:
                point['bytes'] = size_of(storage)
            finally:
                storage.close()
            point.update(measure_rounds(section, build.sample, probe,
                                        database == 'sqlite'))
            result['points'].append(point)
            print('%s at %d objects: %s' % (database, build.count,
                                            _brief(point)), flush=True)
    finally:
        db.close()
    rates = [rate for _, rate in build.rates]
    tenth = max(len(rates) // 10, 1)
    result['build_rate_by_tenth'] = [
        statistics.median(rates[i:i + tenth])
        for i in range(0, len(rates), tenth)]
    result['pack'] = pack(section, workdir)
    print('%s pack: %.1f s, peak RSS %.0f MB %s' % (
        database, result['pack']['seconds'], result['pack']['peak_mb'],
        result['pack'].get('error') or ' '.join(result['pack']['summary'])),
        flush=True)
    return result


def _brief(point):
    return ('%.2f GB, cold %.1f ms, warm %.2f ms, hot %.2f ms, commit '
            '%.1f ms per %d' % (point['bytes'] / 1e9, point['cold'] * 1e3,
                                point['warm'] * 1e3, point['hot'] * 1e3,
                                point['commit'] * 1e3, SAMPLE))


def _spread(point, key):
    values = [r[key] * 1e3 for r in point.get('rounds', ())]
    if not values:
        return '-'
    return '%.1f-%.1f' % (min(values), max(values))


def report(results, out=sys.stdout):
    for r in results:
        first, last = r['points'][0], r['points'][-1]
        rates = r['build_rate_by_tenth']
        print('\n%s: %d -> %d objects' % (r['database'], first['objects'],
                                          last['objects']), file=out)
        for key in ('cold', 'warm', 'hot', 'commit'):
            print('  %-7s %9.2f ms -> %9.2f ms  (x%.2f; rounds %s -> %s ms)'
                  % (key, first[key] * 1e3, last[key] * 1e3,
                     last[key] / first[key], _spread(first, key),
                     _spread(last, key)), file=out)
        for key, unit, what in (
                ('commit_log_bytes', 1e6, 'commit: MB written to the log'),
                ('commit_read_calls', 1, 'commit: read calls'),
                ('cold_read_calls', 1, 'cold reads: read calls')):
            if first.get(key) is not None and last.get(key) is not None:
                print('  %-31s %9.2f -> %9.2f  (x%.2f)' % (
                    what, first[key] / unit, last[key] / unit,
                    last[key] / max(first[key], 1)), file=out)
        print('  size    %9.2f GB (%.0f bytes per object)' % (
            last['bytes'] / 1e9, last['bytes'] / last['objects']), file=out)
        print('  build   %s objects/s by tenth; last/first %.2f' % (
            ' '.join('%.0f' % rate for rate in rates),
            rates[-1] / rates[0]), file=out)
        p = r['pack']
        print('  pack    %.1f s, peak RSS %.0f MB%s' % (
            p['seconds'], p['peak_mb'],
            ('  ' + p['error']) if 'error' in p else ''), file=out)


def main(argv=None):
    args = parse_args(argv)
    workdir = tempfile.mkdtemp(prefix='speedtest-scale-')
    results = []
    try:
        for database in args.databases.split(','):
            results.append(run_database(database, args, workdir))
    finally:
        if args.keep:
            print('kept', workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report(results)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'machine': serverstate.machine(), 'args': vars(args),
                       'results': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
