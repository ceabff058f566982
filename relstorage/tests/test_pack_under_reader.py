"""A pack under a reader (history-preserving, every database): a
transaction that began before a pack to now removed the revision it
sees reads that revision all the same, from the snapshot its poll began,
instead of failing with a ReadConflictError that ZODB (and Zope) would
have to retry."""
import time

import transaction
import ZODB
from persistent.mapping import PersistentMapping


def _write(db, value):
    with db.transaction() as conn:
        root = conn.root()
        if 'a' in root:
            root['a']['v'] = value
        else:
            root['a'] = PersistentMapping(v=value)
        a = root['a']
    return a._p_oid


def test_a_transaction_reads_its_view_through_a_pack_to_now(hp_factory):
    db = ZODB.DB(hp_factory.storage())
    try:
        oid = _write(db, 1)
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        tm.begin()  # the view: 'a' is 1; nothing read yet
        # Another process changes 'a' and packs to now, removing the
        # revision this transaction's view has of it.
        other = ZODB.DB(hp_factory.storage())
        try:
            _write(other, 2)
            time.sleep(0.01)
            other.pack()
            assert len(other.storage.history(oid, size=10)) == 1
        finally:
            other.close()
        # Nothing of 'a' left in this process: the read goes to the
        # database.
        conn.cacheMinimize()
        conn._storage._cache.clear()
        assert conn.root()['a']['v'] == 1
        tm.abort()
        tm.begin()
        assert conn.root()['a']['v'] == 2
        tm.abort()
        conn.close()
    finally:
        db.close()
