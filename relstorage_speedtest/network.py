"""Network benchmark: what a site's work costs when the database is a
network away, in time and in round trips, on this storage, RelStorage 4.3
(in a virtualenv of its own) and ZEO 6.2 (FileStorage behind a ZEO
server), the contenders taking turns round after round.

    python -m relstorage_speedtest.network [--folders 20] [--items 50]
        [--delays 0,1] [--rounds 3] [--databases zeo,postgresql,mysql]
        [--modes hp] [--other-venv [DIR]] [--json FILE]

Each contender, in each round, gets an empty database filled with a site's
content (``--folders`` folders of ``--items`` items, each item with two
persistent sub-objects; see relstorage_speedtest/networkside.py). Then,
for each delay of ``--delays`` (milliseconds added to every message the
storage's process sends its server, by a proxy between the two:
relstorage.testing.slow_proxy), fresh processes measure page views (each
folder and its items' titles, through cold caches, then all cached), a
traversal of every item and its sub-objects, ``Connection.prefetch`` of
500 items, and a ``record_iternext`` walk. The proxy counts round trips
(an answer of the server to what the client sent since it last spoke),
which a loaded machine cannot blur as it blurs time. Storages run with
their default options; ZODB's connection cache holds 5,000 objects. The
order of the contenders is reversed every other round (A B, B A).

Reported per work and delay: the median of the rounds with their range,
of the seconds and round trips per unit (a page view, an object; the
whole work for the prefetch and the walk), and the ratios, round by round,
of ZEO's and RelStorage 4.3's round trips and times to ours. Every
contender must read the same data. Not a test: nothing here asserts on
time.
"""
import argparse
import os
import re
import sys

import relstorage
from relstorage.helptext import help_text

from . import bulk
from .contenders import ZEOServer
from .pack import PackBenchError

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'networkside.py')
ZEO = 'zeo'
#: The measured work: the side's action, and the phases it reports.
WORK = (('pages', ('page cold', 'page cached')),
        ('traverse', ('traversal',)),
        ('prefetch', ('prefetch 500',)),
        ('iternext', ('record_iternext',)))
PHASES = [phase for _, phases in WORK for phase in phases]
#: What the ratios compare ours with.
OTHERS = ('ZEO 6.2', 'RS 4.3')


def _proxy_command():
    """How a side starts the proxy: this package's Python and module,
    found whatever the side's own environment."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(
        relstorage.__file__)))
    return ['env', 'PYTHONPATH=' + root, sys.executable, '-m',
            'relstorage.testing.slow_proxy']


def _through_proxy(section):
    """*section* reaching its server on 127.0.0.1 at the port PROXYPORT
    (the side fills it in), and the ``(host, port)`` it reached before."""
    dsn = re.search(r'\bhost=(\S+) port=(\d+)', section)
    if dsn:
        return (section[:dsn.start()] + 'host=127.0.0.1 port=PROXYPORT'
                + section[dsn.end():]), (dsn.group(1), int(dsn.group(2)))
    host = re.search(r'^ host (\S+)$', section, re.M)
    port = re.search(r'^ port (\d+)$', section, re.M)
    if host and port:
        section = section.replace(host.group(0), ' host 127.0.0.1')
        return (section.replace(port.group(0), ' port PROXYPORT'),
                (host.group(1), int(port.group(1))))
    raise PackBenchError('no host and port to reach through the proxy in '
                         '%r' % section)


def once(args, run, workdir, script):
    """Fill, then each work at each delay: ``{delay: {phase: {seconds,
    trips, units}}}``, with the digests of what was read."""
    zeo = None
    spec = {'folders': args.folders, 'items': args.items,
            'proxy': _proxy_command(),
            'imports': run.side.imports if run.database != ZEO else ''}
    try:
        if run.database == ZEO:
            zeo = ZEOServer()
            spec['section'] = ('<zeoclient>\n server 127.0.0.1:%d\n'
                               '</zeoclient>' % zeo.port)
            spec['proxied'] = ('<zeoclient>\n server 127.0.0.1:PROXYPORT\n'
                               '</zeoclient>')
            spec['target'] = ['127.0.0.1', zeo.port]
        else:
            spec['section'] = run.section(workdir)
            spec['proxied'], spec['target'] = _through_proxy(
                spec['section'])
        run.side.run(script, 'fill', spec, workdir)
        found = {'digests': {}}
        for delay in args.delays:
            spec['delay'] = delay / 1000.0
            at = found[str(delay)] = {}
            for action, _ in WORK:
                figures = run.side.run(script, action, spec, workdir)
                at.update(figures['phases'])
                found['digests'][action] = figures['digest']
        return found
    finally:
        if zeo is not None:
            zeo.stop()


#: The phases reported whole (their count is the point), not per unit.
WHOLE = ('prefetch 500', 'record_iternext')


def per_unit(phase, figures):
    """Seconds and round trips of *figures* per unit of work (the whole
    work for those of WHOLE)."""
    units = 1 if phase in WHOLE else max(1, figures['units'])
    return figures['seconds'] / units, figures['trips'] / units


def summarise(args, rounds, runs):
    table = []
    for run in runs:
        done = [r[run.label] for r in rounds if run.label in r]
        if not done:
            continue
        for delay in args.delays:
            key = str(delay)
            line = {'label': run.label, 'delay': delay, 'phases': {}}
            for phase in PHASES:
                values = [per_unit(phase, d[key][phase]) for d in done]
                entry = line['phases'][phase] = {
                    'seconds': bulk.spread([v[0] for v in values]),
                    'trips': bulk.spread([v[1] for v in values])}
                if run.side.name == 'ours' and run.mode is not None:
                    for other in OTHERS:
                        label = (bulk.MODELESS[ZEO] if other == OTHERS[0]
                                 else run.rs4_label)
                        entry[other] = _ratios(rounds, label, run.label,
                                               key, phase)
            table.append(line)
    return table


def _ratios(rounds, other, ours, key, phase):
    """Round by round, the other's round trips and seconds over ours:
    ``{'trips': (median, low, high), 'seconds': ...}`` or None."""
    pairs = [(per_unit(phase, r[other][key][phase]),
              per_unit(phase, r[ours][key][phase]))
             for r in rounds if other in r and ours in r]
    if not pairs:
        return None
    return {'seconds': bulk.spread([a[0] / b[0] for a, b in pairs]),
            'trips': bulk.spread([a[1] / max(b[1], 1e-9)
                                  for a, b in pairs])}


def print_table(table, file=None):
    file = file or sys.stdout
    for phase in PHASES:
        unit = {'page cold': 'page view', 'page cached': 'page view',
                'traversal': 'object', 'record_iternext': 'walk',
                'prefetch 500': 'prefetch'}[phase]
        print('\n%s: per %s, median [min-max] of the rounds' % (phase, unit),
              file=file)
        print('%-22s %5s %-24s %-22s %-26s %s' % (
            'contender', 'delay', 'ms', 'round trips',
            'ZEO/this: trips, time', 'RS4.3/this: trips, time'),
            file=file)
        for line in table:
            entry = line['phases'][phase]
            seconds = entry['seconds']
            print('%-22s %3sms %-24s %-22s %-26s %s' % (
                line['label'], line['delay'],
                bulk.fmt(tuple(s * 1000 for s in seconds), digits=3),
                bulk.fmt(entry['trips'], digits=1),
                _pair(entry.get('ZEO 6.2')), _pair(entry.get('RS 4.3'))),
                file=file)


def _pair(ratios):
    if not ratios:
        return '-'
    return '%.2fx, %.2fx' % (ratios['trips'][0], ratios['seconds'][0])


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.network',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--folders', type=int, default=20,
        help='folders, each a page view (%(default)s)')
    add('--items', type=int, default=50,
        help='items per folder (%(default)s)')
    add('--delays', default='0,1',
        help='milliseconds added to each message, comma separated '
             '(%(default)s)')
    bulk.add_contender_args(parser, rounds=3,
                            databases='zeo,postgresql,mysql',
                            other_databases='postgresql,mysql')
    parser.set_defaults(modes='hp')
    args = parser.parse_args(argv)
    try:
        args.delays = [float(d) if '.' in d else int(d)
                       for d in args.delays.split(',')]
    except ValueError:
        parser.error('--delays: milliseconds, comma separated: %r'
                     % args.delays)
    if 'sqlite' in args.databases.split(','):
        parser.error('--databases: SQLite is no network away')
    return args


def main(argv=None):
    args = parse_args(argv)

    def show(number, run, figures):
        for delay in args.delays:
            at = figures[str(delay)]
            print('round %d %-22s %sms: %s' % (
                number, run.label, delay, ', '.join(
                    '%s %.3f s %d trips' % (phase, at[phase]['seconds'],
                                            at[phase]['trips'])
                    for phase in PHASES)), flush=True)
    turns = bulk.take_turns(
        args, SCRIPT,
        lambda run, workdir, script: once(args, run, workdir, script), show)
    if turns is None:
        return 1
    other, runs, rounds = turns
    table = summarise(args, rounds, runs)
    print('\n%d folders of %d items, %d rounds; ratios round by round'
          % (args.folders, args.items, args.rounds))
    print_table(table)
    bulk.write_json(args, other, rounds, table)
    digests = {}
    for row in rounds:
        for figures in row.values():
            for action, digest in figures['digests'].items():
                digests.setdefault(action, set()).add(digest)
    differ = sorted(action for action, found in digests.items()
                    if len(found) != 1 and action != 'iternext')
    if differ:
        print('contenders read different data in: %s' % ', '.join(differ),
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
