"""Side-by-side comparison with zodbshootout: this storage against
RelStorage 4.3 (installed, or reused, in a virtualenv of its own), on the
same servers in the same run, the contenders taking turns (A B, then
B A) for several rounds; prints the median of each figure, the spread of
the rounds, and the state of each server.

    python -m relstorage_speedtest.shootout
        [--databases sqlite,postgresql,mysql]
        [--modes hf,hp] [--concurrency 1,2] [--rounds 3] [--objects 1000]
        [--tests add,update,cold,warm,hot,tpc] [--filestorage]
        [--pgbouncer] [--galera] [--other-venv DIR] [--no-other]
        [--pgjsonb] [--pgjsonb-venv DIR] [--json FILE]

Start it from outside any checkout: ``python -m`` puts the working
directory first on ``sys.path``. The other side always runs in a
directory of its own and is checked to import its own ``relstorage``.
This side needs zodbshootout: the ``bench`` extra (``pip install
'.[bench]'`` in the checkout).

Each contender writes to databases of its own, ``PREFIX_ours_hf`` and so on,
created when missing through the admin connections (``--pg-admin``,
``--mysql-admin``); SQLite and FileStorage files go to a temporary directory.
zodbshootout empties them (``--zap force``) before each run. With
``--filestorage``, FileStorage joins the SQLite rows at c=1. With
``--pgbouncer``, this storage also runs through a private pgbouncer
(pool_mode = transaction, ``pooler transaction``) in front of the
``--pg-dsn`` server, taking turns with the others on PostgreSQL. With
``--galera``, this storage on a private three-node MariaDB Galera cluster
(started for the run on loopback ports, writing on node 1, see
relstorage.testing.galera_cluster) joins the MySQL rows: what the cluster
costs per commit beside the single server. With ``--pgjsonb``,
zodb-pgjsonb (in a virtualenv of its own, made with Python 3.12 or later)
joins the PostgreSQL rows with its default options but for its cache
warmer (``cache-warm-pct 0``: a background thread loading objects
a while after start-up); a start-up module in its virtualenv gives it the
``zap_all`` and ``_cache`` zodbshootout empties a storage and its caches with
(see othervenv.pgjsonb_shim);
``--no-other`` leaves RelStorage 4.3 out.
RelStorage 4.3 is
made to create its schema on MariaDB by a start-up module in its virtualenv
(see relstorage_speedtest.othervenv). Not a test: nothing here asserts on time.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from relstorage.helptext import help_text

from . import othervenv
from . import serverstate

#: zodbshootout's test names and what its figures are called.
TESTS = {'add': 'add', 'update': 'update', 'cold': 'read %d cold',
         'warm': 'write/read', 'hot': 'read %d hot', 'tpc': 'tpc'}
NAMES = {'ours': 'this storage', 'other': 'RelStorage 4.3',
         'filestorage': 'FileStorage',
         'pooled': 'this storage through pgbouncer',
         'galera': 'this storage on a 3-node Galera cluster',
         'pgjsonb': 'zodb-pgjsonb'}
#: The sides whose times are set against ours, round by round.
COMPARED = ('other', 'filestorage', 'pooled', 'galera', 'pgjsonb')


def parse_args(argv):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.shootout',
                                     description=help_text(__doc__))
    add = parser.add_argument
    add('--databases', default='sqlite,postgresql,mysql',
        help='comma separated (%(default)s)')
    add('--modes', default='hf,hp',
        help='history-free (hf), history-preserving (hp): %(default)s')
    add('--concurrency', default='1,2',
        help='client processes, comma separated (%(default)s)')
    add('--rounds', type=int, default=3,
        help='rounds, the contenders taking turns in each (%(default)s)')
    add('--objects', type=int, default=1000,
        help='objects per transaction (%(default)s)')
    add('--tests', default=','.join(TESTS),
        help='zodbshootout tests (%(default)s)')
    add('--processes', type=int, default=4,
        help="pyperf's worker processes per run (%(default)s)")
    add('--values', type=int, default=3,
        help="pyperf's values per worker (%(default)s)")
    add('--filestorage', action='store_true',
        help='FileStorage as a third contender beside SQLite, at c=1')
    add('--pgbouncer', action='store_true',
        help='this storage through a private pgbouncer in transaction '
             'pooling mode as a third contender on PostgreSQL')
    add('--pool-size', type=int, default=20,
        help="the pgbouncer's default_pool_size (%(default)s)")
    add('--galera', action='store_true',
        help='this storage on a private 3-node Galera cluster as a third '
             'contender in the MySQL rows')
    add('--other-venv', default=othervenv.DEFAULT_DIR,
        help='the virtualenv of the other side, made when missing '
             '(%(default)s)')
    add('--other-spec', default=othervenv.RS4,
        help='what it installs (%(default)s)')
    add('--no-other', dest='other', action='store_false', default=True,
        help='leave RelStorage 4.3 out')
    add('--pgjsonb', action='store_true',
        help='zodb-pgjsonb as a contender in the PostgreSQL rows')
    add('--pgjsonb-venv', default=othervenv.PGJSONB_DIR,
        help="zodb-pgjsonb's virtualenv, made when missing (%(default)s)")
    add('--pgjsonb-spec', default=othervenv.PGJSONB,
        help='what it installs (%(default)s)')
    add('--prefix', default='rsshoot',
        help='database names begin with this (%(default)s)')
    server_arguments(add)
    add('--json', help='write every value to this file')
    return parser.parse_args(argv)


def server_arguments(add):
    """The options naming the servers' connections (ordinary and admin)."""
    add('--pg-dsn', default='host=127.0.0.1 user=relstoragetest '
                            'password=relstoragetest',
        help='PostgreSQL connection, without dbname (%(default)s)')
    add('--pg-admin', default='host=/var/run/postgresql user=postgres '
                              'dbname=postgres',
        help='PostgreSQL connection that may create databases '
             '(%(default)s)')
    add('--mysql', default='host=127.0.0.1 user=relstoragetest '
                           'passwd=relstoragetest',
        help='MySQL connection keywords, without db (%(default)s)')
    add('--mysql-admin', default='host=127.0.0.1 user=root',
        help='MySQL connection that may create databases and grant '
             '(%(default)s)')


def adapter_section(args, database, name, sqlite_dir, pooler=None):
    """The adapter section for database *name* on the server of
    *database* (as *args* connect to it; through *pooler*, a PgBouncer,
    if given), or SQLite in *sqlite_dir*."""
    if database == 'postgresql' and pooler is not None:
        dsn = dict(_keywords(args.pg_dsn), host=pooler.host,
                   port=pooler.port)
        return ('<postgresql>\n dsn %s dbname=%s\n pooler transaction\n'
                '</postgresql>' % (' '.join('%s=%s' % item for item
                                            in dsn.items()), name))
    if database == 'postgresql':
        return '<postgresql>\n dsn %s dbname=%s\n</postgresql>' % (
            args.pg_dsn, name)
    if database == 'mysql':
        params = dict(_keywords(args.mysql), db=name)
        return '<mysql>\n%s\n</mysql>' % '\n'.join(
            ' %s %s' % item for item in params.items())
    return '<sqlite3>\n data-dir %s\n</sqlite3>' % sqlite_dir


def start_pooler(args):
    """A private pgbouncer in transaction pooling mode in front of the
    --pg-dsn server (removed at exit, if not before)."""
    from relstorage.testing.pgbouncer_server import PgBouncer
    from relstorage.testing.pgbouncer_server import RunningServer
    keywords = _keywords(args.pg_dsn)
    pooler = PgBouncer(RunningServer(keywords.get('host', '127.0.0.1'),
                                     keywords.get('port', 5432)),
                       'transaction', args.pool_size,
                       server_password=keywords.get('password'))
    pooler.user = keywords.get('user', pooler.user)
    pooler.start()
    return pooler


def _keywords(text):
    return dict(part.split('=', 1) for part in text.split())


#: What zodbshootout logs when a benchmark raised (it then records 666
#: seconds for it, divided by the loops).
FAILED_BENCHMARK = 'When running <'


class Contender:
    """One side: the Python it runs zodbshootout with and its config
    for each database and mode."""

    #: The config file's first line.
    imports = '%import relstorage'

    def __init__(self, name, python, args, workdir, env=None,
                 pooler=None):
        self.name = name
        self.python = python
        self.args = args
        self.workdir = workdir
        self.env = env or othervenv.neutral_env()
        #: The PgBouncer it reaches PostgreSQL through, if any.
        self.pooler = pooler

    def runs_on(self, database):
        return self.pooler is None or database == 'postgresql'

    def database(self, mode):
        return '%s_%s_%s' % (self.args.prefix, self.name, mode)

    def section(self, database, mode):
        if self.name == 'filestorage':
            path = os.path.join(self.workdir, 'fs-%s' % time.time_ns())
            os.makedirs(path)
            return ('<filestorage>\n path %s\n</filestorage>'
                    % os.path.join(path, 'Data.fs'))
        adapter = adapter_section(
            self.args, database, self.database(mode), os.path.join(
                self.workdir, 'sqlite-%s-%s' % (self.name, mode)),
            self.pooler)
        return ('<relstorage>\n keep-history %s\n%s\n</relstorage>'
                % ('true' if mode == 'hp' else 'false', adapter))

    def run(self, database, mode, concurrency, tests):
        """One zodbshootout run: {test: seconds per transaction (pyperf's
        mean)}, or {'error': ...}."""
        label = '%s-%s-%s' % (self.name, database, mode)
        config = os.path.join(self.workdir, label + '.conf')
        with open(config, 'w') as f:
            f.write('%s\n<zodb %s>\n%s\n</zodb>\n'
                    % (self.imports, label, self.section(database, mode)))
        out = os.path.join(self.workdir, label + '.json')
        if os.path.exists(out):
            os.unlink(out)
        argv = [self.python, '-m', 'zodbshootout', '-q',
                '-p', str(self.args.processes), '-n', str(self.args.values),
                '-w', '1', '--object-counts', str(self.args.objects),
                '-c', str(concurrency), '--include-mapping', 'no',
                # (PYTHONPATH: pyperf's workers import what this side
                # imports; the other side's environment has none.)
                '--inherit-environ', ','.join((
                    othervenv.MARIADB_SHIM_VAR, othervenv.PGJSONB_SHIM_VAR,
                    'PYTHONPATH')),
                '-o', out]
        if self.name != 'filestorage':
            argv += ['--zap', 'force']
        argv += [config] + list(tests)
        env = dict(self.env)
        if self.name == 'other' and database == 'mysql':
            env[othervenv.MARIADB_SHIM_VAR] = '1'
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True,
                              cwd=othervenv.neutral_dir(), env=env)
        seconds = time.perf_counter() - started
        if done.returncode or not os.path.exists(out):
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()
            return {'error': tail[-1] if tail else 'exit %d'
                    % done.returncode}
        if FAILED_BENCHMARK in done.stderr:
            # zodbshootout logs the exception and records 666 seconds.
            lines = done.stderr[done.stderr.index(FAILED_BENCHMARK):]
            found = [line for line in lines.splitlines()
                     if line and not line.startswith((' ', 'Traceback'))]
            return {'error': found[1] if len(found) > 1 else found[0]}
        return dict(_means(out, tests, self.args.objects), _seconds=seconds)


class PgjsonbContender(Contender):
    """zodb-pgjsonb from the virtualenv *venv*, on PostgreSQL only."""

    imports = '%import zodb_pgjsonb'

    def __init__(self, venv, args, workdir):
        othervenv.pgjsonb_shim(venv)
        super().__init__('pgjsonb', os.path.join(venv, 'bin', 'python'),
                         args, workdir, dict(othervenv.neutral_env(), **{
                             othervenv.PGJSONB_SHIM_VAR: '1'}))

    def runs_on(self, database):
        return database == 'postgresql'

    def section(self, database, mode):
        return pgjsonb_section('%s dbname=%s' % (
            self.args.pg_dsn, self.database(mode)), mode == 'hp')


def pgjsonb_section(dsn, keep_history):
    """zodb-pgjsonb's storage section: its defaults but for the cache
    warmer, a thread loading objects a while after start-up."""
    return ('<pgjsonb>\n dsn %s\n history-preserving %s\n'
            ' cache-warm-pct 0\n</pgjsonb>'
            % (dsn, 'true' if keep_history else 'false'))


class GaleraContender(Contender):
    """This storage on *cluster* (a started GaleraCluster): node 1 first
    in its replica-conf."""

    def __init__(self, cluster, args, workdir, env):
        super().__init__('galera', sys.executable, args, workdir, env)
        self.cluster = cluster
        self.conf = cluster.server_file()

    def section(self, database, mode):
        node = self.cluster.nodes[0]
        return ('<relstorage>\n keep-history %s\n replica-conf %s\n'
                '<mysql>\n host %s\n port %d\n user %s\n passwd %s\n'
                ' db %s\n</mysql>\n</relstorage>' % (
                    'true' if mode == 'hp' else 'false', self.conf,
                    node.host, node.port, node.user, node.password,
                    self.database(mode)))

    def create_databases(self, modes):
        conn = self.cluster.nodes[0]._admin_connect()
        try:
            cur = conn.cursor()
            user = self.cluster.nodes[0].user
            for mode in modes:
                name = self.database(mode)
                cur.execute('CREATE DATABASE IF NOT EXISTS `%s`' % name)
                for host in ('%', 'localhost', '127.0.0.1'):
                    cur.execute("GRANT ALL ON `%s`.* TO '%s'@'%s'"
                                % (name, user, host))
        finally:
            conn.close()


def start_galera(args, workdir, env, modes):
    """The Galera contender on a cluster started now, or None."""
    from relstorage.testing.galera_cluster import GaleraCluster
    from relstorage.testing.servers import NotInstalled
    from relstorage.testing.servers import ServerError
    try:
        cluster = GaleraCluster().start()
    except (NotInstalled, ServerError) as e:
        raise SystemExit('--galera: no cluster: %s' % e)
    contender = GaleraContender(cluster, args, workdir, env)
    contender.create_databases(modes)
    return contender


def _means(path, tests, objects):
    """{test: mean seconds} from pyperf's JSON."""
    with open(path) as f:
        suite = json.load(f)
    found = {}
    for bench in suite['benchmarks']:
        # pyperf keeps what all its benchmarks share (the name, when
        # there is only one) in the suite's metadata.
        name = dict(suite.get('metadata', {}),
                    **bench.get('metadata', {}))['name']
        values = [v for run in bench['runs'] for v in run.get('values', ())]
        for test in tests:
            label = ': ' + TESTS[test] % objects if '%' in TESTS[test] \
                else ': ' + TESTS[test]
            if label + ' ' in name + ' ' and values:
                found[test] = statistics.fmean(values)
    return found


def _create_databases(args, databases, names):
    """Create what is missing; an error names the statement to run."""
    if 'postgresql' in databases:
        import psycopg2
        try:
            conn = psycopg2.connect(args.pg_admin)
            conn.autocommit = True
            cur = conn.cursor()
            owner = _keywords(args.pg_dsn).get('user', 'postgres')
            for name in names:
                cur.execute('SELECT 1 FROM pg_database WHERE datname = %s',
                            (name,))
                if not cur.fetchone():
                    cur.execute('CREATE DATABASE "%s" OWNER "%s"'
                                % (name, owner))
            conn.close()
        except psycopg2.Error as e:
            raise SystemExit('cannot create the PostgreSQL databases %s '
                             'through --pg-admin %r: %s'
                             % (', '.join(names), args.pg_admin, e))
    if 'mysql' in databases:
        import MySQLdb
        user = _keywords(args.mysql).get('user', 'root')
        try:
            conn = MySQLdb.connect(**_keywords(args.mysql_admin))
            cur = conn.cursor()
            for name in names:
                cur.execute('CREATE DATABASE IF NOT EXISTS `%s`' % name)
                cur.execute('SELECT host FROM mysql.user WHERE user = %s',
                            (user,))
                for (host,) in cur.fetchall():
                    cur.execute("GRANT ALL ON `%s`.* TO '%s'@'%s'"
                                % (name, user, host))
            conn.close()
        except MySQLdb.Error as e:
            raise SystemExit('cannot create the MySQL databases %s through '
                             '--mysql-admin %r: %s'
                             % (', '.join(names), args.mysql_admin, e))


def server_state(args, databases, names):
    state = {'machine': serverstate.machine(), 'servers': {}}
    for database in databases:
        try:
            if database == 'postgresql':
                state['servers'][database] = serverstate.postgresql(
                    '%s dbname=postgres' % args.pg_dsn, names)
            elif database == 'mysql':
                state['servers'][database] = serverstate.mysql(
                    _keywords(args.mysql), names)
        except Exception as e:  # noqa: BLE001 -- reported, not fatal
            state['servers'][database] = {'error': str(e)}
    return state


def summarise(rows, tests):
    """Per (database, mode, c, test): each contender's median and range
    (ms), and the ratio of the other side's time to ours, round by round:
    its median and range."""
    table = []
    for key, by_name in rows.items():
        for test in tests:
            line = {'key': key, 'test': test, 'sides': {}}
            for name, runs in by_name.items():
                values = [r[test] * 1000 for r in runs if test in r]
                if values:
                    line['sides'][name] = (statistics.median(values),
                                           min(values), max(values))
            ours = [r.get(test) for r in by_name.get('ours', ())]
            for name in COMPARED:
                theirs = [r.get(test) for r in by_name.get(name, ())]
                ratios = [t / o for o, t in zip(ours, theirs) if o and t]
                if ratios:
                    line[name] = (statistics.median(ratios), min(ratios),
                                  max(ratios))
            table.append(line)
    return table


def print_table(table, file=sys.stdout):
    pgjsonb = any('pgjsonb' in line['sides'] for line in table)
    print('%-22s %-7s %22s %22s %20s %20s %20s' % (
        'database mode c', 'test', 'ours ms med [min-max]',
        'RS 4.3 ms med [range]', 'RS4/ours [range]', 'FS/ours [range]',
        'pooled|Galera/ours') + (
        ' %22s %20s' % ('pgjsonb ms med [range]', 'pgjsonb/ours [range]')
        if pgjsonb else ''), file=file)
    for line in table:
        def side(name):
            s = line['sides'].get(name)
            return '%.2f [%.2f-%.2f]' % s if s else '-'

        def ratio(name):
            r = line.get(name)
            return '%.2fx [%.2f-%.2f]' % r if r else '-'
        print('%-22s %-7s %22s %22s %20s %20s %20s' % (
            ' '.join(map(str, line['key'])), line['test'], side('ours'),
            side('other'), ratio('other'), ratio('filestorage'),
            ratio('pooled') if 'pooled' in line else ratio('galera'))
            + (' %22s %20s' % (side('pgjsonb'), ratio('pgjsonb'))
               if pgjsonb else ''), file=file)


def main(argv=None):
    args = parse_args(argv)
    databases = args.databases.split(',')
    modes = args.modes.split(',')
    levels = [int(c) for c in args.concurrency.split(',')]
    tests = args.tests.split(',')
    unknown = set(tests) - set(TESTS)
    if unknown:
        raise SystemExit('unknown tests: %s (known: %s)'
                         % (', '.join(sorted(unknown)), ', '.join(TESTS)))
    try:
        import zodbshootout  # noqa: F401 -- only checked for
        del zodbshootout
    except ImportError:
        raise SystemExit("this side needs zodbshootout: relstorage's bench "
                         "extra (or pip install zodbshootout==0.8.0 "
                         "pyperf==2.3.1 six)")
    workdir = tempfile.mkdtemp(prefix='speedtest-shootout-')
    ours_env = dict(os.environ)
    contenders = [Contender('ours', sys.executable, args, workdir, ours_env)]
    other = pgjsonb = None
    try:
        if args.other:
            venv = othervenv.ensure(args.other_venv, spec=args.other_spec)
            other = othervenv.check(venv)
            if 'mysql' in databases:
                othervenv.mariadb_shim(venv)
            contenders.append(Contender(
                'other', os.path.join(venv, 'bin', 'python'), args,
                workdir))
        if args.pgjsonb and 'postgresql' in databases:
            venv = othervenv.ensure_pgjsonb(args.pgjsonb_venv,
                                            args.pgjsonb_spec)
            pgjsonb = othervenv.check(venv, 'zodb_pgjsonb', 'zodb-pgjsonb')
            contenders.append(PgjsonbContender(venv, args, workdir))
    except othervenv.OtherVenvError as e:
        raise SystemExit(str(e))
    pooler = None
    if args.pgbouncer and 'postgresql' in databases:
        pooler = start_pooler(args)
        contenders.append(Contender('pooled', sys.executable, args,
                                    workdir, ours_env, pooler))
    names = []
    for database in databases:
        here = [c.database(m) for c in contenders if c.runs_on(database)
                for m in modes]
        _create_databases(args, [database], here)
        names.extend(name for name in here if name not in names)
    galera = None
    if args.galera and 'mysql' in databases:
        galera = start_galera(args, workdir, ours_env, modes)
    if other:
        print('other side: RelStorage %s from %s' % (
            other['version'], other['path']), flush=True)
    if pgjsonb:
        print('zodb-pgjsonb %s from %s' % (pgjsonb['version'],
                                           pgjsonb['path']), flush=True)
    rows = {}
    started = time.perf_counter()
    for round_ in range(args.rounds):
        for database in databases:
            for mode in modes:
                for level in levels:
                    key = (database, mode, level)
                    order = contenders if round_ % 2 == 0 \
                        else contenders[::-1]
                    if args.filestorage and database == 'sqlite' \
                            and level == 1 and mode == modes[0]:
                        order = order + [Contender(
                            'filestorage', sys.executable, args, workdir,
                            ours_env)]
                    if galera is not None and database == 'mysql':
                        order = order + [galera]
                    for contender in order:
                        if not contender.runs_on(database):
                            continue
                        result = contender.run(database, mode, level, tests)
                        rows.setdefault(key, {}).setdefault(
                            contender.name, []).append(result)
                        print('round %d %-10s %s c=%d %-12s %s' % (
                            round_ + 1, database, mode, level,
                            contender.name, result.get('error') or ', '.join(
                                '%s %.2f ms' % (t, result[t] * 1000)
                                for t in tests if t in result)), flush=True)
    if args.filestorage:
        # FileStorage ran once per round; it is set against both modes.
        for mode in modes:
            fs = rows.get(('sqlite', modes[0], 1), {}).get('filestorage')
            if fs and ('sqlite', mode, 1) in rows:
                rows[('sqlite', mode, 1)]['filestorage'] = fs
    table = summarise(rows, tests)
    state = server_state(args, databases, names)
    print('\n%d rounds in %.0f min; medians of the rounds, [min-max]; '
          'ratios are the other side\'s time over ours (above 1: ours is '
          'faster)' % (args.rounds, (time.perf_counter() - started) / 60))
    print_table(table)
    for line in serverstate.describe(state):
        print(line)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'args': vars(args), 'other': other,
                       'pgjsonb': pgjsonb, 'state': state,
                       'runs': [{'key': list(k), 'results': v}
                                for k, v in rows.items()],
                       'summary': table}, f, indent=1)
    shutil.rmtree(workdir, ignore_errors=True)
    if pooler is not None:
        pooler.remove()
    if galera is not None:
        galera.cluster.remove()
    errors = [r for by in rows.values() for runs in by.values()
              for r in runs if 'error' in r]
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
