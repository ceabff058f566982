"""Record iteration benchmark: how long a walk over every current record
with ``record_iternext`` takes (what zodbverify and ``zodbupdate`` do to
move a site to Python 3), and one over every transaction with
``iterator()``, on FileStorage, this storage and RelStorage 4.3 (in a
virtualenv of its own), the contenders taking turns round after round.

    python -m relstorage_speedtest.iternext [--objects 70000] [--rounds 3]
        [--databases filestorage,sqlite,postgresql,mysql] [--modes hp]
        [--other-venv [DIR]] [--json FILE]

Each contender, in each round, fills an empty database with ``--objects``
mappings of a few hundred bytes in a BTree (``--commits`` transactions;
its buckets are objects too), then a fresh process opens the storage alone
and walks it. Each side runs the same script
(relstorage_speedtest/iternextside.py) with its own Python; databases as in
relstorage_speedtest.bulk. The order of the contenders is reversed every
other round (A B, B A). Reported per walk: the median of the rounds with
their range, and the ratios, round by round, to FileStorage's time and of
RelStorage 4.3's to ours; the CPU seconds of the walking process and of the
database servers meanwhile. Every contender must walk as many records. Not
a test: nothing here asserts on time.
"""
import argparse
import os
import sys
import time

from relstorage.helptext import help_text

from . import bulk

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'iternextside.py')
WALKS = ('record_iternext', 'iterator')


def once(args, run, workdir, script):
    """Fill, then walk in a fresh process: the walk's figures, with the
    fill's seconds."""
    spec = {'section': run.section(workdir), 'objects': args.objects,
            'commits': args.commits}
    started = time.perf_counter()
    run.side.run(script, 'fill', spec, workdir)
    fill = time.perf_counter() - started
    server = bulk.server_cpu()
    figures = run.side.run(script, 'walk', spec, workdir)
    figures['server_cpu'] = bulk.server_cpu_since(server)
    figures['phases'] = dict(figures['phases'])
    figures['total'] = sum(figures['phases'].values())
    figures['fill'] = fill
    return figures


def summarise(rounds, runs):
    """Per contender and walk: median and range of the rounds, and the
    ratios to FileStorage and (ours) of RelStorage 4.3's to it."""
    table = []
    for run in runs:
        done = [r[run.label] for r in rounds if run.label in r]
        if not done:
            continue
        line = {'label': run.label, 'records': done[0]['count'],
                'cpu': bulk.spread([d['cpu'] for d in done]),
                'server_cpu': bulk.spread([d['server_cpu'] for d in done]),
                'fill': bulk.spread([d['fill'] for d in done])}
        for walk in WALKS:
            def seconds(figures, walk=walk):
                return figures['phases'][walk]
            line[walk] = {
                'seconds': bulk.spread([seconds(d) for d in done]),
                'vs_filestorage': bulk.ratios(
                    rounds, run.label, bulk.MODELESS['filestorage'],
                    seconds)}
            if run.side.name == 'ours' and run.mode is not None:
                line[walk]['rs4_vs_this'] = bulk.ratios(
                    rounds, run.rs4_label, run.label, seconds)
        table.append(line)
    return table


def print_table(table, file=None):
    file = file or sys.stdout
    for walk in WALKS:
        print('\n%s: seconds, median [min-max] of the rounds' % walk,
              file=file)
        print('%-22s %8s %-22s %-22s %-22s %s' % (
            'contender', 'records', 'seconds', 'x FileStorage',
            'RS4.3/this', 'CPU s: walk, server; fill s'), file=file)
        for line in table:
            figures = line[walk]
            print('%-22s %8d %-22s %-22s %-22s %.2f, %.2f; %.1f' % (
                line['label'], line['records'],
                bulk.fmt(figures['seconds'], digits=3),
                bulk.fmt(figures['vs_filestorage'], 'x'),
                bulk.fmt(figures.get('rs4_vs_this'), 'x'),
                line['cpu'][0], line['server_cpu'][0], line['fill'][0]),
                file=file)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.iternext',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--objects', type=int, default=70000,
        help='mappings written (%(default)s), besides the buckets')
    add('--commits', type=int, default=20,
        help='transactions that write them (%(default)s)')
    bulk.add_contender_args(parser, rounds=3,
                            databases='filestorage,sqlite,postgresql,mysql',
                            other_databases='sqlite,postgresql,mysql')
    parser.set_defaults(modes='hp')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    def show(number, run, figures):
        print('round %d %-22s %d records: %s (fill %.1f s)' % (
            number, run.label, figures['count'], ', '.join(
                '%s %.3f s' % item for item in figures['phases'].items()),
            figures['fill']), flush=True)
    turns = bulk.take_turns(
        args, SCRIPT,
        lambda run, workdir, script: once(args, run, workdir, script), show)
    if turns is None:
        return 1
    other, runs, rounds = turns
    table = summarise(rounds, runs)
    print('\n%d mappings, %d rounds; ratios round by round'
          % (args.objects, args.rounds))
    print_table(table)
    bulk.write_json(args, other, rounds, table)
    counts = {r['count'] for row in rounds for r in row.values()}
    if len(counts) != 1:
        print('contenders walked different numbers of records: %s'
              % sorted(counts), file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
