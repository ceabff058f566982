"""What a PostgreSQL setting does to a large database's commits, on a
private server this run starts (durable, as an installed one is: fsync,
full-page writes, 128 MB of shared buffers) and removes at the end; the
machine's own server is never touched.

    python -m relstorage_speedtest.pgwal [--objects 1000000]
        [--setting wal_compression=off,lz4,pglz] [--rounds 3]
        [--json FILE]

It builds a history-free database of ``--objects`` objects (as
relstorage_speedtest.scale does), then, for ``--rounds`` rounds, for each value
of the setting in turn (set with ALTER SYSTEM and a reload, so only settings a
reload changes): a CHECKPOINT, then relstorage_speedtest.scale's measurement
(1,000 random objects read cold, a commit changing 1,000 others) through a
storage opened afresh, with the commit's bytes of WAL and, from ``pg_waldump
--stats`` over them, its records and how much of it is full-page images. Each
value's medians are printed with their range. After a checkpoint the first
change to each page writes the whole page to the WAL, which is what a commit of
scattered objects in a large database mostly writes. Not a test: nothing here
asserts on time.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

import ZODB
import ZODB.config

from relstorage.helptext import help_text
from relstorage.testing.postgresql_server import PostgreSQLServer
from relstorage.testing.servers import DATABASES
from relstorage.testing.servers import TEST_PASSWORD
from relstorage.testing.servers import TEST_USER

from .scale import IMPORT
from .scale import Build
from .scale import log_probe
from .scale import measure


class DurableServer(PostgreSQLServer):
    """A private server set as an installed one is by default, not as
    the tests' (which turn durability off to start fast)."""
    extra_settings = {'fsync': 'on', 'synchronous_commit': 'on',
                      'full_page_writes': 'on', 'shared_buffers': '128MB'}


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.pgwal',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--objects', type=int, default=1000000,
        help='objects in the database (%(default)s)')
    add('--setting', default='wal_compression=off,lz4,pglz',
        help='NAME=VALUE,VALUE...: the values to compare (%(default)s)')
    add('--rounds', type=int, default=3, help='%(default)s')
    add('--seed', type=int, default=1, help='random seed (%(default)s)')
    add('--json', help='write the figures to this file')
    args = parser.parse_args(argv)
    name, _, values = args.setting.partition('=')
    if not name.replace('_', '').isalnum() or not values:
        parser.error('--setting: NAME=VALUE,VALUE... expected, not %r'
                     % args.setting)
    args.name, args.values = name, values.split(',')
    return args


def wal_stats(server, start, end):
    """pg_waldump's totals for the WAL of the private *server* between
    two positions: records, their bytes and the bytes of full-page
    images (None each when pg_waldump cannot say)."""
    done = subprocess.run(
        [os.path.join(server._bindir, 'pg_waldump'), '--stats', '-p',
         os.path.join(server.data_dir, 'pg_wal'), '-s', start, '-e', end],
        capture_output=True, text=True)
    # Total  N  record-bytes [p%]  fpi-bytes [p%]  combined [100%]
    found = re.search(r'^Total\s+(\d+)\s+(\d+) \[[^]]*\]\s+(\d+)',
                      done.stdout, re.MULTILINE)
    values = map(int, found.groups()) if found else (None,) * 3
    return dict(zip(('wal_records', 'wal_record_bytes', 'wal_fpi_bytes'),
                    values))


def waldump_probe(server, cursor, probe):
    """*probe* (see relstorage_speedtest.scale.log_probe), which also reads
    the commit's WAL with pg_waldump into its ``last``: how many records,
    and how much of the WAL they and the full-page images are."""
    def position():
        cursor.execute('SELECT pg_current_wal_lsn()')
        return cursor.fetchone()[0]

    def before():
        start = position()
        inner = probe()

        def after():
            written = inner()
            before.last = wal_stats(server, start, position())
            return written
        return after
    before.last = {}
    return before


def _mb(nbytes):
    return '?' if nbytes is None else '%.2f' % (nbytes / 1e6)


def run(args, server):
    database = DATABASES[1]  # a history-free test database
    dsn = 'host=127.0.0.1 port=%d user=%s password=%s' % (
        server.port, TEST_USER, TEST_PASSWORD)
    section = ('<relstorage>\n keep-history false\n<postgresql>\n dsn %s '
               'dbname=%s\n</postgresql>\n</relstorage>' % (dsn, database))
    storage = ZODB.config.storageFromString(IMPORT + section)
    storage.zap_all()
    db = ZODB.DB(storage)
    rng = random.Random(args.seed)
    try:
        build = Build(db, 10000, rng)
        started = time.perf_counter()
        build.grow(args.objects)
        print('built %d objects in %.0f s' % (
            build.count, time.perf_counter() - started), flush=True)
    finally:
        db.close()
    from psycopg2 import sql
    setting = sql.Identifier(args.name)
    admin = server._admin_connect(database)
    figures = {value: [] for value in args.values}
    try:
        cursor = admin.cursor()
        probe = waldump_probe(
            server, cursor,
            log_probe('postgresql', '%s dbname=%s' % (dsn, database)))
        cursor.execute('VACUUM ANALYZE')
        sample = list(build.sample)
        for r in range(args.rounds):
            for value in args.values:
                server.set(args.name, value)
                time.sleep(0.5)  # the reload reaches new sessions
                cursor.execute(sql.SQL('SHOW {}').format(setting))
                shown = cursor.fetchone()[0]
                if shown != value:
                    raise SystemExit('%s is %r after the reload, not %r: '
                                     'not a setting a reload changes?'
                                     % (args.name, shown, value))
                cursor.execute('CHECKPOINT')
                point = measure(section, rng.sample(sample, 2000), probe)
                point.update(probe.last)
                figures[value].append(point)
                print('round %d %s=%s: commit %.1f ms, %.2f MB of WAL '
                      '(%s records, %s MB of full-page images); cold '
                      '%.1f ms' % (
                          r + 1, args.name, value, point['commit'] * 1e3,
                          point['commit_log_bytes'] / 1e6,
                          point['wal_records'],
                          _mb(point['wal_fpi_bytes']),
                          point['cold'] * 1e3), flush=True)
    finally:
        admin.close()
    return figures


def report(args, figures, out=sys.stdout):
    print('\n%s at %d objects, medians of %d (range):' % (
        args.name, args.objects, args.rounds), file=out)
    for value, points in figures.items():
        cells = []
        for key, unit, label in (
                ('commit', 1e3, 'commit %s ms'),
                ('commit_log_bytes', 1e-6, 'WAL %s MB'),
                ('wal_fpi_bytes', 1e-6, 'of which full-page images %s MB'),
                ('cold', 1e3, 'cold reads %s ms')):
            if any(p.get(key) is None for p in points):
                continue  # (no pg_waldump)
            values = [p[key] * unit for p in points]
            cells.append(label % '%.1f (%.1f-%.1f)' % (
                statistics.median(values), min(values), max(values)))
        print('  %-8s %s' % (value, ', '.join(cells)), file=out)


def main(argv=None):
    args = parse_args(argv)
    server = DurableServer(max_connections=50)
    server.start()
    try:
        figures = run(args, server)
    finally:
        server.remove()
    report(args, figures)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'args': vars(args), 'figures': figures}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
