"""Reading a RelStorage 4 database as it is, for zodbconvert (the SQL of
``storage.relstorage4.RelStorage4Source``).

Nothing is written: RelStorage 4's own tables are read in one snapshot,
by their own names. Its blobs are read in pieces, so none is held whole
in memory (RelStorage 4 keeps each blob in one large object on
PostgreSQL and in one row on SQLite).
"""
from zope.interface import implementer

from ..exceptions import UpgradeRefused
from .sql import SQL
from .interfaces import IRelStorage4Reader

#: Bytes of a blob read per statement.
PIECE = 1 << 20
#: The newest tid in {table}.
LAST_TID = SQL('SELECT MAX(tid) FROM {table}')
#: A page of the transactions in {table}, from one tid to another.
TRANSACTIONS = SQL(
    'SELECT tid, username, description, extension, packed '
    'FROM {table} WHERE tid >= %s AND tid <= %s AND tid > 0 '
    'ORDER BY tid LIMIT %s')


@implementer(IRelStorage4Reader)
class RelStorage4Reader:

    def __init__(self, adapter):
        self.adapter = adapter
        schema = adapter.schema
        self.session = schema.relstorage4_session()
        try:
            self.session.begin(adapter.load_begin_sql)
            self.mode = schema.relstorage4_mode(self.session)
        except BaseException:
            self.session.close()
            raise
        if self.mode is None:
            self.session.close()
            raise UpgradeRefused('%s holds no RelStorage 4 database'
                                 % adapter.describe())
        self.keep_history = self.mode == 'history-preserving'
        table = schema.rs4_transaction_table
        self.last_tid_sql = LAST_TID.format(
            table=table if self.keep_history else 'object_state')
        self.transactions_sql = TRANSACTIONS.format(table=table)
        self.piece_query = schema.rs4_piece_query

    def last_tid(self):
        return self.session.scalar(self.last_tid_sql) or 0

    def transactions(self, start, stop, limit):
        """``[(tid, user, description, extension, packed)]`` in order;
        without history, the tids of current revisions, as packed
        transactions without metadata."""
        if not self.keep_history:
            return [(tid, b'', b'', b'', True) for (tid,) in
                    self.session.fetchall(
                        'SELECT DISTINCT tid FROM object_state WHERE tid >= '
                        '%s AND tid <= %s ORDER BY tid LIMIT %s',
                        (start, stop, limit))]
        # Its transaction 0 stands for "before the first": not one.
        return [(tid, _bytes(user), _bytes(description), _bytes(extension),
                 bool(packed))
                for tid, user, description, extension, packed
                in self.session.fetchall(self.transactions_sql,
                                         (start, stop, limit))]

    def records(self, tid):
        """``[(oid, state)]`` written by *tid*, sizes checked."""
        checked = self.adapter.mover.checked
        return [(oid, checked(oid, state, tid, size)[0])
                for oid, state, size in self.session.fetchall(
                    'SELECT zoid, state, state_size FROM object_state '
                    'WHERE tid = %s ORDER BY zoid', (tid,))]

    def blob_chunks(self, oid, tid):
        """The chunk numbers of the blob of revision *(oid, tid)*."""
        return [num for (num,) in self.session.fetchall(
            'SELECT chunk_num FROM blob_chunk WHERE zoid = %s AND tid = %s '
            'ORDER BY chunk_num', (oid, tid))]

    def blob_pieces(self, oid, tid, num):
        """The bytes of chunk *num* of that blob, piece by piece."""
        offset = 1
        while True:
            piece = self.session.scalar(self.piece_query,
                                        (offset, PIECE, oid, tid, num))
            piece = bytes(piece) if piece is not None else b''
            if piece:
                yield piece
            if len(piece) < PIECE:
                return
            offset += PIECE

    def close(self):
        self.session.rollback_quietly()
        self.session.close()


def _bytes(value):
    return bytes(value) if value is not None else b''
