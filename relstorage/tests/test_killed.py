"""A client process killed with SIGKILL in the middle of a commit (after
tpc_vote has locked its rows, or in tpc_finish holding the commit lock):
the others go on within commit-lock-timeout, and the database holds no
trace of the half-done transaction."""
import select
import signal
import subprocess
import sys

import pytest
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env

CHILD = r'''
import sys, time
import transaction, ZODB
from persistent.mapping import PersistentMapping
from relstorage.testing.dbs import DatabaseFactory
db_name, keep_history, data_dir, phase = sys.argv[1:5]
storage = DatabaseFactory.in_child(db_name, keep_history, data_dir).storage()
db = ZODB.DB(storage)
tm = transaction.TransactionManager()
conn = db.open(transaction_manager=tm)
inst = conn._storage

def stop():
    print('ready', flush=True)
    time.sleep(600)

if phase == 'voted':
    vote = inst.tpc_vote
    def tpc_vote(txn):
        vote(txn)
        stop()
    inst.tpc_vote = tpc_vote
else:
    locker = inst._commit.store_session().locker
    hold = locker.hold_commit_lock
    def hold_commit_lock(session, sql):
        hold(session, sql)
        stop()
    locker.hold_commit_lock = hold_commit_lock
tm.begin()
tm.get().note('killed')
conn.root()['a']['n'] = 99
conn.root()['b'] = PersistentMapping(n=99)
tm.commit()
'''


@pytest.mark.parametrize('phase', ['voted', 'holding the commit lock'])
def test_client_killed_mid_commit_leaves_no_trace(factory, phase):
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            conn.root()['a'] = PersistentMapping(n=1)
    finally:
        db.close()
    env = child_env()
    child = subprocess.Popen(
        [sys.executable, '-c', CHILD, factory.db, str(factory.keep_history),
         factory.data_dir(), phase],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready, 'the child never reached the commit'
        line = child.stdout.readline()
        assert line.strip() == 'ready', child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL

    # Another client commits the same object, waiting no longer than its
    # commit-lock-timeout (a lock left behind would make this fail).
    storage = factory.storage(commit_lock_timeout=10)
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            assert conn.root()['a']['n'] == 1
            assert 'b' not in conn.root()
            conn.root()['a']['n'] = 2
        with db.transaction() as conn:
            assert conn.root()['a']['n'] == 2
            assert 'b' not in conn.root()
        if factory.keep_history:
            notes = [t['description'] for t in storage.undoLog(0, 100)]
            assert b'killed' not in notes
            assert len(notes) == 3  # root, a, and the change to 2
    finally:
        db.close()
