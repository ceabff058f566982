"""Hot reads: the storage's own part of reading an object its cache holds,
and the whole hot read (ZODB's unpickling with it), on this storage and on
RelStorage 4.3 (in a virtualenv of its own), the contenders taking turns
round after round.

    python -m relstorage_speedtest.hot [--objects 1000] [--times 300]
        [--rounds 3] [--databases sqlite] [--modes hf,hp]
        [--other-venv [DIR]] [--json FILE]

Each contender commits ``--objects`` small objects, then reads all of them
``--times`` times over from a ZODB connection, a few passes each (the
median pass counts): ``load`` is the connection's storage instance
serving them from its cache, ``read`` the connection activating them
after its own cache let them go. No database server is asked while it is
timed, so SQLite is the default. Each side runs the same script
(relstorage_speedtest/hotside.py) with its own Python, in a process of its
own per round; the order of the contenders is reversed every other round.
Reported: microseconds per object, the median of the rounds with their
range, and RelStorage 4.3's time over ours, round by round. Not a test:
nothing here asserts on time.
"""
import argparse
import os
import sys

from relstorage.helptext import help_text

from .bulk import add_contender_args
from .bulk import fmt
from .bulk import ratios
from .bulk import spread
from .bulk import take_turns
from .bulk import write_json

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'hotside.py')
#: What is timed, per object.
KINDS = ('load', 'read')


def summarise(rounds, runs):
    """Per contender and kind: the median and range of the rounds, and
    (ours) RelStorage 4.3's figure over ours, round by round."""
    table = []
    for run in runs:
        done = [r[run.label] for r in rounds if run.label in r]
        if not done:
            continue
        line = {'label': run.label}
        for kind in KINDS:
            line[kind] = spread([d[kind][0] for d in done])
            versus = ratios(rounds, run.rs4_label, run.label,
                            lambda figures, kind=kind: figures[kind][0])
            if run.side.name == 'ours' and versus:
                line['rs4_vs_this_' + kind] = versus
        table.append(line)
    return table


def _fmt(triple, unit=''):
    return fmt(triple, unit, digits=3)


def print_table(table, file=None):
    print('%-24s %-26s %-24s %-26s %s' % (
        'contender', 'load us med [range]', 'RS4.3/this',
        'read us med [range]', 'RS4.3/this'), file=file)
    for line in table:
        print('%-24s %-26s %-24s %-26s %s' % (
            line['label'], _fmt(line['load']),
            _fmt(line.get('rs4_vs_this_load'), 'x'), _fmt(line['read']),
            _fmt(line.get('rs4_vs_this_read'), 'x')), file=file)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.hot',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--objects', type=int, default=1000,
        help='objects committed and read (%(default)s)')
    add('--times', type=int, default=300,
        help='reads of every object per pass (%(default)s)')
    add('--passes', type=int, default=7,
        help='timed passes per round, the median counts (%(default)s)')
    add_contender_args(parser, rounds=3, databases='sqlite',
                       other_databases='sqlite,postgresql,mysql')
    args = parser.parse_args(argv)
    if 'filestorage' in args.databases.split(','):
        parser.error('FileStorage has no cache of its own to time')
    return args


def main(argv=None):
    args = parse_args(argv)

    def once(run, workdir, script):
        spec = {'section': run.section(workdir), 'objects': args.objects,
                'times': args.times, 'repeats': args.passes}
        return run.side.run(script, 'hot', spec, workdir)

    def show(number, run, figures):
        print('round %d %-24s load %.3f us, read %.3f us' % (
            number, run.label, figures['load'][0], figures['read'][0]),
              flush=True)
    turns = take_turns(args, SCRIPT, once, show)
    if turns is None:
        return 1
    other, runs, rounds = turns
    table = summarise(rounds, runs)
    print('\n%d objects read %d times, %d rounds: microseconds per object, '
          'medians of the rounds [min-max]; ratios round by round'
          % (args.objects, args.times, args.rounds))
    print_table(table)
    write_json(args, other, rounds, table)
    return 0


if __name__ == '__main__':
    sys.exit(main())
