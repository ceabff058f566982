"""``relstorage-speedtest``: how fast each ``<zodb NAME>`` section of a config
file (RelStorage with any adapter, FileStorage, ZEO) writes and reads objects,
alone and with concurrent processes, how the cost of a commit changes as the
database grows, and what the connection (TCP or unix socket, local cache on or
off) changes. Without a config file it measures the embedded SQLite storage, in
both history modes, in a temporary directory.

The databases named in the config file are emptied first.
"""
import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from queue import Empty

from relstorage.helptext import help_text

from . import contenders as contenders_mod
from . import report
from . import workloads
from .workloads import SpeedTestError

__all__ = ['main', 'SpeedTestError']


def _child(queue, func, args, kwargs):
    try:
        queue.put(('ok', func(*args, **kwargs)))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent
        barrier = kwargs.get('barrier')
        if barrier is not None:
            barrier.abort()  # the others stop waiting for this one
        queue.put(('error', '%s: %s' % (type(e).__name__, e)))


#: Commits timed until the replica shows them (--ro-replica-conf).
LAG_SAMPLES = 30


def cost(objects, transactions, level=1, commits=None):
    """A rough prior of a step's seconds, so that progress is told by work
    rather than by steps (a 10,000-object step takes 100 times a 100-object
    one; a growth step, thousands of commits): starting the worker
    processes, then per commit and per object, with *level* processes
    sharing the CPUs."""
    share = level / min(level, os.cpu_count() or 1)
    if commits is None:
        commits = transactions
    return 0.3 + share * (commits * 0.003 + objects * transactions * 0.0001)


class Runner:
    """Runs workloads in worker processes and says how far it is."""

    def __init__(self, total_steps, total_cost=None, quiet=False):
        self.ctx = multiprocessing.get_context('spawn')
        self.total = total_steps
        self.total_cost = total_cost or total_steps
        self.done = 0
        self.done_cost = 0.0
        self.pending_cost = 0.0
        self.started = time.monotonic()
        self.quiet = quiet

    def step(self, what, cost=1.0):
        """A step of about *cost* (see ``cost()``) begins."""
        if not self.done:
            # Emptying the databases first may take long, but says
            # nothing of how long the steps take.
            self.started = time.monotonic()
        self.done += 1
        self.done_cost += self.pending_cost
        self.pending_cost = cost
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        eta = ''
        if self.done_cost > 0:
            # The priors are scaled by what the steps so far really took.
            left = self.total_cost - self.done_cost
            eta = ', about %s left' % _duration(
                elapsed / self.done_cost * left)
        print('[%d/%d, %d%%] %s (%s%s)' % (
            self.done, self.total, 100 * self.done_cost / self.total_cost,
            what, _duration(elapsed), eta), file=sys.stderr, flush=True)

    def parallel(self, func, arglists, barrier=False):
        """Run ``func(*args)`` for each of *arglists* in its own process,
        all at once; their results, in no particular order."""
        queue = self.ctx.Queue()
        kwargs = {}
        if barrier:
            kwargs['barrier'] = self.ctx.Barrier(len(arglists))
        procs = [self.ctx.Process(target=_child,
                                  args=(queue, func, args, kwargs))
                 for args in arglists]
        for p in procs:
            p.start()
        results, errors = [], []
        try:
            while len(results) + len(errors) < len(procs):
                try:
                    status, value = queue.get(timeout=1)
                except Empty:
                    if not any(p.is_alive() for p in procs) and \
                            queue.empty():
                        errors.append('a worker process died (exit codes '
                                      '%s)' % [p.exitcode for p in procs])
                        break
                    continue
                (results if status == 'ok' else errors).append(value)
        finally:
            for p in procs:
                p.join(60)
                if p.is_alive():
                    p.kill()
        if errors:
            raise SpeedTestError('; '.join(errors))
        return results

    def one(self, func, *args):
        return self.parallel(func, [args])[0]


def _duration(seconds):
    if seconds < 100:
        return '%.0f s' % seconds
    if seconds < 6000:
        return '%.0f min' % (seconds / 60)
    return '%.1f h' % (seconds / 3600)


def _mean_ms(samples):
    return statistics.mean(samples) * 1000


def write_read_test(runner, contender, objects, concurrency, runs,
                    transactions):
    """Best of *runs* of the mean ms per transaction (each worker's mean,
    averaged over the workers), for writes and for reads; and the raw
    samples."""
    return write_read_turns(runner, [contender], objects, concurrency, runs,
                            transactions)[contender.name]


def write_read_turns(runner, group, objects, concurrency, runs,
                     transactions):
    """write_read_test of each contender of *group*, taking turns run
    after run (so that a change in the machine's load falls on each
    alike); ``{name: figure}``."""
    best = {c.name: {'write': None, 'read': None} for c in group}
    raw = {c.name: [] for c in group}
    for run in range(runs):
        for contender in group:
            runner.step('%s: write/read %d objects, %d process%s, run %d/%d'
                        % (contender.name, objects, concurrency,
                           '' if concurrency == 1 else 'es', run + 1, runs),
                        cost(objects, transactions, concurrency))
            tags = ['n%d-c%d-r%d-w%d-%s' % (objects, concurrency, run, w,
                                            time.time_ns())
                    for w in range(concurrency)]
            results = runner.parallel(
                workloads.write_read,
                [(contender, tag, objects, transactions) for tag in tags],
                barrier=concurrency > 1)
            raw[contender.name].append(results)
            for kind, kept in best[contender.name].items():
                value = statistics.mean(_mean_ms(r[kind]) for r in results)
                if kept is None or value < kept:
                    best[contender.name][kind] = value
    return {name: {'write_ms': b['write'], 'read_ms': b['read'],
                   'samples': raw[name]} for name, b in best.items()}


def environment(contenders):
    import sqlite3

    import ZODB
    env = {'python': platform.python_version(),
           'platform': platform.platform(), 'cpus': os.cpu_count(),
           'sqlite': sqlite3.sqlite_version, 'packages': {}, 'servers': {}}
    from importlib import metadata
    for dist in ('relstorage', 'ZODB', 'persistent', 'BTrees', 'ZEO',
                 'psycopg2', 'psycopg2-binary', 'mysqlclient', 'PyMySQL',
                 'oracledb'):
        try:
            env['packages'][dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    env['packages'].setdefault('ZODB', getattr(ZODB, '__version__', '?'))
    for c in contenders:
        if c.kind not in ('postgresql', 'mysql', 'oracle'):
            continue
        db = c.open()
        try:
            adapter = db.storage.adapter
            session = adapter.connect(for_store=False)
            try:
                env['servers'][c.name] = adapter.inspector.server_version(
                    session)
            finally:
                session.close()
        finally:
            db.close()
    return env


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='relstorage-speedtest', description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', nargs='?',
                        help='zope.conf-style file of <zodb NAME> sections')
    parser.add_argument('--quick', action='store_true',
                        help='a short run (under 2 minutes on the default)')
    parser.add_argument('-n', '--objects', default=None,
                        help='objects per transaction, comma separated '
                        '(100,10000)')
    parser.add_argument('-c', '--concurrency', default=None,
                        help='processes at once, comma separated (1,2,4,8)')
    parser.add_argument('--runs', type=int, default=None,
                        help='runs per figure; the best counts (3)')
    parser.add_argument('-t', '--transactions', type=int, default=None,
                        help='transactions per run, averaged (10)')
    parser.add_argument('--growth', type=int, default=None,
                        help='objects the growth test adds, one per '
                        'transaction (50000; 0 skips it)')
    parser.add_argument('--growth-step', type=int, default=1000,
                        help='objects between two measurements of the '
                             'growth test (1000)')
    parser.add_argument('--no-connections', action='store_true',
                        help='skip the TCP/unix socket/cache test')
    parser.add_argument('--no-raw', action='store_true',
                        help="skip the driver's raw INSERT limit")
    parser.add_argument('--zeo', action='store_true',
                        help='also start a ZEO server over a FileStorage '
                        'on 127.0.0.1 and measure it')
    parser.add_argument('--metrics', action='store_true',
                        help='also measure each RelStorage section with '
                             'metrics true, taking turns with it run after '
                             'run, and print what recording costs')
    parser.add_argument('--ro-replica-conf', metavar='FILE', default=None,
                        help='also measure each PostgreSQL and MySQL '
                             'section with its loads from the replicas FILE '
                             'lists (ro-replica-conf), taking turns with it, '
                             "and the replica's lag after a commit")
    parser.add_argument('--only', default=None,
                        help='measure only these sections (comma separated)')
    parser.add_argument('--pg-socket-dir', default='/var/run/postgresql',
                        help='PostgreSQL\'s unix socket directory, for the '
                             'connection test (%(default)s)')
    parser.add_argument('--mysql-socket', default='/run/mysqld/mysqld.sock',
                        help='MySQL\'s unix socket, for the connection test '
                             '(%(default)s)')
    parser.add_argument('--json', help='write every figure and raw sample '
                        'to this file')
    parser.add_argument('--charts', help='write PNG charts into this '
                        'directory (needs matplotlib)')
    parser.add_argument('-q', '--quiet', action='store_true',
                        help='no progress lines')
    args = parser.parse_args(argv)
    if args.charts and not report.can_chart():
        parser.error('--charts needs matplotlib, which cannot be imported '
                     'here (pip install matplotlib); nothing was run')

    quick = args.quick
    sizes = [int(x) for x in (args.objects or
                              ('100' if quick else '100,10000')).split(',')]
    levels = [int(x) for x in (args.concurrency or
                               ('1,2' if quick else '1,2,4,8')).split(',')]
    runs = args.runs or (1 if quick else 3)
    transactions = args.transactions or (5 if quick else 10)
    growth_total = args.growth if args.growth is not None else (
        2000 if quick else 50000)
    growth_step = min(args.growth_step, max(1, growth_total // 4)) \
        if quick else args.growth_step

    tmp = tempfile.mkdtemp(prefix='speedtest-')
    zeo = None
    try:
        if args.config:
            with open(args.config) as f:
                text = f.read()
        else:
            text = contenders_mod.DEFAULT_CONFIG.format(tmp=tmp)
        try:
            contenders = contenders_mod.parse(text)
        except ValueError as e:
            parser.error('%s: %s' % (args.config or 'default config', e))
        if args.only:
            wanted = set(args.only.split(','))
            contenders = [c for c in contenders if c.name in wanted]
        if args.zeo:
            zeo = contenders_mod.ZEOServer()
            contenders.append(zeo.contender())
        return _run(args, contenders, sizes, levels, runs, transactions,
                    growth_total, growth_step)
    except SpeedTestError as e:
        print('relstorage-speedtest: ERROR: %s' % e, file=sys.stderr)
        return 2
    finally:
        if zeo is not None:
            zeo.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _write_json(path, results):
    with open(path, 'w') as f:
        json.dump(results, f, indent=2)


def _run(args, contenders, sizes, levels, runs, transactions, growth_total,
         growth_step):
    variants = []
    if not args.no_connections:
        for c in contenders:
            socket_variant = c.over_unix_socket(args.pg_socket_dir,
                                                args.mysql_socket)
            if socket_variant is None:
                continue
            group = [c, c.without_cache(), socket_variant,
                     socket_variant.without_cache(), c.through_psycopg3()]
            variants.append((c, [v for v in group if v is not None]))
    # Each contender with the variants measured in turn with it.
    groups = [[c] + ([c.with_metrics()] if args.metrics and c.with_metrics()
                     else []) for c in contenders]
    if args.ro_replica_conf:
        for group in groups:
            replica = group[0].with_replica_reads(args.ro_replica_conf)
            if replica is not None:
                group.append(replica)
    replica_variants = [c for group in groups for c in group
                        if c.name.endswith(' replica-reads')]
    measured = [c for group in groups for c in group]
    raw_contenders = [] if args.no_raw else [
        c for c in contenders if c.kind in ('postgresql', 'mysql', 'sqlite')]

    plan = [cost(n, transactions, level) for c in measured for n in sizes
            for level in levels if c.shared or level == 1
            for _ in range(runs)]
    plan += [cost(100, transactions)] * sum(
        runs * len(group) for _, group in variants)
    for _ in raw_contenders:
        plan += [cost(1000, transactions)] * runs
        plan.append(2 * cost(1000, transactions))
    if growth_total:
        plan += [cost(1, 1, commits=growth_total)] * len(contenders)
    plan += [cost(1, 1, commits=LAG_SAMPLES)] * len(replica_variants)
    runner = Runner(len(plan), sum(plan), quiet=args.quiet)

    results = {'environment': environment(contenders),
               'settings': {'objects': sizes, 'concurrency': levels,
                            'runs': runs, 'transactions': transactions,
                            'growth': growth_total,
                            'growth_step': growth_step,
                            'payload_bytes': workloads.PAYLOAD},
               'contenders': {c.name: c.text for c in measured},
               'write_read': {}, 'connections': {}, 'raw_limit': {},
               'replica_lag': {},
               'growth': {}}
    try:
        for c in contenders:
            workloads.empty(c)

        # Write/read: for each size and level, every contender in turn.
        for n in sizes:
            for level in levels:
                for group in groups:
                    if level > 1 and not group[0].shared:
                        continue
                    figures = write_read_turns(runner, group, n, level, runs,
                                               transactions)
                    for name, figure in figures.items():
                        results['write_read'].setdefault(
                            name, {}).setdefault(str(n), {})[
                                str(level)] = figure
                report.print_write_read(results, n, levels, measured)
                if args.metrics:
                    report.print_metrics_cost(results, n, levels, groups)

        # How long after a commit the replica shows it.
        for c in replica_variants:
            runner.step('%s: replica lag after a commit' % c.name,
                        cost(1, 1, commits=LAG_SAMPLES))
            results['replica_lag'][c.name] = runner.one(
                workloads.replica_lag, c, LAG_SAMPLES)
        if replica_variants:
            report.print_replica_lag(results)

        # Connection: TCP against unix socket, local cache on and off.
        for base, group in variants:
            for variant in group:
                figure = write_read_test(runner, variant, 100, 1, runs,
                                         transactions)
                results['connections'].setdefault(base.name, {})[
                    variant.name] = figure
        if variants:
            report.print_connections(results)

        # The driver's limit: multi-row INSERTs of 1,000 pickles per
        # transaction, against writing 1,000 objects per transaction.
        for c in raw_contenders:
            ours = write_read_test(runner, c, 1000, 1, runs, transactions)
            runner.step('%s: raw INSERT of 1000 rows per transaction' % c.name,
                        2 * cost(1000, transactions))
            limit = runner.one(workloads.raw_limit, c, 1000, transactions)
            if limit:
                raw_ms = _mean_ms(limit['raw'])
                store_ms = _mean_ms(limit['storage'])
                results['raw_limit'][c.name] = {
                    'raw_ms': raw_ms, 'write_ms': ours['write_ms'],
                    'fraction_of_limit': raw_ms / ours['write_ms'],
                    'storage_ms': store_ms,
                    'storage_fraction_of_limit': raw_ms / store_ms,
                    'raw_samples': limit['raw'],
                    'storage_samples': limit['storage'],
                    'write_samples': ours['samples']}
        if results['raw_limit']:
            report.print_raw_limit(results)

        # Growth: one object per transaction, timed per step.
        if growth_total:
            for c in contenders:
                runner.step('%s: growth to %d objects, one per transaction'
                            % (c.name, growth_total),
                            cost(1, 1, commits=growth_total))
                results['growth'][c.name] = runner.one(
                    workloads.growth, c, growth_total, growth_step)
            report.print_growth(results)
    except Exception as e:
        # An hour of figures is not lost to a failure in the last step.
        results['error'] = ('%s' % e if isinstance(e, SpeedTestError)
                            else '%s: %s' % (type(e).__name__, e))
        if args.json:
            _write_json(args.json, results)
            print('relstorage-speedtest: what was measured before the error '
                  'is in %s' % args.json, file=sys.stderr)
        raise

    if args.json:
        _write_json(args.json, results)
    if args.charts:
        for path in report.charts(results, args.charts):
            print('chart: %s' % path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
