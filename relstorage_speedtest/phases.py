"""Where a commit's time goes, in one process: this storage against
FileStorage (on SQLite's rows) and against RelStorage 4.3 (``--other-venv``),
each commit split into the storage's own part and the rest (ZODB's:
pickling, the connection's bookkeeping).

    python -m relstorage_speedtest.phases [--databases sqlite,postgresql,mysql]
        [--modes hf,hp] [--objects 1000] [--commits 40] [--rounds 3]
        [--filestorage] [--other-venv [DIR]] [--json FILE]

Each contender runs in a process of its own (started with its own
Python, outside any checkout) on an emptied database: a
PersistentMapping of ``--objects`` small persistent objects, then
``--commits`` commits that each replace them all with new objects (add,
as zodbshootout's add does) and, through the database opened again,
``--commits`` commits that change each of them (update). The first
commit of each is reported apart (the update's reads every object from
the storage; the connection's cache then holds them all, as
zodbshootout's does), the median is of the others. Every
method of the storage instance a ZODB connection calls (new_oid, store,
tpc_vote, tpc_finish, load, the poll at the start of a transaction...)
is timed: the storage's part of a commit is the time spent inside them.
The contenders take turns (A B, then B A) for ``--rounds`` rounds; the
medians of each round's median are printed, with the range over the
rounds of the ratio of the other side's time to this storage's (above
1, this storage is faster). Not a test: nothing here asserts on time.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

from relstorage.children import child_env
from relstorage.helptext import help_text
from relstorage.testing.dbs import empty_database

from . import othervenv
from .convert import _adapter_section
from .pack import Side

#: Run by each side's own Python: it imports ZODB and whichever
#: ``relstorage`` that Python has, never this package.
SCRIPT = r'''
import json
import os
import statistics
import sys
import time

import transaction
import ZODB.config
from persistent import Persistent
from persistent.mapping import PersistentMapping

#: What a ZODB connection calls on its storage.
METHODS = ('new_oid', 'tpc_begin', 'store', 'storeBlob', 'tpc_vote',
           'tpc_finish', 'tpc_abort', 'load', 'loadBefore', 'loadSerial',
           'prefetch', 'poll_invalidations', 'sync', 'afterCompletion',
           'release', 'checkCurrentSerialInTransaction')


class Item(Persistent):
    def __init__(self, data):
        self.data = data


class Timer:
    """Wraps METHODS of a storage instance with a clock: ``spent[name]``
    seconds. Calls from one timed method to another count once (the
    outer)."""

    def __init__(self, storage):
        self.spent = dict.fromkeys(METHODS, 0.0)
        self.depth = 0
        for name in METHODS:
            method = getattr(storage, name, None)
            if callable(method):
                setattr(storage, name, self.wrap(name, method))

    def wrap(self, name, method):
        clock = time.perf_counter
        timer = self

        def timed(*args, **kw):
            if timer.depth:
                return method(*args, **kw)
            timer.depth += 1
            started = clock()
            try:
                return method(*args, **kw)
            finally:
                timer.spent[name] += clock() - started
                timer.depth -= 1
        return timed

    def total(self):
        return sum(self.spent.values())

    def reset(self):
        for name in self.spent:
            self.spent[name] = 0.0


def opened(spec):
    """A database of the storage, and a connection with its methods
    timed. The connection's cache holds every object, as zodbshootout's
    (a ``<zodb>`` section's 5,000) does: an update changes objects it
    holds."""
    storage = ZODB.config.storageFromString(
        '%import relstorage\n' + spec['section'] + '\n')
    db = ZODB.DB(storage, cache_size=2 * spec['objects'] + 100)
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(tm)
    return db, tm, conn, Timer(conn._storage)


def main(spec):
    storage = ZODB.config.storageFromString(
        '%import relstorage\n' + spec['section'] + '\n')
    if hasattr(storage, 'zap_all'):
        storage.zap_all()
    ZODB.DB(storage).close()  # the root object
    objects, commits = spec['objects'], spec['commits']
    data = os.urandom(spec['size'])
    figures = {}

    def add(conn):
        conn.root()['m'].update(
            {n: Item(data) for n in range(objects)})

    def update(conn):
        for item in conn.root()['m'].values():
            item.data = item.data[1:] + item.data[:1]

    # Each phase opens the database afresh, as each zodbshootout run
    # does: its first commit is reported apart (the update's reads every
    # object from the database), the median is of the rest.
    for phase, change in (('add', add), ('update', update)):
        db, tm, conn, timer = opened(spec)
        if phase == 'add':
            tm.begin()
            conn.root()['m'] = PersistentMapping()
            tm.commit()
        totals, parts, by_method = [], [], {}
        for i in range(commits + 1):
            timer.reset()
            started = time.perf_counter()
            tm.begin()
            change(conn)
            tm.commit()
            totals.append(time.perf_counter() - started)
            parts.append(timer.total())
            if i:
                for name, spent in timer.spent.items():
                    if spent:
                        by_method.setdefault(name, []).append(spent)
        figures[phase] = {
            'first': totals[0], 'first_storage': parts[0],
            'total': statistics.median(totals[1:]),
            'storage': statistics.median(parts[1:]),
            'methods': {name: statistics.median(values)
                        for name, values in by_method.items()}}
        conn.close()
        db.close()
    print(json.dumps(figures))


main(json.loads(sys.argv[2]))  # (after the action, "measure")
'''


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.phases',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--databases', default='sqlite,postgresql,mysql',
        help='comma separated (%(default)s)')
    add('--modes', default='hf,hp', help='hf, hp or both (%(default)s)')
    add('--objects', type=int, default=1000,
        help='objects per commit (%(default)s)')
    add('--size', type=int, default=300,
        help='bytes of random data per object (%(default)s, '
             'zodbshootout\'s default object size)')
    add('--commits', type=int, default=40,
        help='measured commits of each kind (%(default)s)')
    add('--rounds', type=int, default=3, help='%(default)s')
    add('--filestorage', action='store_true',
        help='FileStorage as a contender beside SQLite')
    add('--other-venv', nargs='?', const=othervenv.DEFAULT_DIR,
        help='RelStorage 4.3 as a contender, from this virtualenv (made '
             'when missing; default %s)' % othervenv.DEFAULT_DIR)
    add('--json', help='write every figure to this file')
    return parser.parse_args(argv)


class Contender(Side):
    """A side (its Python, environment and test database, as
    relstorage_speedtest.pack's), and the storage section it opens for a
    database and mode in *workdir*."""

    def __init__(self, name, python, env, which='main'):
        super().__init__(name, python, env, None, which)

    def section(self, database, keep_history, workdir):
        if database == 'filestorage':
            path = tempfile.mkdtemp(prefix='fs-', dir=workdir)
            return '<filestorage>\n path %s\n</filestorage>' % (
                os.path.join(path, 'Data.fs'))
        if database != 'sqlite':
            empty_database(database, keep_history, self.which)
            adapter = _adapter_section(database, keep_history, self.which)
        else:
            adapter = '<sqlite3>\n data-dir %s\n</sqlite3>' % (
                tempfile.mkdtemp(prefix='sqlite-', dir=workdir))
        return '<relstorage>\n keep-history %s\n%s\n</relstorage>' % (
            'true' if keep_history else 'false', adapter)


def contenders(args, database):
    """The sides measured on *database*: this storage first."""
    sides = [(database, Contender('this storage', sys.executable,
                                  child_env()))]
    if args.filestorage and database == 'sqlite':
        sides.append(('filestorage', Contender(
            'FileStorage', sys.executable, child_env())))
    if args.other_venv:
        env = othervenv.neutral_env()
        if database == 'mysql':
            othervenv.mariadb_shim(args.other_venv)
            env[othervenv.MARIADB_SHIM_VAR] = '1'
        sides.append((database, Contender(
            'RelStorage 4.3', os.path.join(args.other_venv, 'bin', 'python'),
            env, which='misc')))
    return sides


def measure(args, workdir, script):
    """``{(database, mode): {side: [figures per round]}}``."""
    results = {}
    for database in args.databases.split(','):
        sides = contenders(args, database)
        for mode in args.modes.split(','):
            keep_history = mode == 'hp'
            row = results.setdefault((database, mode), {})
            for r in range(args.rounds):
                order = sides if r % 2 == 0 else sides[::-1]
                for kind, side in order:
                    spec = {'section': side.section(kind, keep_history,
                                                    workdir),
                            'objects': args.objects, 'size': args.size,
                            'commits': args.commits}
                    figures = side.run(script, 'measure', spec, workdir)
                    row.setdefault(side.name, []).append(figures)
                    print('%s %s round %d %s: add %.1f ms (storage %.1f), '
                          'update %.1f ms (storage %.1f)' % (
                              database, mode.upper(), r + 1, side.name,
                              figures['add']['total'] * 1e3,
                              figures['add']['storage'] * 1e3,
                              figures['update']['total'] * 1e3,
                              figures['update']['storage'] * 1e3),
                          flush=True)
    return results


def summarize(results, out=sys.stdout):
    """Per database, mode and phase: each side's median total and
    storage part, and the ratio of the others' total to this storage's
    (median and range over the rounds)."""
    print('\nmedians over the rounds of each round\'s median commit, ms '
          '(storage part / the rest)', file=out)
    for (database, mode), row in results.items():
        ours = row['this storage']
        for phase in ('add', 'update'):
            cells = []
            for name, rounds in row.items():
                total = statistics.median(r[phase]['total'] for r in rounds)
                part = statistics.median(r[phase]['storage'] for r in rounds)
                first = statistics.median(r[phase]['first'] for r in rounds)
                cell = '%s %.1f (%.1f / %.1f) first %.1f' % (
                    name, total * 1e3, part * 1e3, (total - part) * 1e3,
                    first * 1e3)
                if name != 'this storage':
                    ratios = [o[phase]['total'] / t[phase]['total']
                              for o, t in zip(rounds, ours)]
                    cell += ' ratio %.2f (%.2f-%.2f)' % (
                        statistics.median(ratios), min(ratios), max(ratios))
                cells.append(cell)
            print('%-10s %s %-6s %s' % (database, mode.upper(), phase,
                                        '; '.join(cells)), file=out)
        top = sorted(ours[-1]['update']['methods'].items(),
                     key=lambda item: -item[1])[:4]
        print('%-10s %s this storage, update, by method (last round): %s'
              % (database, mode.upper(), ', '.join(
                  '%s %.2f' % (name, spent * 1e3) for name, spent in top)),
              file=out)


def main(argv=None):
    args = parse_args(argv)
    if args.other_venv:
        othervenv.ensure(args.other_venv)
        othervenv.check(args.other_venv)
    workdir = tempfile.mkdtemp(prefix='speedtest-phases-')
    try:
        script = os.path.join(workdir, 'phases_side.py')
        with open(script, 'w') as f:
            f.write(SCRIPT)
        results = measure(args, workdir, script)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summarize(results)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump([{'database': database, 'mode': mode, 'sides': row}
                       for (database, mode), row in results.items()],
                      f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
