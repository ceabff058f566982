"""The client side of test_silent_network, run inside a network namespace:

    python -m relstorage.tests.silent_network_client DB HISTORY HOST PORT \
        TIMEOUT

It opens a storage on the server at HOST:PORT with network-timeout
TIMEOUT and, for each case, makes a call and, at the moment the link is
to go silent, says ``{"cut": CASE}`` and waits for a line; the test cuts
the link and sends ``go``; the client goes on and reports, as one JSON
line, the error the call ended with and after how long. The test
restores the link and sends ``next``: the client commits a new
transaction and reports whether that worked. Finally it reports the
values of every commit it saw succeed, and those whose outcome it was
told is unknown.

The cases: a load in a snapshot; a poll; a commit cut between vote and
finish (its first round trip, for the commit lock, meets the silence:
nothing was committed, and a retryable error says so); a commit cut as
its final statements (with the COMMIT) go out (the client cannot know
whether the server got them: CommitOutcomeUnknown).
"""
import faulthandler
import json
import signal
import sys
import time
import types

from ZODB.Connection import TransactionMetaData
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import z64

from relstorage.exceptions import CommitOutcomeUnknown
from relstorage.testing.dbs import DatabaseFactory

CASES = ('load', 'poll', 'commit', 'commit-sent')


def say(**what):
    print(json.dumps(what), flush=True)


def wait_for(word):
    line = sys.stdin.readline().strip()
    if line != word:
        raise SystemExit('expected %r, got %r' % (word, line))


class Client:

    def __init__(self, db, keep_history, host, port, timeout):
        server = types.SimpleNamespace(host=host, port=int(port),
                                       user='relstoragetest',
                                       password='relstoragetest')
        factory = DatabaseFactory(db, keep_history == 'True', child=True,
                                  server=server)
        # No pickle cache: every load goes to the server.
        self.storage = factory.storage(network_timeout=float(timeout),
                                       cache_local_mb=0,
                                       commit_lock_timeout=60)
        self.committed = []
        self.unknown = []
        self.oid = None

    def commit(self, value, instance=None, finish=True):
        """Store *value* in the test object; returns the instance with
        the transaction voted when not *finish*."""
        inst = instance or self.storage.new_instance()
        inst.poll_invalidations()
        if self.oid is None:
            self.oid, serial = inst.new_oid(), z64
        else:
            serial = inst.load(self.oid)[1]
        t = TransactionMetaData()
        inst.tpc_begin(t)
        inst.store(self.oid, serial, zodb_pickle(MinPO(value)), '', t)
        inst.tpc_vote(t)
        if not finish:
            return inst, t
        inst.tpc_finish(t)
        self.committed.append(value)
        inst.release()
        return None

    def run(self):
        value = 0
        self.commit(value)
        for case in CASES:
            value += 1
            call = self.arm(case, value)
            started = time.monotonic()
            try:
                call()
                error, message = None, ''
            except Exception as e:  # noqa: BLE001 -- reported to the test
                error, message = type(e).__name__, str(e)
                if isinstance(e, CommitOutcomeUnknown):
                    self.unknown.append(value)
            say(case=case, error=error, message=message,
                seconds=time.monotonic() - started)
            wait_for('next')
            value += 1
            started = time.monotonic()
            self.commit(value)
            say(case=case, next_commit='ok',
                seconds=time.monotonic() - started)
        say(committed=self.committed, unknown=self.unknown,
            oid=int.from_bytes(self.oid, 'big'))
        self.storage.close()

    @staticmethod
    def silence(case):
        """Have the test cut the link now."""
        say(cut=case)
        wait_for('go')

    def arm(self, case, value):
        """Prepare *case*; return the call that meets the silence."""
        if case.startswith('commit'):
            inst, t = self.commit(value, finish=False)
            session = inst._commit.session.session
            if case == 'commit':
                self.silence(case)
            else:
                sent = session.execute_script

                def execute_script(statements):
                    self.silence(case)
                    return sent(statements)
                session.execute_script = execute_script

            def finish():
                inst.tpc_finish(t)
                self.committed.append(value)
            return finish
        inst = self.storage.new_instance()
        inst.poll_invalidations()
        if case == 'load':
            # The first read begins the snapshot; the next one, in it,
            # meets the silence.
            inst.load(self.oid)
        self.silence(case)
        if case == 'load':
            return lambda: inst.load(self.oid)
        return inst.poll_invalidations


def main():
    # The test asks for every thread's stack when the client hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    Client(*sys.argv[1:6]).run()


if __name__ == '__main__':
    main()
