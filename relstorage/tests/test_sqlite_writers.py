"""SQLite: the threads of one process become the writer in the order they
asked (adapters.sqlite.session.WriterQueue). Trying again for SQLite's
lock, as between processes, let an unlucky thread lose to the others
for the whole commit-lock-timeout under load."""
import os
import threading
import time

import transaction
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.adapters.sqlite.session import WriterQueue
from relstorage.testing.dbs import DatabaseFactory


def _wait_until(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def _line_up(queue, calls):
    """Start each ``(target, args)`` of *calls* in a thread of its own,
    the next once the one before waits in *queue*; the threads."""
    threads = []
    for target, args in calls:
        thread = threading.Thread(target=target, args=args)
        thread.start()
        threads.append(thread)
        _wait_until(lambda: len(queue._waiting) == len(threads))
    return threads


def test_turns_are_taken_in_order():
    queue = WriterQueue()
    assert queue.acquire(1)
    order = []

    def writer(name):
        assert queue.acquire(10)
        order.append(name)
        queue.release()
    threads = _line_up(queue, [(writer, (name,)) for name in 'BCDE'])
    queue.release()
    for thread in threads:
        thread.join(10)
    assert order == list('BCDE')


def test_a_waiter_that_gives_up_leaves_no_trace():
    queue = WriterQueue()
    assert queue.acquire(1)
    assert not queue.acquire(0.05)
    assert not queue._waiting
    queue.release()
    assert queue.acquire(0)     # free again
    queue.release()


def _begin_and_end(adapter, name, order):
    session = adapter.open_connection(True)
    try:
        session.begin('BEGIN IMMEDIATE')
        order.append(name)
        session.rollback()
    finally:
        session.close()


def test_storages_opened_separately_take_their_turns_in_order():
    """Adapters of one database file in one process (a DB opened per
    thread, as ZODB's race tests do) share one queue: their writers
    wait in it in the order they came, not at SQLite's lock, where the
    last to come won most often and one writer lost to 63 others for
    the whole commit-lock-timeout."""
    factory = DatabaseFactory('sqlite', False)
    adapters = [factory.adapter(commit_lock_timeout=10) for _ in range(6)]
    try:
        queue = adapters[0].writers
        assert all(adapter.writers is queue for adapter in adapters)
        first = adapters[0].open_connection(True)
        first.begin('BEGIN IMMEDIATE')
        order = []
        threads = _line_up(queue, [
            (_begin_and_end, (adapter, name, order))
            for adapter, name in zip(adapters[1:], 'BCDEF')])
        first.rollback()
        first.close()
        for thread in threads:
            thread.join(30)
        assert order == list('BCDEF')
        assert queue._taken is False
    finally:
        for adapter in adapters:
            adapter.close()
        factory.cleanup()


def test_a_forked_child_has_a_queue_of_its_own():
    """A turn of the parent's, taken when it forked, is no one's to give
    back in the child: the child's writer does not wait for it."""
    factory = DatabaseFactory('sqlite', False)
    adapter = factory.adapter(commit_lock_timeout=5)
    try:
        assert adapter.writers.acquire(1)
        pid = os.fork()
        if pid == 0:    # the child
            code = 1
            try:
                _begin_and_end(adapter, 'child', [])
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        adapter.writers.release()
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        adapter.close()
        factory.cleanup()


def test_many_threads_commit_to_one_sqlite_database():
    """Eight threads commit in a loop through one storage (as ZODB
    connections of a threaded application do): every commit goes
    through and the counts add up."""
    factory = DatabaseFactory('sqlite', False)
    try:
        db = ZODB.DB(factory.storage(zap=True, commit_lock_timeout=10))
        with db.transaction() as conn:
            for n in range(8):
                conn.root()[n] = PersistentMapping(count=0)
        errors = []

        def work(n):
            manager = transaction.TransactionManager()
            conn = db.open(manager)
            try:
                for _ in range(40):
                    conn.root()[n]['count'] += 1
                    manager.commit()
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(e)
            finally:
                conn.close()
        threads = [threading.Thread(target=work, args=(n,))
                   for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors
        with db.transaction() as conn:
            assert [conn.root()[n]['count'] for n in range(8)] == [40] * 8
        assert db.storage._adapter.writers._taken is False
        db.close()
    finally:
        factory.cleanup()
