"""Bulk benchmark: a Zope-style script with default storage options --
insert objects into a BTree in 20 commits, modify half of them twice,
delete half, read all back in the same process, then read all in a fresh
process -- on FileStorage, this storage and RelStorage 4.3 (in a virtualenv
of its own), the contenders taking turns round after round.

    python -m relstorage_speedtest.bulk [--objects 100000] [--rounds 2]
        [--databases filestorage,sqlite,postgresql,mysql] [--modes hf,hp]
        [--other-venv [DIR]] [--reindex] [--migrate] [--nested]
        [--state-bytes 0] [--json FILE]

Every storage runs with its default options; ZODB's connection cache holds
``--connection-cache`` objects (5,000, as Zope's ``zodb_db``). Variations a
site runs: ``--reindex`` touches every remaining object once more,
``--migrate`` reads everything and writes it to a new tree, ``--nested``
keeps the objects in BTrees of BTrees, ``--state-bytes`` makes each state
larger. Each side runs the same script (relstorage_speedtest/bulkside.py)
with its own Python. This side uses the ``main`` test databases, RelStorage
4.3 the ``misc`` one (each emptied first; SQLite and FileStorage in a
temporary directory); with RelStorage 4.3 on MariaDB its processes take the
server for MySQL 5.7 (see othervenv). The order of the contenders is
reversed every other round (A B, B A). Reported: the median of the rounds
with their range, per phase and in total, and the ratios, round by round, of
each time to FileStorage's and of RelStorage 4.3's to ours; and where the
time went: the CPU seconds of the script's processes, and those of the
database servers of this machine meanwhile (PostgreSQL's and MariaDB's
processes in /proc, so nothing else should use them during a run). Every
contender must read back the same objects. Not a test: nothing here asserts
on time.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

from relstorage.helptext import help_text
from relstorage.testing.dbs import empty_database

from . import othervenv
from .convert import _adapter_section
from .pack import PackBenchError
from .pack import our_side
from .pack import other_side

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'bulkside.py')
MODE_NAMES = {'hf': False, 'hp': True}
#: The labels of the storages that have no history mode (nor another
#: side), by database name.
MODELESS = {'filestorage': 'FileStorage', 'mappingstorage': 'ZODB alone',
            # (FileStorage behind a ZEO server: relstorage_speedtest.network)
            'zeo': 'ZEO 6.2'}


class Run:
    """One contender: a side (whose Python runs the script), a database
    and a history mode (None for those of MODELESS)."""

    def __init__(self, side, database, mode):
        self.side = side
        self.database = database
        self.mode = mode

    @property
    def label(self):
        if self.database in MODELESS:
            return MODELESS[self.database]
        if self.side.name == 'other':
            return self.rs4_label
        return 'ours %s %s' % (self.database, self.mode)

    @property
    def rs4_label(self):
        """The label of RelStorage 4.3's run on the same database in the
        same mode."""
        return 'RS 4.3 %s %s' % (self.database, self.mode)

    def section(self, workdir):
        """The storage section, for an empty database."""
        if self.database == 'filestorage':
            path = tempfile.mkdtemp(prefix='fs-', dir=workdir)
            return '<filestorage>\n path %s\n</filestorage>' % (
                os.path.join(path, 'Data.fs'))
        if self.database == 'mappingstorage':
            return '<mappingstorage>\n</mappingstorage>'
        if self.database == 'zeo':
            raise PackBenchError('ZEO runs in relstorage_speedtest.network '
                                 'only (which starts its server)')
        keep_history = MODE_NAMES[self.mode]
        if self.database == 'sqlite':
            adapter = '<sqlite3>\n data-dir %s\n</sqlite3>' % (
                tempfile.mkdtemp(prefix='sqlite-', dir=workdir))
        else:
            empty_database(self.database, keep_history, self.side.which)
            adapter = _adapter_section(self.database, keep_history,
                                       self.side.which)
        return '<relstorage>\n keep-history %s\n%s\n</relstorage>' % (
            'true' if keep_history else 'false', adapter)

    def once(self, args, workdir, script):
        """The work process, then a fresh reader: {'phases': {name:
        seconds}, 'total', 'count', 'digest', 'peak_mb'}."""
        spec = {'section': self.section(workdir), 'objects': args.objects,
                'commits': args.commits, 'reindex': args.reindex,
                'migrate': args.migrate, 'nested': args.nested,
                'state_bytes': args.state_bytes,
                'connection_cache': args.connection_cache}
        server = server_cpu()
        work = self.side.run(script, 'work', spec, workdir)
        fresh = self.side.run(script, 'read', spec, workdir)
        server = server_cpu_since(server)
        if (work['count'], work['digest']) != (fresh['count'],
                                               fresh['digest']):
            raise PackBenchError('%s: the fresh process read other data '
                                 'than the working one' % self.label)
        phases = dict(work['phases'] + fresh['phases'])
        return {'phases': phases, 'total': sum(phases.values()),
                'cpu': work['cpu'] + fresh['cpu'], 'server_cpu': server,
                'count': work['count'], 'digest': work['digest'],
                'peak_mb': max(work['peak_mb'], fresh['peak_mb'])}


#: The process names of the database servers whose CPU time is counted.
SERVERS = ('postgres', 'mariadbd', 'mysqld')


def server_cpu():
    """What the database servers of this machine have used so far: the
    CPU seconds of each of their processes that /proc shows, with those
    of the processes it started that have ended (PostgreSQL's sessions,
    each a process that ends with its connection), by process (its pid
    and start time); empty without /proc. See server_cpu_since()."""
    used = {}
    try:
        pids = [pid for pid in os.listdir('/proc') if pid.isdigit()]
    except OSError:
        return used
    for pid in pids:
        try:
            with open('/proc/%s/comm' % pid) as f:
                if f.read().strip() not in SERVERS:
                    continue
            with open('/proc/%s/stat' % pid) as f:
                # After the parenthesised name: utime, stime, cutime,
                # cstime, then (six on) the start time.
                fields = f.read().rsplit(')', 1)[1].split()
            used[pid, fields[19]] = sum(int(field)
                                        for field in fields[11:15])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return used


def server_cpu_since(before):
    """The CPU seconds the database servers have used since *before* (a
    server_cpu()): what each process still running used meanwhile, all
    of what a new one used. A process that ended meanwhile is not
    counted, unless its parent (a server's process) reaped it: the
    servers of other runs that stop meanwhile take nothing away."""
    ticks = sum(used - before.get(key, 0)
                for key, used in server_cpu().items())
    return ticks / os.sysconf('SC_CLK_TCK')


def contenders(args, other_venv):
    ours = our_side()
    databases = args.databases.split(',')
    modes = args.modes.split(',')
    unknown = set(modes) - set(MODE_NAMES)
    if unknown:
        raise SystemExit('unknown modes: %s' % ', '.join(sorted(unknown)))
    runs = []
    for database in databases:
        if database in MODELESS:
            runs.append(Run(ours, database, None))
            continue
        for mode in modes:
            runs.append(Run(ours, database, mode))
            if other_venv and database in args.other_databases.split(','):
                runs.append(Run(other_side(other_venv, database), database,
                                mode))
    return runs


def ratios(rounds, label, base, value=lambda figures: figures['total']):
    """Median and range of *label*'s total (or other *value* of its
    figures) over *base*'s, round by round; None if no round has both."""
    values = [value(r[label]) / value(r[base]) for r in rounds
              if label in r and base in r]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def spread(values):
    return statistics.median(values), min(values), max(values)


def summarise(rounds, runs):
    """Per contender: each phase's and the total's median and range, and
    its ratios to FileStorage and (ours) RelStorage 4.3's to it."""
    table = []
    for run in runs:
        done = [r[run.label] for r in rounds if run.label in r]
        if not done:
            continue
        line = {'label': run.label, 'total': spread(
            [d['total'] for d in done]), 'phases': {
            name: spread([d['phases'][name] for d in done])
            for name in done[0]['phases']},
            'peak_mb': spread([d['peak_mb'] for d in done]),
            'cpu': spread([d['cpu'] for d in done]),
            'server_cpu': spread([d['server_cpu'] for d in done]),
            'vs_filestorage': ratios(rounds, run.label,
                                     MODELESS['filestorage'])}
        if run.side.name == 'ours' and run.mode is not None:
            line['rs4_vs_this'] = ratios(rounds, run.rs4_label, run.label)
        table.append(line)
    return table


def fmt(triple, unit='', digits=2):
    """A ``(median, low, high)`` as ``median[unit] [low-high]``."""
    if not triple:
        return '-'
    return '%.*f%s [%.*f-%.*f]' % (digits, triple[0], unit, digits,
                                   triple[1], digits, triple[2])


def print_table(table, file=None):
    file = file or sys.stdout
    phases = list(table[0]['phases']) if table else []
    print('%-26s %-20s %-20s %-20s %-13s %s' % (
        'contender', 'total s med [range]', 'x FileStorage', 'RS4.3/this',
        'CPU s: own, server', 'phases, median s'), file=file)
    for line in table:
        print('%-26s %-20s %-20s %-20s %-13s %s' % (
            line['label'], fmt(line['total']),
            fmt(line['vs_filestorage'], 'x'),
            fmt(line.get('rs4_vs_this'), 'x'),
            '%.2f, %.2f' % (line['cpu'][0], line['server_cpu'][0]),
            '  '.join('%s %.2f' % (name, line['phases'][name][0])
                      for name in phases if name in line['phases'])),
            file=file)


def add_contender_args(parser, rounds, databases, other_databases):
    """The options that choose the contenders and the rounds (see
    contenders() and take_turns()), and ``--json``."""
    add = parser.add_argument
    add('--rounds', type=int, default=rounds,
        help='rounds, the order reversed in every other (%(default)s)')
    add('--databases', default=databases,
        help='comma separated (%(default)s)')
    add('--modes', default='hf,hp',
        help='history-free (hf), history-preserving (hp): %(default)s')
    add('--other-venv', nargs='?', const='', metavar='DIR',
        help='also run RelStorage 4.3 from this virtualenv (made when '
             'missing; default %s)' % othervenv.DEFAULT_DIR)
    add('--other-databases', default=other_databases,
        help='where RelStorage 4.3 runs (%(default)s)')
    add('--json', help='write every figure to this file')


def take_turns(args, source, once, show):
    """Run the contenders that *args* name, round after round, the order
    reversed every other round: *once(run, workdir, script)* gives one
    contender's figures for a round, its script being a copy of *source*
    in *workdir*, a directory outside this checkout; *show(number, run,
    figures)* prints them. Returns ``(other, runs, rounds)``: what the
    other side's virtualenv holds (or None), the contenders, and per
    round ``{label: figures}``; None if a side failed (said on
    stderr)."""
    workdir = othervenv.neutral_dir()
    # The copy's directory, not this checkout, comes first on the child's
    # sys.path.
    script = shutil.copy(source, workdir)
    other = None
    rounds = []
    try:
        venv = None
        if args.other_venv is not None:
            venv = othervenv.ensure(args.other_venv or None)
            other = othervenv.check(venv)
            print('other: RelStorage %s from %s' % (
                other['version'], other['path']), flush=True)
        runs = contenders(args, venv)
        for number in range(args.rounds):
            order = runs if number % 2 == 0 else runs[::-1]
            row = {}
            for run in order:
                row[run.label] = figures = once(run, workdir, script)
                show(number + 1, run, figures)
            rounds.append(row)
    except (PackBenchError, othervenv.OtherVenvError) as e:
        print(e, file=sys.stderr)
        return None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return other, runs, rounds


def write_json(args, other, rounds, table):
    """Every figure of a take_turns() run, its summary *table* and what it
    ran on, into the file ``--json`` names (if it does)."""
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'args': vars(args), 'other': other, 'rounds': rounds,
                       'summary': table, 'cpus': os.cpu_count(),
                       'python': sys.version.split()[0]}, f, indent=1)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.bulk',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--objects', type=int, default=100000,
        help='objects inserted (%(default)s)')
    add('--commits', type=int, default=20,
        help='transactions per phase (%(default)s)')
    add_contender_args(parser, rounds=2,
                       databases='filestorage,sqlite,postgresql,mysql',
                       other_databases='postgresql,mysql')
    add('--reindex', action='store_true',
        help='touch every remaining object once more')
    add('--migrate', action='store_true',
        help='read everything and write it to a new tree')
    add('--nested', action='store_true', help='BTrees of BTrees')
    add('--state-bytes', type=int, default=0,
        help='extra bytes in each state (%(default)s)')
    add('--connection-cache', type=int, default=5000,
        help="ZODB's connection cache, objects (%(default)s)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    def show(number, run, figures):
        print('round %d %-24s total %.2f s: %s' % (
            number, run.label, figures['total'], ', '.join(
                '%s %.2f' % item for item in figures['phases'].items())),
              flush=True)
    turns = take_turns(args, SCRIPT, lambda run, workdir, script: run.once(
        args, workdir, script), show)
    if turns is None:
        return 1
    other, runs, rounds = turns
    read_back = {(r['count'], r['digest']) for row in rounds
                 for r in row.values()}
    table = summarise(rounds, runs)
    print('\n%d objects, %d rounds: medians of the rounds [min-max]; ratios '
          'round by round' % (args.objects, args.rounds))
    print_table(table)
    write_json(args, other, rounds, table)
    if len(read_back) != 1:
        print('contenders read back different data: %s' % sorted(read_back),
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
