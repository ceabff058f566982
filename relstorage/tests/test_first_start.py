"""Processes started at once on a new, empty database: each creates the
schema or finds it made, and each ZODB.DB() finds the root object or
makes it, none with a ConflictError on it."""
import os
import subprocess
import sys
import textwrap

import pytest
import ZODB
import ZODB.config

from relstorage.testing.dbs import DATABASES
from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import empty_database
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require

PROCESSES = 3

#: One process: opens the storage (the schema made now, or found), then
#: ZODB.DB(); every process reaches the vote of the root's creation
#: before any goes on, so that each of them found no root.
CHILD = textwrap.dedent('''\
    import os, sys, time
    import ZODB, ZODB.config
    config, barrier, count, me = sys.argv[1:5]
    import relstorage.storage.tpc as tpc
    vote = tpc.vote
    def waiting_vote(commit, pending, waited=[]):
        if not waited:
            waited.append(1)
            open(os.path.join(barrier, me), 'w').close()
            deadline = time.monotonic() + 60
            while len(os.listdir(barrier)) < int(count):
                assert time.monotonic() < deadline, 'nobody else came'
                time.sleep(0.01)
        return vote(commit, pending)
    tpc.vote = waiting_vote
    storage = ZODB.config.storageFromFile(open(config))
    try:
        db = ZODB.DB(storage)
    except Exception as e:
        import traceback; traceback.print_exc()
        sys.exit('ZODB.DB(): %s: %s' % (type(e).__name__, e))
    # Writing into the root at once is the application's conflict to
    # retry, as for any object.
    import transaction
    for attempt in transaction.manager.attempts(10):
        with attempt:
            conn = db.open()
            conn.root()[me] = 1
    conn.close()
    db.close()
    ''')


def _section(db, tmp_path):
    if db == 'sqlite':
        return '<sqlite3>\n data-dir %s\n</sqlite3>' % (tmp_path / 'data')
    if db == 'postgresql':
        return '<postgresql>\n dsn %s\n</postgresql>' % pg_dsn(True, 'misc')
    p = mysql_params(True, 'misc')
    return '<mysql>\n%s\n</mysql>' % '\n'.join(
        ' %s %s' % (k, v) for k, v in p.items() if v)


@pytest.mark.parametrize('db', DATABASES)
def test_processes_starting_at_once_on_a_new_database(db, tmp_path):
    require(db)
    if db != 'sqlite':
        empty_database(db, True, 'misc')
    config = tmp_path / 'site.conf'
    config.write_text('%%import relstorage\n<relstorage>\n%s\n'
                      '</relstorage>\n' % _section(db, tmp_path))
    barrier = tmp_path / 'barrier'
    barrier.mkdir()
    script = tmp_path / 'child.py'
    script.write_text(CHILD)
    children = [subprocess.Popen(
        [sys.executable, str(script), str(config), str(barrier),
         str(PROCESSES), 'p%d' % i], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=child_env())
        for i in range(PROCESSES)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=180)
        results.append((child.returncode, out, err))
    # Each of them found the root missing and went to create it.
    assert sorted(os.listdir(str(barrier))) == [
        'p%d' % i for i in range(PROCESSES)]
    for code, out, err in results:
        assert code == 0, (out, err[-3000:])
    try:
        database = ZODB.DB(ZODB.config.storageFromFile(open(str(config))))
        with database.transaction() as conn:
            # Each wrote into the one root.
            assert sorted(conn.root().keys()) == [
                'p%d' % i for i in range(PROCESSES)]
        database.close()
    finally:
        if db != 'sqlite':
            empty_database(db, True, 'misc')
