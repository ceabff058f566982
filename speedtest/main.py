"""``speedtest``: write N objects per transaction, read them back in a new
connection, check that what was read equals what was written, and report
the time per transaction for each ``<zodb NAME>`` section of a config file
(by default, the embedded SQLite storage in a temporary directory).
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import transaction
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping

DEFAULT_CONFIG = """\
%%import relstorage
<zodb sqlite>
  <relstorage>
    keep-history false
    <sqlite3>
      data-dir %s
    </sqlite3>
  </relstorage>
</zodb>
"""


class SpeedTestError(Exception):
    """What was read back differs from what was written."""


def load_databases(config_text):
    """``[(name, factory)]`` for each ``<zodb NAME>`` section."""
    from ZConfig import loadConfigFile
    import io
    schema = ZODB.config.getDbSchema()
    config, _ = loadConfigFile(schema, io.StringIO(config_text))
    return [(section.name, section) for section in config.database]


def write_read(db, objects, transactions):
    """Mean seconds per transaction for writing and for reading back."""
    writes, reads = [], []
    for t in range(transactions):
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        start = time.perf_counter()
        tm.begin()
        root = conn.root()
        batch = root['t%d' % t] = PersistentMapping()
        for i in range(objects):
            batch[i] = PersistentMapping(value='%d-%d' % (t, i))
        tm.commit()
        writes.append(time.perf_counter() - start)
        conn.close()

        db.cacheMinimize()
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        start = time.perf_counter()
        tm.begin()
        batch = conn.root()['t%d' % t]
        for i in range(objects):
            if batch[i]['value'] != '%d-%d' % (t, i):
                raise SpeedTestError('object %d of transaction %d read back '
                                     'wrong' % (i, t))
        reads.append(time.perf_counter() - start)
        tm.abort()
        conn.close()
    return statistics.mean(writes), statistics.mean(reads)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='speedtest', description=__doc__)
    parser.add_argument('config', nargs='?',
                        help='zope.conf-style file of <zodb NAME> sections')
    parser.add_argument('-n', '--objects', type=int, default=100)
    parser.add_argument('-t', '--transactions', type=int, default=10)
    parser.add_argument('--json', help='write the results to this file')
    args = parser.parse_args(argv)

    tmp = None
    if args.config:
        with open(args.config) as f:
            text = f.read()
    else:
        tmp = tempfile.mkdtemp(prefix='speedtest-')
        text = DEFAULT_CONFIG % tmp
    results = {'python': platform.python_version(), 'cpus': os.cpu_count(),
               'objects': args.objects, 'transactions': args.transactions,
               'contenders': {}}
    try:
        print('%-20s %14s %14s' % ('contender', 'write ms/txn', 'read ms/txn'))
        for name, section in load_databases(text):
            db = section.open()
            try:
                write, read = write_read(db, args.objects, args.transactions)
            finally:
                db.close()
            results['contenders'][name] = {'write': write, 'read': read}
            print('%-20s %14.2f %14.2f' % (name, write * 1000, read * 1000))
    except SpeedTestError as e:
        print('speedtest: ERROR: %s' % e, file=sys.stderr)
        return 2
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
