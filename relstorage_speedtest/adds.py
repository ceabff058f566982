"""Adds: zodbshootout's add -- one transaction of many new small objects --
from several processes at once, on this storage, RelStorage 4.3 (in a
virtualenv of its own) and ZODB alone (a MappingStorage in each process:
what ZODB itself spends on an add, which no storage can save), the
contenders taking turns round after round.

    python -m relstorage_speedtest.adds [--processes 2] [--objects 1000]
        [--commits 30] [--rounds 3] [--databases postgresql,mysql]
        [--modes hf,hp] [--other-venv [DIR]] [--json FILE]

The processes of a contender start together once each has opened its
database and committed two adds untimed; each then commits ``--commits``
adds. Reported, per add: milliseconds (the mean of the processes' means),
the CPU milliseconds of the adding process, and those of the database
servers of this machine meanwhile (PostgreSQL's and MariaDB's processes
in /proc, shared among the processes' adds, so nothing else should use
them during a run); the median of the rounds with their range; and, round
by round, RelStorage 4.3's time over ours and ZODB alone's time over ours
(the share of an add that is ZODB's own). Each side runs the same script
(relstorage_speedtest/addside.py) with its own Python. Not a test:
nothing here asserts on time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from relstorage.helptext import help_text

from .bulk import MODELESS
from .bulk import add_contender_args
from .bulk import fmt
from .bulk import ratios
from .bulk import server_cpu
from .bulk import server_cpu_since
from .bulk import spread
from .bulk import take_turns
from .bulk import write_json
from .pack import PackBenchError

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'addside.py')
#: Seconds the processes of a contender have to open their database and
#: say they are ready.
READY_TIMEOUT = 300
BASELINE = MODELESS['mappingstorage']


def adds_at_once(run, args, workdir, script):
    """One round of *run*: its processes adding at once. Returns ``{'ms',
    'cpu_ms', 'server_ms'}`` per add."""
    spec = {'section': run.section(workdir), 'processes': args.processes,
            'objects': args.objects, 'commits': args.commits,
            'state_bytes': args.state_bytes, 'warmup': 2,
            'ready': os.path.join(workdir, 'ready-%d'),
            'go': os.path.join(workdir, 'go')}
    for name in os.listdir(workdir):
        if name == 'go' or name.startswith('ready-'):
            os.remove(os.path.join(workdir, name))
    run.side.run(script, 'prepare', spec, workdir)
    procs = [subprocess.Popen(
        [run.side.python, script, 'add',
         json.dumps(dict(spec, number=number))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=workdir, env=run.side.env) for number in range(args.processes)]
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(os.path.exists(spec['ready'] % number)
                      for number in range(args.processes)):
            failed = [p for p in procs if p.poll() is not None]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        server = server_cpu()
        with open(spec['go'], 'w'):
            pass
        outputs = [p.communicate(timeout=READY_TIMEOUT) for p in procs]
        server = server_cpu_since(server)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    figures = []
    for p, (out, err) in zip(procs, outputs):
        if p.returncode:
            raise PackBenchError('%s: an adding process failed:\n%s' % (
                run.label, (err or out)[-3000:]))
        figures.append(json.loads(out.strip().splitlines()[-1]))
    if any(f['count'] != args.objects for f in figures):
        raise PackBenchError('%s: a process read back %s objects, not %d' % (
            run.label, [f['count'] for f in figures], args.objects))
    adds = args.processes * args.commits
    return {'ms': statistics.mean(
        [statistics.mean(f['seconds']) * 1000 for f in figures]),
        'cpu_ms': sum(f['cpu'] for f in figures) / adds * 1000,
        'server_ms': server / adds * 1000}


def summarise(rounds, runs):
    """Per contender: the median and range of the rounds of each figure,
    and (ours) RelStorage 4.3's time over ours and ZODB alone's over ours,
    round by round."""
    table = []
    for run in runs:
        done = [r[run.label] for r in rounds if run.label in r]
        if not done:
            continue
        line = {'label': run.label}
        for name in ('ms', 'cpu_ms', 'server_ms'):
            line[name] = spread([d[name] for d in done])
        if run.side.name == 'ours' and run.mode is not None:
            for key, other in (('rs4_vs_this', run.rs4_label),
                               ('zodb_share', BASELINE)):
                versus = ratios(rounds, other, run.label,
                                lambda figures: figures['ms'])
                if versus:
                    line[key] = versus
        table.append(line)
    return table


def print_table(table, file=None):
    print('%-24s %-22s %-20s %-20s %-13s %s' % (
        'contender', 'ms/add med [range]', 'RS4.3/this',
        'ZODB alone/this', 'CPU ms/add', 'server CPU ms/add'), file=file)
    for line in table:
        print('%-24s %-22s %-20s %-20s %-13.2f %.2f' % (
            line['label'], fmt(line['ms']), fmt(line.get('rs4_vs_this'), 'x'),
            fmt(line.get('zodb_share'), 'x'), line['cpu_ms'][0],
            line['server_ms'][0]), file=file)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.adds',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--processes', type=int, default=2,
        help='processes adding at once (%(default)s)')
    add('--objects', type=int, default=1000,
        help='new objects per add (%(default)s)')
    add('--commits', type=int, default=30,
        help='timed adds per process (%(default)s)')
    add('--state-bytes', type=int, default=128,
        help='bytes of data in each object (%(default)s)')
    add_contender_args(parser, rounds=3, databases='postgresql,mysql',
                       other_databases='sqlite,postgresql,mysql')
    add('--no-baseline', dest='baseline', action='store_false',
        help='leave out ZODB alone')
    args = parser.parse_args(argv)
    if 'filestorage' in args.databases.split(','):
        parser.error('FileStorage is one process only')
    if args.processes < 1 or args.commits < 1 or args.objects < 1:
        parser.error('--processes, --commits and --objects must be >= 1')
    if args.baseline:
        args.databases = 'mappingstorage,' + args.databases
    return args


def main(argv=None):
    args = parse_args(argv)

    def show(number, run, figures):
        print('round %d %-24s %.2f ms an add, CPU %.2f ms, server CPU '
              '%.2f ms' % (number, run.label, figures['ms'],
                           figures['cpu_ms'], figures['server_ms']),
              flush=True)
    turns = take_turns(args, SCRIPT, lambda run, workdir, script:
                       adds_at_once(run, args, workdir, script), show)
    if turns is None:
        return 1
    other, runs, rounds = turns
    table = summarise(rounds, runs)
    print('\n%d processes, each %d adds of %d objects, %d rounds: per add, '
          'medians of the rounds [min-max]; ratios round by round'
          % (args.processes, args.commits, args.objects, args.rounds))
    print_table(table)
    write_json(args, other, rounds, table)
    return 0


if __name__ == '__main__':
    sys.exit(main())
