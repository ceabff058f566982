"""SQLite: the threads of one process become the writer in the order they
asked (adapters.sqlite.adapter.WriterQueue). Trying again for SQLite's
lock, as between processes, let an unlucky thread lose to the others
for the whole commit-lock-timeout under load."""
import threading
import time

import transaction
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.adapters.sqlite.adapter import WriterQueue

from .dbs import DatabaseFactory


def _wait_until(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_turns_are_taken_in_order():
    queue = WriterQueue()
    assert queue.acquire(1)
    order = []

    def writer(name):
        assert queue.acquire(10)
        order.append(name)
        queue.release()
    threads = []
    for name in 'BCDE':
        thread = threading.Thread(target=writer, args=(name,))
        thread.start()
        threads.append(thread)
        _wait_until(lambda: len(queue._waiting) == len(threads))
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
