"""Pack benchmark: build a database with history and garbage, pack it with
``zodbpack`` while another client keeps committing, and report the pack
time, the peak memory of the packing process (with its workers) and the
longest time the writer waited for a commit -- with ``--other-venv``,
next to RelStorage 4.3's own zodbpack (in a virtualenv of its own) on an
identical database.

    python -m relstorage_speedtest.pack [--objects 100000] [--database sqlite]
        [--keep-history|--no-keep-history] [--other-venv [DIR]]
        [--rounds 1] [--pack-timeout SECONDS] [--no-writer]
        [--pgjsonb-venv [DIR]] [--nightly SHARE] [--json FILE] [--verbose]

Each side builds its database, commits beside the pack and counts what is left
with its own Python, running the same script
(``relstorage_speedtest/packscripts.py``) in child processes. Each side's pack
is ``zodbpack --days 0 CONFIG`` (garbage collection on), a process of its own,
timed from start to exit; its peak memory is the sum of the high-water marks of
RSS (VmHWM, read while they run) of that process and of the processes it starts
(see run_measured()). The other side uses the ``misc`` test database (SQLite: a
directory of its own); with RelStorage 4.3 on MariaDB its build, writer and
zodbpack take the server for MySQL 5.7 (see packscripts). Both sides must leave
the same live data. A zodbpack still running after ``--pack-timeout`` seconds
is killed with the processes it started: the other side's time then gives a
ratio of at least that much, this side's makes the run fail. ``--no-writer``
packs with no client committing beside it. With ``--pgjsonb-venv``
(PostgreSQL only), zodb-pgjsonb (in a virtualenv of its own, made with Python
3.12 or later) packs an identical database too, in the ``dst`` test database,
with no writer beside it whatever ``--no-writer`` says (its history-free pack
deletes objects committed while it runs); it has no zodbpack, so the side's
script calls its storage's ``pack`` with ZODB's reference finder, garbage
collection included, in a process of its own measured alike. With
``--nightly SHARE``, each side packs once first, then that share of the
objects is changed (half as many unlinked, half as many added), and the
pack measured is the one after: a site's nightly pack, where this storage
unpickles only what changed since the last (storage.pack.keptrefs).
Not a test: nothing here asserts on time.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from relstorage.children import child_env
from relstorage.helptext import help_text

from . import othervenv
from .convert import _adapter_section
from .convert import empty_database
from .packscripts import write_script


class PackBenchError(RuntimeError):
    """A side's script failed (its output says why)."""


class Side:
    """One contender: the Python its scripts run with (and their
    environment), how its zodbpack starts, and which test database it
    packs."""

    #: The first line of its config files.
    imports = '%import relstorage'
    #: Whether it packs while its writer commits (with the writer on).
    beside_writer = True

    def __init__(self, name, python, env, zodbpack, which):
        self.name = name
        self.python = python
        self.env = env
        self.zodbpack = zodbpack
        self.which = which

    def section(self, database, keep_history, workdir):
        """Its storage section for an empty database, and the SQLite
        data directory (else None)."""
        return storage_section(database, keep_history, self.which, workdir)

    def current_sql(self, keep_history):
        return CURRENT_SQL[keep_history]

    def run(self, script, action, spec, workdir):
        """The JSON that *action* of the script prints last."""
        done = subprocess.run(
            [self.python, script, action, json.dumps(spec)],
            capture_output=True, text=True, cwd=workdir, env=self.env)
        if done.returncode:
            raise PackBenchError('%s %s failed:\n%s' % (
                self.name, action, (done.stderr or done.stdout)[-3000:]))
        return json.loads(done.stdout.strip().splitlines()[-1])


def our_side():
    return Side('ours', sys.executable, child_env(),
                [sys.executable, '-m', 'relstorage.zodbpack', '-v'], 'main')


def other_side(venv, database):
    python = os.path.join(venv, 'bin', 'python')
    env = othervenv.neutral_env()
    if database == 'mysql':
        # Its build, writer and zodbpack alike take MariaDB for MySQL 5.7
        # (see packscripts for why).
        othervenv.mariadb_shim(venv)
        env[othervenv.MARIADB_SHIM_VAR] = '1'
    return Side('other', python, env, [othervenv.command(venv, 'zodbpack')],
                'misc')


class PgjsonbSide(Side):
    """zodb-pgjsonb from *venv*, packing with the script's ``zodbpack``
    (PostgreSQL only), never beside a writer."""

    imports = '%import zodb_pgjsonb'
    beside_writer = False

    def __init__(self, venv, script):
        python = os.path.join(venv, 'bin', 'python')
        super().__init__('pgjsonb', python, othervenv.neutral_env(),
                         [python, script, 'zodbpack'], 'dst')

    def section(self, database, keep_history, workdir):
        from relstorage.testing.dbs import pg_dsn

        from .shootout import pgjsonb_section
        empty_database(database, keep_history, self.which)
        return pgjsonb_section(pg_dsn(keep_history, self.which),
                               keep_history), None

    def current_sql(self, keep_history):
        # object_state holds the current states in both modes.
        return CURRENT_SQL[False]


def storage_section(database, keep_history, which, workdir):
    """A ``<relstorage>`` section for an empty database, and its SQLite
    data directory (else None)."""
    data_dir = None
    if database == 'sqlite':
        data_dir = tempfile.mkdtemp(prefix='data-', dir=workdir)
        adapter = '<sqlite3>\n data-dir %s\n</sqlite3>' % data_dir
    else:
        empty_database(database, keep_history, which)
        adapter = _adapter_section(database, keep_history, which)
    return ('<relstorage>\n keep-history %s\n pack-gc true\n%s\n'
            '</relstorage>' % ('true' if keep_history else 'false', adapter),
            data_dir)


#: Current objects, in the tables both versions name alike.
CURRENT_SQL = {
    True: 'SELECT COUNT(*) FROM current_object c JOIN object_state s '
          'ON s.zoid = c.zoid AND s.tid = c.tid WHERE s.state IS NOT NULL',
    False: 'SELECT COUNT(*) FROM object_state WHERE state IS NOT NULL'}


def current_objects(database, keep_history, which, data_dir, sql=None):
    """The current objects of a side's database, counted by the database:
    exact (len() may be the server's estimate) and quick (iterating with
    record_iternext makes a round trip per object here)."""
    from relstorage.testing.dbs import mysql_params
    from relstorage.testing.dbs import pg_dsn
    if database == 'sqlite':
        import sqlite3
        # This package's file, or RelStorage 4's.
        names = [name for name in ('relstorage.sqlite3', 'main.sqlite3')
                 if os.path.exists(os.path.join(data_dir, name))]
        conn = sqlite3.connect(os.path.join(data_dir, names[0]))
    elif database == 'postgresql':
        import psycopg2
        conn = psycopg2.connect(pg_dsn(keep_history, which))
    else:
        import MySQLdb
        conn = MySQLdb.connect(**mysql_params(keep_history, which))
    try:
        cur = conn.cursor()
        cur.execute(sql or CURRENT_SQL[keep_history])
        return cur.fetchone()[0]
    finally:
        conn.close()


class Writer:
    """The side's writer script in a child process: small commits until
    stopped, each reported as a JSON line, collected by a thread."""

    def __init__(self, side, script, spec, workdir):
        self.stderr = open(os.path.join(workdir, side.name + '-writer.err'),
                           'w+')
        self.proc = subprocess.Popen(
            [side.python, script, 'writer', json.dumps(spec)],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            cwd=workdir, env=side.env)
        self.commits = []
        self.ready = False
        self._seen = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self._seen.wait(120)
        if not self.ready:
            self.stop()
            raise PackBenchError('%s writer did not start:\n%s'
                                 % (side.name, self.errors_text()))

    def _read(self):
        for line in self.proc.stdout:
            record = json.loads(line)
            if record.get('ready'):
                self.ready = True
                self._seen.set()
            else:
                self.commits.append(record)
        self._seen.set()

    def errors_text(self):
        self.stderr.seek(0)
        return self.stderr.read()[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._thread.join(10)
        self.stderr.close()
        return self.commits


def run_measured(argv, log, cwd, env, timeout=None):
    """Run *argv* with its output in the file *log*: ``(seconds, peak
    MB, exit status, output, timed out)``. The peak is the sum of the
    high-water marks of RSS (VmHWM, read while they run) of the process
    and of every process it starts (the pack's workers), which is at
    least the peak of their total: the max RSS that wait4() reports also
    counts this process's memory, which a child holds between fork and
    exec, and leaves out the workers (0 where there is no /proc). Still
    running after *timeout* seconds, the process and those it started
    (its session) are killed."""
    peaks = {}
    timed_out = False
    with open(log, 'w') as out:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True)
        while proc.poll() is None:
            for pid in _tree(proc.pid):
                peaks[pid] = max(peaks.get(pid, 0), _high_water_kb(pid))
            if timeout is not None and (
                    time.perf_counter() - started > timeout):
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - started
    with open(log) as f:
        output = f.read()
    return (seconds, sum(peaks.values()) / 1024.0, proc.returncode, output,
            timed_out)


def _tree(pid):
    """*pid* and its descendants."""
    found = [pid]
    for parent in found:
        try:
            tasks = os.listdir('/proc/%d/task' % parent)
        except OSError:
            continue
        for task in tasks:
            try:
                with open('/proc/%d/task/%s/children' % (parent, task)) as f:
                    found.extend(int(child) for child in f.read().split())
            except (OSError, ValueError):
                pass
    return found


def _high_water_kb(pid):
    try:
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def pack(side, script, spec, workdir, verbose=False, timeout=None,
         with_writer=True):
    """Pack *side*'s database with its zodbpack while its writer commits
    (unless not *with_writer*): the pack's seconds, peak RSS, exit
    status and output, whether it was killed after *timeout* seconds,
    and the writer's figures."""
    config = os.path.join(workdir, side.name + '.conf')
    with open(config, 'w') as f:
        f.write(side.imports + '\n' + spec['section'] + '\n')
    with_writer = with_writer and side.beside_writer
    writer = Writer(side, script, spec, workdir) if with_writer else None
    if writer is not None:
        time.sleep(0.5)
    log = os.path.join(workdir, side.name + '-pack.log')
    seconds, peak_mb, code, output, timed_out = run_measured(
        side.zodbpack + ['--days', '0', config], log, workdir, side.env,
        timeout)
    if writer is not None:
        time.sleep(0.5)
        commits = writer.stop()
    else:
        commits = []
    durations = sorted(c['seconds'] for c in commits)
    errors = [c['error'] for c in commits if c['error']]
    figures = {
        'command': side.zodbpack + ['--days', '0', 'CONFIG'],
        'seconds': seconds, 'peak_mb': peak_mb, 'exit_status': code,
        'timed_out': timed_out, 'with_writer': with_writer,
        'output_tail': output.strip().splitlines()[-5:],
        'writer_commits': len(durations),
        'writer_longest_wait': durations[-1] if durations else 0,
        'writer_median': durations[len(durations) // 2] if durations else 0,
        'writer_error_count': len(errors), 'writer_errors': errors[:5]}
    if verbose:
        print('--- %s zodbpack output (last 40 lines) ---\n%s' % (
            side.name, '\n'.join(output.strip().splitlines()[-40:])))
        for record in sorted(commits, key=lambda c: c['seconds'])[-3:][::-1]:
            print('  %s writer waited %.3f s from %s' % (
                side.name, record['seconds'], time.strftime(
                    '%H:%M:%S', time.localtime(record['at']))
                + ('%.3f' % (record['at'] % 1))[1:]))
    if timed_out:
        figures['error'] = 'zodbpack did not finish in %g s (killed)' % (
            timeout)
    elif code:
        figures['error'] = 'zodbpack exited with %d: %s' % (
            code, output.strip()[-2000:])
    return figures


def one_round(sides, script, args, workdir):
    """Build every side's database, then pack each in turn, then count
    what each left. A dict of figures per side name."""
    specs, row, where = {}, {}, {}
    for side in sides:
        section, data_dir = side.section(args.database, args.keep_history,
                                         workdir)
        where[side.name] = (args.database, args.keep_history, side.which,
                            data_dir, side.current_sql(args.keep_history))
        specs[side.name] = {'section': section, 'objects': args.objects,
                            'imports': side.imports}
        row[side.name] = side.run(script, 'build', specs[side.name], workdir)
        row[side.name]['objects_before'] = current_objects(*where[side.name])
        print('%-5s built %d objects (%d current) in %.1f s' % (
            side.name, args.objects, row[side.name]['objects_before'],
            row[side.name]['build_seconds']), flush=True)
    for side in sides:
        if args.nightly:
            # Last night's pack, then a day's work: the pack measured is
            # the next night's.
            first = pack(side, script, specs[side.name], workdir,
                         args.verbose, args.pack_timeout, args.writer)
            if 'error' in first:
                row[side.name].update(first)
                print('%-5s first pack FAILED: %s' % (
                    side.name, first['error']), flush=True)
                continue
            specs[side.name]['churn'] = args.nightly
            row[side.name]['first_pack_seconds'] = first['seconds']
            row[side.name].update(side.run(script, 'churn',
                                           specs[side.name], workdir))
            print('%-5s first pack %.1f s; then %g of the objects changed '
                  'in %.1f s' % (side.name, first['seconds'], args.nightly,
                                 row[side.name]['churn_seconds']),
                  flush=True)
        row[side.name].update(pack(side, script, specs[side.name], workdir,
                                   args.verbose, args.pack_timeout,
                                   args.writer))
        figures = row[side.name]
        if 'error' in figures:
            print('%-5s pack %s: %s' % (
                side.name, 'STOPPED' if figures['timed_out'] else 'FAILED',
                figures['error']), flush=True)
            continue
        figures.update(side.run(script, 'verify', specs[side.name], workdir))
        figures['objects_after'] = current_objects(*where[side.name])
        print('%-5s pack %.1f s, peak RSS %.0f MB; objects %d -> %d; writer '
              '%d commits, longest %.3f s, median %.4f s, %d errors' % (
                  side.name, figures['seconds'], figures['peak_mb'],
                  figures['objects_before'], figures['objects_after'],
                  figures['writer_commits'], figures['writer_longest_wait'],
                  figures['writer_median'], figures['writer_error_count']),
              flush=True)
        said = [line for line in figures['output_tail'] if 'packed to' in line]
        if said:  # this package's zodbpack: batches, waits for commits
            print('      zodbpack: %s' % said[-1].strip())
        if figures['writer_errors']:
            print('      writer errors: %s' % figures['writer_errors'])
    for side in sides[1:]:
        compare(row, side.name)
    return row


def compare(row, name):
    """Set the ratios of side *name*'s pack to ours in *row* (keys
    prefixed with the name but for RelStorage 4.3's, ``other``)."""
    ours, theirs = row['ours'], row[name]
    prefix = '' if name == 'other' else name + '_'
    if 'error' not in ours and theirs['timed_out']:
        # Killed at the timeout: it would have taken longer still.
        row[prefix + 'time_ratio_at_least'] = theirs['seconds'] / ours[
            'seconds']
        print('ratio: time %s/ours at least %.2f (its pack was stopped)'
              % (name, row[prefix + 'time_ratio_at_least']), flush=True)
    if 'error' not in ours and 'error' not in theirs:
        row[prefix + 'time_ratio'] = theirs['seconds'] / ours['seconds']
        row[prefix + 'memory_ratio'] = ours['peak_mb'] / theirs['peak_mb']
        keys = ('objects_after', 'tree_items', 'tree_digest')
        same = row[prefix + 'same_live_data'] = all(
            ours[k] == theirs[k] for k in keys)
        print('ratios: time %s/ours %.2f, peak memory ours/%s %.2f'
              % (name, row[prefix + 'time_ratio'], name,
                 row[prefix + 'memory_ratio']))
        print('live data: %s' % (
            '%d current objects on both sides, the same %d tree items'
            % (ours['objects_after'], ours['tree_items'])
            if same else 'DIFFERENT: ' + ', '.join(
                '%s ours %s %s %s' % (k, ours[k], name, theirs[k])
                for k in keys)), flush=True)


FIGURES = (('seconds', 'pack s', '%.2f'), ('peak_mb', 'peak MB', '%.0f'),
           ('writer_longest_wait', 'writer longest s', '%.3f'),
           ('writer_median', 'writer median s', '%.4f'))


def summarize(rows, names):
    """Median, lowest and highest of each figure over the rounds."""
    summary = {}
    for name in names:
        for key, _label, _fmt in FIGURES:
            values = [r[name][key] for r in rows if 'error' not in r[name]]
            if values:
                summary.setdefault(name, {})[key] = {
                    'median': statistics.median(values),
                    'min': min(values), 'max': max(values)}
    ratios = [(prefix + key) for prefix in [''] + [
        name + '_' for name in names if name not in ('ours', 'other')]
        for key in ('time_ratio', 'memory_ratio', 'time_ratio_at_least')]
    for key in ratios:
        values = [r[key] for r in rows if key in r]
        if values:
            summary[key] = {'median': statistics.median(values),
                            'min': min(values), 'max': max(values)}
    return summary


def print_summary(summary, rounds, names=('ours', 'other')):
    print('over %d rounds: median (lowest-highest)' % rounds)
    for name in names:
        if name in summary:
            print('%-7s %s' % (name, '; '.join(
                '%s %s (%s-%s)' % ((label,) + tuple(
                    fmt % summary[name][key][k]
                    for k in ('median', 'min', 'max')))
                for key, label, fmt in FIGURES if key in summary[name])))
    for name in names[1:]:
        prefix = '' if name == 'other' else name + '_'
        for key, label in (
                ('time_ratio', 'time %s/ours' % name),
                ('memory_ratio', 'peak memory ours/%s' % name),
                ('time_ratio_at_least',
                 'time %s/ours, %s stopped, at least' % (name, name))):
            key = prefix + key
            if key not in summary:
                continue
            print('%s: %.2f (%.2f-%.2f)' % (
                label, summary[key]['median'], summary[key]['min'],
                summary[key]['max']))


def main(argv=None):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.pack',
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
    parser.add_argument('--keep-history', dest='keep_history',
                        action='store_true', help='a history-preserving '
                        'database (the default)')
    parser.add_argument('--other-venv', nargs='?', const='', metavar='DIR',
                        help='also pack with the zodbpack of RelStorage 4.3 '
                             'in this virtualenv (made when missing; '
                             'default %s)' % othervenv.DEFAULT_DIR)
    parser.add_argument('--rounds', type=int, default=1,
                        help='build and pack this many times, reporting '
                             'medians (%(default)s)')
    parser.add_argument('--pack-timeout', type=float, metavar='SECONDS',
                        help='kill a zodbpack still running after this '
                             "long (the other side's: its ratio is then "
                             "at least the timeout's; this side's: the "
                             'run fails)')
    parser.add_argument('--no-writer', dest='writer', action='store_false',
                        default=True,
                        help='pack with no client committing beside it')
    parser.add_argument('--pgjsonb-venv', nargs='?', const='', metavar='DIR',
                        help='also pack with zodb-pgjsonb in this '
                             'virtualenv, PostgreSQL only, without a writer '
                             '(made when missing; default %s)'
                             % othervenv.PGJSONB_DIR)
    parser.add_argument('--nightly', type=float, metavar='SHARE',
                        help='pack once, change this share of the objects '
                             '(half as many unlinked, half as many added), '
                             'and measure the pack after that: the nightly '
                             'pack of a site (e.g. 0.05)')
    parser.add_argument('--json', help='write the figures to this file')
    parser.add_argument('--verbose', action='store_true',
                        help="show each zodbpack's output and the longest "
                             'writer waits')
    args = parser.parse_args(argv)
    if args.pgjsonb_venv is not None and args.database != 'postgresql':
        parser.error('--pgjsonb-venv needs --database postgresql')

    workdir = othervenv.neutral_dir()
    script = write_script(workdir)
    sides = [our_side()]
    other = pgjsonb = None
    try:
        if args.other_venv is not None:
            venv = othervenv.ensure(args.other_venv or None)
            other = dict(othervenv.check(venv), venv=venv)
            sides.append(other_side(venv, args.database))
            print('other: RelStorage %s from %s%s' % (
                other['version'], other['path'],
                '; its build, writer and zodbpack take MariaDB for MySQL '
                '5.7'
                if args.database == 'mysql' else ''), flush=True)
        if args.pgjsonb_venv is not None:
            venv = othervenv.ensure_pgjsonb(args.pgjsonb_venv or None)
            pgjsonb = dict(othervenv.check(venv, 'zodb_pgjsonb',
                                           'zodb-pgjsonb'), venv=venv)
            sides.append(PgjsonbSide(venv, script))
            print('pgjsonb: zodb-pgjsonb %s from %s; it packs with no '
                  'writer beside it' % (pgjsonb['version'], pgjsonb['path']),
                  flush=True)
        rows = []
        for number in range(args.rounds):
            if args.rounds > 1:
                print('round %d of %d' % (number + 1, args.rounds))
            rows.append(one_round(sides, script, args, workdir))
    except (PackBenchError, othervenv.OtherVenvError) as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = summarize(rows, [side.name for side in sides])
    if args.rounds > 1:
        print_summary(summary, args.rounds, [side.name for side in sides])
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'database': args.database,
                       'keep_history': args.keep_history,
                       'objects': args.objects, 'other': other,
                       'pgjsonb': pgjsonb,
                       'writer': args.writer,
                       'pack_timeout': args.pack_timeout,
                       'nightly': args.nightly,
                       'rounds': rows, 'summary': summary,
                       'cpus': os.cpu_count(),
                       'python': sys.version.split()[0]}, f, indent=2)
    # Another side stopped at the timeout is a figure, not a failure.
    failed = any('error' in row[side.name]
                 and not (side.name != 'ours' and row[side.name]['timed_out'])
                 for row in rows for side in sides)
    different = any(row.get(key) is False for row in rows
                    for key in ('same_live_data', 'pgjsonb_same_live_data'))
    return 1 if failed or different else 0


if __name__ == '__main__':
    sys.exit(main())
