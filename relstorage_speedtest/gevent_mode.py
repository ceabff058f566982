"""gevent mode: one process serving requests that read and write objects
from many workers at once -- greenlets under gevent's monkey-patching, the
database waits cooperative, against threads whose drivers block -- on each
database, with RelStorage 4.3's gevent drivers beside this storage's.

    python -m relstorage_speedtest.gevent_mode
        [--databases sqlite,postgresql,mysql] [--modes hf]
        [--contenders ours-gevent,ours-threads,rs4-gevent]
        [--greenlets 20] [--requests 50] [--objects 2000] [--reads 10]
        [--write-ratio 0.2] [--latency-ms 0] [--rounds 3]
        [--other-venv DIR] [--json FILE]

Each contender is a process of its own (gevent's patching is process-wide)
running relstorage_speedtest/geventside.py with its side's Python:
``ours-gevent`` patches and names the gevent driver (``gevent psycopg2``,
``gevent MySQLdb``, ``gevent sqlite3``, with ``gevent_yield_interval``) and
runs the workers as greenlets; ``ours-threads`` runs them as threads without
patching; ``ours-serial`` serves the requests one after another;
``rs4-gevent`` and ``rs4-threads`` do the same with RelStorage 4.3 from its
virtualenv with gevent (``--other-venv``, ``rs4-gevent/`` in the test
cache, made when missing; not the shootout's, since with gevent installed
RelStorage 4.3's ``auto`` picks its gevent MySQLdb driver even unpatched:
the contenders without gevent name ``psycopg2`` and ``MySQLdb``). Every
worker (``--greenlets`` of them) serves ``--requests`` requests, each a
transaction loading ``--reads`` of ``--objects`` counters at random and, for
a ``--write-ratio`` of them, adding one to a counter and committing (a
conflict is retried). ``--latency-ms`` puts a proxy delaying every message a
client sends (relstorage.testing.slow_proxy) in front of PostgreSQL and
MySQL: a database across a network. This storage uses the ``main`` test
databases, RelStorage 4.3 the ``misc`` one, each emptied before each run;
SQLite a new directory. The contenders take turns, the order reversed every
other round (A B, B A). Printed: requests per second, the median of the
rounds with their range, and the ratios round by round of gevent to threads
and of this storage to RelStorage 4.3. Every run must read back as many
increments as it committed; a run of RelStorage 4.3 that fails (a driver it
cannot load) is reported and skipped. Not a test: nothing here asserts on
time.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile

from relstorage.helptext import help_text
from relstorage.testing.cache import cache_root
from relstorage.testing.dbs import empty_database
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn

from . import othervenv
from .pack import PackBenchError
from .pack import our_side
from .pack import other_side

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'geventside.py')
MODE_NAMES = {'hf': False, 'hp': True}
#: How each contender serves: (side, the workers' kind).
CONTENDERS = {'ours-gevent': ('ours', 'gevent'),
              'ours-threads': ('ours', 'threads'),
              'ours-serial': ('ours', 'serial'),
              'rs4-gevent': ('other', 'gevent'),
              'rs4-threads': ('other', 'threads')}
#: The driver each database's adapter names under gevent (RelStorage 4's
#: names, which this storage keeps).
GEVENT_DRIVERS = {'postgresql': 'gevent psycopg2', 'mysql': 'gevent MySQLdb',
                  'sqlite': 'gevent sqlite3'}
#: The driver named without gevent: RelStorage 4.3's ``auto`` takes its
#: gevent MySQLdb driver whenever gevent is installed, patched or not.
BLOCKING_DRIVERS = {'postgresql': 'psycopg2', 'mysql': 'MySQLdb'}
#: The ratios printed, round by round: (over, under).
RATIOS = (('ours-gevent', 'ours-threads'), ('ours-gevent', 'ours-serial'),
          ('rs4-gevent', 'rs4-threads'), ('ours-gevent', 'rs4-gevent'),
          ('ours-threads', 'rs4-threads'))
#: What RelStorage 4.3's virtualenv needs here beside itself.
GEVENT_EXTRA = ('gevent',)
#: Where it is kept: not the shootout's (``rs4-bench/``), where gevent
#: would change the driver RelStorage 4.3 picks on MySQL.
DEFAULT_VENV = os.path.join(cache_root(), 'rs4-gevent')


class Proxies:
    """One slow proxy per server, started when first asked for."""

    def __init__(self, delay):
        self.delay = delay
        self.started = {}

    def port(self, host, port):
        if not self.delay:
            return port
        if (host, port) not in self.started:
            from relstorage.testing.slow_proxy import start
            self.started[(host, port)] = start(host, port, self.delay)
        return self.started[(host, port)][1]

    def stop(self):
        for process, _ in self.started.values():
            process.terminate()
            process.wait()


def adapter_section(database, keep_history, which, how, workdir, proxies,
                    yield_interval):
    """The adapter section of an emptied database for workers of kind
    *how* (``gevent`` names the gevent driver)."""
    driver = (GEVENT_DRIVERS if how == 'gevent'
              else BLOCKING_DRIVERS).get(database)
    lines = ['driver %s' % driver] if driver else []
    if database == 'sqlite':
        lines.append('data-dir %s' % tempfile.mkdtemp(prefix='sqlite-',
                                                      dir=workdir))
        if driver:
            lines.append('gevent_yield_interval %d' % yield_interval)
        tag = 'sqlite3'
    elif database == 'postgresql':
        empty_database(database, keep_history, which)
        dsn = pg_dsn(keep_history, which)
        host = re.search(r'\bhost=(\S+)', dsn).group(1)
        port = int(re.search(r'\bport=(\S+)', dsn).group(1))
        lines.append('dsn %s' % re.sub(
            r'\bport=\S+', 'port=%d' % proxies.port(host, port), dsn))
        tag = 'postgresql'
    else:
        empty_database(database, keep_history, which)
        params = mysql_params(keep_history, which)
        params['port'] = proxies.port(params['host'], params['port'])
        lines.extend('%s %s' % item for item in params.items() if item[1])
        tag = 'mysql'
    return '<%s>\n%s\n</%s>' % (tag, '\n'.join(' ' + line
                                                for line in lines), tag)


class Run:
    """One contender on one database in one history mode."""

    def __init__(self, name, side, database, mode):
        self.name = name
        self.side = side
        self.how = CONTENDERS[name][1]
        self.database = database
        self.mode = mode

    def once(self, args, workdir, script, proxies):
        keep_history = MODE_NAMES[self.mode]
        section = '<relstorage>\n keep-history %s\n%s\n</relstorage>' % (
            'true' if keep_history else 'false', adapter_section(
                self.database, keep_history, self.side.which, self.how,
                workdir, proxies, args.yield_interval))
        spec = {'section': section, 'objects': args.objects,
                'workers': args.greenlets, 'requests': args.requests,
                'reads': args.reads, 'write_ratio': args.write_ratio,
                'seed': args.seed}
        try:
            result = self.side.run(script, self.how, spec, workdir)
        except PackBenchError as e:
            return {'error': str(e).strip().splitlines()[-1]}
        expected = args.greenlets * args.requests
        if result['served'] != expected:
            result['error'] = 'served %d requests of %d' % (
                result['served'], expected)
        elif result['counted'] != result['written']:
            result['error'] = ('read back %d increments, committed %d'
                               % (result['counted'], result['written']))
        return result


def spread(values):
    return statistics.median(values), min(values), max(values)


def summarise(rounds, names):
    """Per (database, mode): each contender's requests per second
    (median, min, max) and the ratios of RATIOS, round by round."""
    table = []
    keys = []
    for row in rounds:
        for key in row:
            if key not in keys:
                keys.append(key)
    for key in keys:
        done = [row[key] for row in rounds if key in row]
        line = {'database': key[0], 'mode': key[1], 'sides': {},
                'ratios': {}}
        for name in names:
            values = [d[name]['per_second'] for d in done
                      if 'error' not in d.get(name, {'error': 1})]
            if values:
                line['sides'][name] = spread(values)
        for over, under in RATIOS:
            values = [d[over]['per_second'] / d[under]['per_second']
                      for d in done if over in d and under in d
                      and 'error' not in d[over] and 'error' not in d[under]]
            if values:
                line['ratios']['%s/%s' % (over, under)] = spread(values)
        table.append(line)
    return table


def print_table(table, names, file=None):
    file = file or sys.stdout
    print('requests per second, median [min-max]; ratios of the same '
          'rounds', file=file)
    for line in table:
        print('%s %s' % (line['database'], line['mode']), file=file)
        for name in names:
            found = line['sides'].get(name)
            print('  %-14s %s' % (name, '%.1f [%.1f-%.1f]' % found
                                  if found else '-'), file=file)
        for label, found in line['ratios'].items():
            print('  %-28s %.2fx [%.2f-%.2f]' % ((label,) + found),
                  file=file)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.gevent_mode',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--databases', default='sqlite,postgresql,mysql',
        help='comma separated (%(default)s)')
    add('--modes', default='hf',
        help='history-free (hf), history-preserving (hp): %(default)s')
    add('--contenders', default='ours-gevent,ours-threads,rs4-gevent',
        help='comma separated, of %s (%%(default)s)'
             % ', '.join(CONTENDERS))
    add('--greenlets', type=int, default=20,
        help='workers serving requests at once (%(default)s)')
    add('--requests', type=int, default=50,
        help='requests each worker serves (%(default)s)')
    add('--objects', type=int, default=2000,
        help='counters in the database (%(default)s)')
    add('--reads', type=int, default=10,
        help='counters a request loads (%(default)s)')
    add('--write-ratio', type=float, default=0.2,
        help='the share of requests that commit a change (%(default)s)')
    add('--latency-ms', type=float, default=0,
        help='delay every message to PostgreSQL and MySQL by this much '
             '(%(default)s)')
    add('--yield-interval', type=int, default=100,
        help="SQLite's gevent_yield_interval under gevent (%(default)s)")
    add('--rounds', type=int, default=3,
        help='rounds, the order reversed in every other (%(default)s)')
    add('--seed', default='0', help='of the requests chosen (%(default)s)')
    add('--other-venv', default=DEFAULT_VENV, metavar='DIR',
        help="RelStorage 4.3's virtualenv with gevent, made when missing "
             '(%(default)s)')
    add('--json', help='write every figure to this file')
    return parser.parse_args(argv)


def contenders(args):
    names = args.contenders.split(',')
    unknown = set(names) - set(CONTENDERS)
    modes = args.modes.split(',')
    unknown |= set(modes) - set(MODE_NAMES)
    if unknown:
        raise SystemExit('unknown: %s' % ', '.join(sorted(unknown)))
    venv = other = None
    if any(CONTENDERS[name][0] == 'other' for name in names):
        venv = othervenv.ensure(args.other_venv, extra=GEVENT_EXTRA)
        other = othervenv.check(venv)
        print('other: RelStorage %s from %s' % (other['version'],
                                                other['path']), flush=True)
    ours = our_side()
    runs = {}
    for database in args.databases.split(','):
        side = other_side(venv, database) if venv else None
        for mode in modes:
            runs[(database, mode)] = [
                Run(name, ours if CONTENDERS[name][0] == 'ours' else side,
                    database, mode) for name in names]
    return names, runs, other


def main(argv=None):
    args = parse_args(argv)
    workdir = othervenv.neutral_dir()
    # The copy's directory, not this checkout, comes first on the
    # child's sys.path.
    script = shutil.copy(SCRIPT, workdir)
    proxies = Proxies(args.latency_ms / 1000.0)
    rounds = []
    try:
        names, runs, other = contenders(args)
        for number in range(args.rounds):
            row = {}
            for key, group in runs.items():
                order = group if number % 2 == 0 else group[::-1]
                for run in order:
                    result = run.once(args, workdir, script, proxies)
                    row.setdefault(key, {})[run.name] = result
                    print('round %d %-10s %s %-13s %s' % (
                        number + 1, key[0], key[1], run.name,
                        result.get('error') or
                        '%.1f requests/s (%d requests, %d written, %d '
                        'retried, %.2f s; %s)' % (
                            result['per_second'], result['served'],
                            result['written'], result['retries'],
                            result['seconds'], result['driver'])),
                        flush=True)
            rounds.append(row)
    except othervenv.OtherVenvError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        proxies.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    table = summarise(rounds, names)
    print('\n%d workers x %d requests, %d rounds, %s' % (
        args.greenlets, args.requests, args.rounds,
        'latency %g ms' % args.latency_ms if args.latency_ms
        else 'no added latency'))
    print_table(table, names)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'args': vars(args), 'other': other,
                       'rounds': [{'%s %s' % key: row[key] for key in row}
                                  for row in rounds],
                       'summary': table, 'cpus': os.cpu_count(),
                       'python': sys.version.split()[0]}, f, indent=1)
    # RelStorage 4.3's failures are figures (its driver may not load
    # here); this side's, and a wrong count anywhere, fail the run.
    failed = [result['error'] for row in rounds for group in row.values()
              for name, result in group.items() if 'error' in result and (
                  CONTENDERS[name][0] == 'ours'
                  or 'read back' in result['error']
                  or 'served' in result['error'])]
    for error in failed:
        print(error, file=sys.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
