"""The pack lock behind a transaction pooler is a lease (see
adapters.postgresql.pooler): a pack stopped past it, whose lease another
pack then took, stops at its next batch and leaves the rest to the other
one. Against a private pgbouncer (see testing.pgbouncer_server)."""
import threading
import time

import pytest
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf

from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.adapters.postgresql import pooler as pooled
from relstorage.exceptions import PackLockLost
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.storage.pack.pack import STEP
from relstorage.testing.dbs import require_pooler

DATABASE = 'relstoragetest_hf'
#: Objects made, and those of them left referenced: the garbage takes
#: three batches of one step (one of the first pack's, two of the
#: second's).
MADE = 3 * STEP + 100
KEPT = 100
#: Bounds the waits of the two packs for each other.
WAIT = 120


def _storage(pooler):
    return RelStorage(PostgreSQLAdapter(
        pooler.dsn(DATABASE), pooler='transaction',
        options=Options(keep_history=False, pack_batch_timeout=0.0001)))


def _scalar(pooler, sql, params=()):
    conn = pooler.backend._admin_connect(DATABASE)
    try:
        cur = conn.cursor()
        cur.execute(sql, params)
        return cur.fetchone()[0]
    finally:
        conn.close()


def _rows(pooler):
    return _scalar(pooler, 'SELECT count(*) FROM object_state')


def test_a_pack_whose_lease_lapsed_stops_at_its_next_batch():
    pooler = require_pooler('transaction', pool_size=4)
    first, second = _storage(pooler), _storage(pooler)
    first.zap_all()
    db = ZODB.DB(first)
    try:
        with db.transaction() as conn:
            for i in range(MADE):
                conn.root()['o%d' % i] = PersistentMapping(i=i)
        with db.transaction() as conn:
            for i in range(KEPT, MADE):
                del conn.root()['o%d' % i]
        pack_time = time.time() + 1

        second_paused, second_go = threading.Event(), threading.Event()
        outcome = {}

        def second_progress(done, total):
            if not second_paused.is_set():
                second_paused.set()     # after its first batch
                second_go.wait(WAIT)

        def second_pack():
            try:
                outcome['second'] = second.pack_with_result(
                    pack_time, referencesf, progress=second_progress)
            except Exception as e:  # noqa: BLE001 -- asserted below
                outcome['second'] = e
            finally:
                second_paused.set()

        second_thread = threading.Thread(target=second_pack)
        handed_over = []

        def first_progress(done, total):
            if handed_over:
                return
            # The first pack stops here past its lease (as a stopped
            # process would, its renewing thread too), the lease lapses,
            # and the second pack takes it and removes a batch of its own.
            (keeper,) = [thread for thread in threading.enumerate()
                         if thread.name == 'relstorage pack lease']
            keeper.stop()
            assert _scalar(
                pooler, "UPDATE relstorage_meta SET value = split_part("
                "value, ' ', 1) || ' 0' WHERE name = %s RETURNING 1",
                (pooled.LEASE_NAME,)) == 1
            second_thread.start()
            assert second_paused.wait(WAIT)
            handed_over.append(_rows(pooler))

        try:
            with pytest.raises(PackLockLost,
                               match='lost to another pack') as raised:
                first.pack_with_result(pack_time, referencesf,
                                       progress=first_progress)
            assert 'stops here, removing nothing more' in str(raised.value)
            # Its first batch and the second pack's removed STEP objects
            # each; the first one's next batch removed nothing.
            assert handed_over == [MADE + 1 - 2 * STEP]
            assert _rows(pooler) == handed_over[0]
            assert 'second' not in outcome   # still paused
        finally:
            second_go.set()
            if second_thread.ident is not None:   # started
                second_thread.join(WAIT)
        result = outcome['second']
        assert not isinstance(result, Exception), result
        assert result['objects_removed'] == MADE - KEPT - STEP
        assert _rows(pooler) == KEPT + 1
        with db.transaction() as conn:
            assert sorted(conn.root()) == sorted(
                'o%d' % i for i in range(KEPT))
            assert [conn.root()['o%d' % i]['i'] for i in range(KEPT)] == \
                list(range(KEPT))
        assert _scalar(pooler, 'SELECT count(*) FROM relstorage_meta WHERE '
                       'name = %s', (pooled.LEASE_NAME,)) == 0
        assert _scalar(pooler, 'SELECT count(*) FROM pack_gc') == 0
        # A later pack finds nothing left to do.
        assert first.pack_with_result(
            time.time() + 1, referencesf)['objects_removed'] == 0
    finally:
        db.close()
        second.close()
