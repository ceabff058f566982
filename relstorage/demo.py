"""``relstorage-demo``: two processes share one database and see each
other's commits.

It writes a zope.conf holding an empty ``<relstorage>`` section (the
embedded SQLite default), opens it from two worker processes, lets each
commit messages and read the other's, and prints what happened.
"""
import argparse
import os
import subprocess
import sys
import time

import transaction
import ZConfig
import ZODB.config
from persistent.list import PersistentList
from persistent.mapping import PersistentMapping

from .children import child_env
from .children import python_command
from .config import default_sqlite_data_dir
from .defaultlocation import default_data_dir
from .exceptions import RelStorageError
from .siteconfig import config_error_text
from .siteconfig import load_config

CONF = """\
%%import relstorage
<zodb>
  <relstorage>
    name %(name)s
  </relstorage>
</zodb>
"""

WORKERS = ('alice', 'bob')


def open_db(conf_path):
    """The database the file at *conf_path* configures (as
    ZODB.config.databaseFromURL opens it)."""
    config, _ = load_config(ZODB.config.getDbSchema(), conf_path)
    return ZODB.config.databaseFromConfig(config.database)


def worker(conf_path, me, rounds):
    other = [w for w in WORKERS if w != me][0]
    db = open_db(conf_path)
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    try:
        for i in range(1, rounds + 1):
            tm.begin()
            conn.root()['messages'][me].append('%s #%d' % (me, i))
            tm.commit()
            print('%-5s committed "%s #%d"' % (me, me, i), flush=True)
            time.sleep(0.3)
            tm.begin()
            seen = list(conn.root()['messages'][other])
            tm.abort()
            print('%-5s sees %s\'s commits: %s' % (me, other, seen or 'none yet'),
                  flush=True)
        # Wait (bounded) until every message of the other worker arrived.
        deadline = time.time() + 30
        while time.time() < deadline:
            tm.begin()
            seen = list(conn.root()['messages'][other])
            tm.abort()
            if len(seen) == rounds:
                break
            time.sleep(0.1)
        print('%-5s finally sees all of %s\'s %d commits: %s'
              % (me, other, len(seen), seen), flush=True)
        return 0 if len(seen) == rounds else 1
    finally:
        conn.close()
        db.close()


def main(argv=None):
    """Runs the demo; a config file that cannot be read (status 2) or a
    database that cannot be opened (status 1) is one line on stderr."""
    try:
        return _main(argv)
    except ZConfig.ConfigurationError as e:
        print('relstorage-demo: %s' % config_error_text(e), file=sys.stderr)
        return 2
    except RelStorageError as e:
        print('relstorage-demo: %s: %s' % (type(e).__name__, e),
              file=sys.stderr)
        return 1


def _main(argv):
    parser = argparse.ArgumentParser(
        prog='relstorage-demo',
        description='Two processes commit to one relstorage database '
                    '(embedded SQLite by default) and see each other.')
    parser.add_argument('--config', help='use this zope.conf instead of '
                        'writing one for the SQLite default')
    parser.add_argument('--rounds', type=int, default=3,
                        help='commits each process makes (default 3)')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        return worker(args.config, args.worker, args.rounds)

    conf_path = args.config
    if conf_path is None:
        name = 'demo'
        # Laid out as a Zope instance: etc/zope.conf, and the database
        # the bare section opens under var/.
        etc = os.path.join(default_sqlite_data_dir(name), 'etc')
        os.makedirs(etc, mode=0o700, exist_ok=True)
        conf_path = os.path.join(etc, 'zope.conf')
        with open(conf_path, 'w') as f:
            f.write(CONF % {'name': name})
        print('Wrote %s:\n%s' % (conf_path, CONF % {'name': name}))
        print('The database lives in %s\n'
              % default_data_dir(conf_path, name, read_only=True))

    db = open_db(conf_path)
    with db.transaction() as conn:
        conn.root()['messages'] = PersistentMapping(
            {w: PersistentList() for w in WORKERS})
    print('Opened %s; starting two worker processes.\n' % db.storage.getName())
    db.close()

    procs = [subprocess.Popen(
        python_command('relstorage.demo', '--config', conf_path,
                       '--rounds', args.rounds, '--worker', w),
        env=child_env()) for w in WORKERS]
    codes = [p.wait(timeout=120) for p in procs]

    db = open_db(conf_path)
    with db.transaction() as conn:
        messages = {w: list(v) for w, v in conn.root()['messages'].items()}
    storage = db.storage
    print('\nAfter both workers finished, the database holds:')
    for w in WORKERS:
        print('  %-5s %s' % (w, messages[w]))
    print('  %d objects, last transaction %s'
          % (len(storage), storage.lastTransaction().hex()))
    db.close()
    ok = not any(codes) and all(len(messages[w]) == args.rounds
                                for w in WORKERS)
    print('\nDemo %s.' % ('succeeded: each process saw the other\'s commits'
                          if ok else 'FAILED'))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
