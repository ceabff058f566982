"""Conversion benchmark: build a FileStorage, copy it into each database
with ``zodbconvert`` and report objects per second -- optionally next to
another zodbconvert (RelStorage 4.3 installed in its own virtualenv) on
the same file, databases and machine, in the same run.

    python -m relstorage_speedtest.convert [--objects 100000]
        [--transactions 10000] [--databases sqlite,postgresql,mysql]
        [--other-venv DIR]
        [--json FILE]

Both tools run as separate processes from the command line, with
``--clear``, into databases emptied of every table first. Not a test:
nothing here asserts on time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping
from ZODB.FileStorage import FileStorage

from relstorage.helptext import help_text
from relstorage.testing.dbs import empty_database


def build_filestorage(path, objects, transactions):
    """*objects* new objects spread over *transactions* transactions: each
    adds a parent mapping of small mappings to a BTree (so a commit
    rewrites one bucket, not an ever larger object)."""
    db = ZODB.DB(FileStorage(path))
    per = max(1, objects // transactions)
    try:
        with db.transaction() as conn:
            conn.root()['parents'] = OOBTree()
        conn = db.open()
        parents = conn.root()['parents']
        for t in range(transactions):
            parent = PersistentMapping()
            for i in range(per):
                parent[i] = PersistentMapping(n=i, text='v%d-%d' % (t, i))
            parents[t] = parent
            transaction.commit()
            if t % 500 == 0:
                conn.cacheMinimize()
        conn.close()
    finally:
        db.close()


def _adapter_section(database, keep_history, which):
    from relstorage.testing.dbs import mysql_params
    from relstorage.testing.dbs import pg_dsn
    if database == 'postgresql':
        return '<postgresql>\n dsn %s\n</postgresql>' % pg_dsn(
            keep_history, which)
    if database == 'mysql':
        params = mysql_params(keep_history, which)
        return '<mysql>\n%s\n</mysql>' % '\n'.join(
            ' %s %s' % (k, v) for k, v in params.items() if v)
    return '<sqlite3>\n data-dir %s\n</sqlite3>' % tempfile.mkdtemp(
        prefix='speedtest-convert-')


def convert(command, fs_path, database, keep_history, which):
    empty_database(database, keep_history, which)
    config = tempfile.NamedTemporaryFile('w', suffix='.conf', delete=False)
    config.write('%%import relstorage\n<filestorage source>\n path %s\n'
                 ' read-only true\n</filestorage>\n<relstorage destination>\n'
                 ' keep-history %s\n%s\n</relstorage>\n'
                 % (fs_path, 'true' if keep_history else 'false',
                    _adapter_section(database, keep_history, which)))
    config.close()
    started = time.perf_counter()
    proc = subprocess.run(command + ['--clear', config.name],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    os.unlink(config.name)
    if proc.returncode:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return {'error': tail[-1] if tail else 'exit %d' % proc.returncode}
    return {'seconds': seconds}


def main(argv=None):
    parser = argparse.ArgumentParser(prog='relstorage_speedtest.convert',
                                     description=help_text(__doc__))
    parser.add_argument('--objects', type=int, default=100000,
                        help='objects in the FileStorage built (%(default)s)')
    parser.add_argument('--transactions', type=int, default=10000,
                        help='transactions they are written in '
                             '(%(default)s)')
    parser.add_argument('--databases', default='sqlite,postgresql,mysql',
                        help='comma separated (%(default)s)')
    parser.add_argument('--other-venv',
                        help='a virtualenv whose bin/zodbconvert to compare '
                             'with (e.g. RelStorage 4.3.0)')
    parser.add_argument('--json', help='write the figures to this file')
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix='speedtest-convert-')
    fs_path = os.path.join(workdir, 'Data.fs')
    started = time.perf_counter()
    build_filestorage(fs_path, args.objects, args.transactions)
    print('built %s: %d objects in %d transactions, %.1f MB, %.1f s'
          % (fs_path, args.objects, args.transactions,
             os.path.getsize(fs_path) / 1e6, time.perf_counter() - started),
          flush=True)
    contenders = {'relstorage': [sys.executable, '-m',
                                 'relstorage.zodbconvert']}
    if args.other_venv:
        contenders['other'] = [os.path.join(args.other_venv, 'bin',
                                            'zodbconvert')]
    records = args.objects + args.transactions + 1
    rows = []
    for database in args.databases.split(','):
        for keep_history in (True, False):
            row = {'database': database, 'keep_history': keep_history}
            for name, command in contenders.items():
                # The other tool gets a database of its own ('misc').
                which = 'dst' if name == 'relstorage' else 'misc'
                figures = convert(command, fs_path, database, keep_history,
                                  which)
                if 'seconds' in figures:
                    figures['objects_per_second'] = (records
                                                     / figures['seconds'])
                row[name] = figures
                print('%-10s %-2s %-10s %s' % (
                    database, 'HP' if keep_history else 'HF', name,
                    '%.1f s, %.0f objects/s' % (
                        figures['seconds'], figures['objects_per_second'])
                    if 'seconds' in figures else 'failed: ' + figures['error']),
                    flush=True)
            if 'other' in row and 'seconds' in row['other'] \
                    and 'seconds' in row['relstorage']:
                row['ratio'] = (row['other']['seconds']
                                / row['relstorage']['seconds'])
                print('%-10s %-2s ratio (other / relstorage time): %.2f'
                      % (database, 'HP' if keep_history else 'HF',
                         row['ratio']), flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'objects': args.objects,
                       'transactions': args.transactions,
                       'cpus': os.cpu_count(),
                       'python': sys.version.split()[0], 'runs': rows},
                      f, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
