"""Object history; the undo log and undo (history-preserving only)."""
import operator

from ZODB.POSException import POSKeyError
from ZODB.POSException import UndoError
from ZODB.blob import is_blob_record
from ZODB.TimeStamp import TimeStamp
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB._compat import loads

from ..blobs.files import copy_into
from .load import MAX_ID
from .load import stored_id

#: The most undo log entries read per query.
UNDO_LOG_PAGE = 1000


def _extension(ext_bytes):
    if not ext_bytes:
        return {}
    try:
        ext = loads(ext_bytes)
    except Exception:  # noqa: BLE001 -- metadata must never break a listing
        return {}
    return ext if isinstance(ext, dict) else {}


def _describe(tid, user, description, extension):
    d = {
        'id': p64(tid),
        'time': TimeStamp(p64(tid)).timeTime(),
        'user_name': user or b'',
        'description': description or b'',
    }
    for key, value in _extension(extension).items():
        d.setdefault(key, value)
    return d


class History:
    """history() of one storage instance, reading through its *view*
    (see view.View); without history there is nothing to undo. *commit*
    (see tpc.Commit) holds the transaction an undo joins."""

    def __init__(self, view, commit):
        self.view = view
        self.commit = commit

    def history(self, oid, size=1):
        """Up to *size* revisions of *oid*, newest first, as FileStorage
        gives them: a *size* of zero or less gives none (for an object
        that exists: POSKeyError for one that does not), None is the
        default of one. Checked before the database is asked, which
        would take a negative or huge LIMIT for an error, or for none."""
        if size is None:
            size = 1
        try:
            size = operator.index(size)
        except TypeError:
            raise TypeError('history(): size must be an integer or None, '
                            'not %r' % (size,)) from None
        with self.view.reading():
            rows = self.view.session().object_history(
                stored_id(oid), min(max(size, 1), MAX_ID))
        if not rows:
            raise POSKeyError(oid)
        result = []
        for tid, state_size, user, description, ext in rows[:max(size, 0)]:
            d = _describe(tid, user, description, ext)
            del d['id']
            d.update(tid=p64(tid), size=state_size, version='')
            result.append(d)
        return result

    def supportsUndo(self):
        return False

    def undoLog(self, first=0, last=-20, filter=None):
        return []

    def undoInfo(self, first=0, last=-20, specification=None):
        return []

    def undo(self, transaction_id, transaction):
        """Nothing can be undone without history (a read-only storage
        says it is read-only first, as for every write)."""
        self.commit.check_writable()
        self.commit.buffer_for(transaction)
        raise UndoError('%r cannot be undone: this storage keeps no history'
                        % (transaction_id,))


class UndoableHistory(History):
    """History-preserving: history(), and the undo log and undo. *resolve*
    is ZODB's tryToResolveConflict bound to the storage; *blobs* the blob
    helper (or None) and *load_blob* the storage's loadBlob."""

    def __init__(self, view, commit, resolve, blobs, load_blob):
        super().__init__(view, commit)
        self.resolve = resolve
        self.blobs = blobs
        self.load_blob = load_blob

    def supportsUndo(self):
        return True

    def undoLog(self, first=0, last=-20, filter=None):
        if last < 0:
            last = first - last
        result = []
        seen = 0
        with self.view.reading() as upto:
            session = self.view.session()
            # Read newest first, in pages, until enough entries passed the
            # filter; packed transactions cannot be undone.
            while len(result) < last - first:
                rows = session.transactions(
                    0, upto, newest_first=True, include_packed=False,
                    limit=min(max(100, last), UNDO_LOG_PAGE))
                if not rows:
                    break
                for tid, user, description, ext, _packed in rows:
                    d = _describe(tid, user, description, ext)
                    if filter is not None and not filter(d):
                        continue
                    if seen >= first:
                        result.append(d)
                        if len(result) >= last - first:
                            break
                    seen += 1
                upto = rows[-1][0] - 1
        return result

    def undoInfo(self, first=0, last=-20, specification=None):
        def match(d):
            return all(d.get(k) == v for k, v in specification.items())
        return self.undoLog(first, last,
                            match if specification else None)

    def undo(self, transaction_id, transaction):
        """Prepare to undo *transaction_id* within *transaction*: every
        object it changed gets back the state it had before, merged by
        conflict resolution where a later transaction changed it too."""
        self.commit.check_writable()
        tpc = self.commit.buffer_for(transaction)
        # An id that is no tid (another length, past what a column holds)
        # names no transaction: said before the database is asked.
        undo_tid = (u64(transaction_id)
                    if isinstance(transaction_id, bytes)
                    and len(transaction_id) == 8 else MAX_ID + 1)
        session = self.commit.store_session()
        packed = (session.transaction_exists(undo_tid)
                  if undo_tid <= MAX_ID else None)
        if packed is None:
            raise UndoError('no such transaction: %r' % (transaction_id,))
        if packed:
            raise UndoError('transaction %r was packed and cannot be undone'
                            % (transaction_id,))
        tpc.view_checked = False
        before = session.states_before(undo_tid)
        current = session.current_tids([oid for oid, _, _ in before])
        oids = []
        for oid, state, prev_tid in before:
            tpc.stores[oid] = self._undo_record(
                session, tpc, oid, state, undo_tid, current.get(oid, 0))
            tpc.blobs.pop(oid, None)
            if self.blobs is not None and is_blob_record(state):
                self._copy_blob_for_undo(tpc, oid, prev_tid)
            oids.append(p64(oid))
        return None, oids

    def _undo_record(self, session, tpc, oid, state, undo_tid, actual):
        """``(expected_tid, state)`` to store so that *oid* loses what
        *undo_tid* did to it; *state* is what it held before *undo_tid*.

        The object's present state is the one pending in this transaction
        (an earlier undo of the same commit touched it) or else the current
        revision *actual*. When that state is not what *undo_tid* wrote, a
        later change must be merged by conflict resolution."""
        if oid in tpc.stores:
            expected, present = tpc.stores[oid]
        else:
            expected = actual
            if actual == undo_tid:
                return expected, state
            present = session.load_revision(oid, actual)[0] if actual else None
        undone = session.load_revision(oid, undo_tid)[0]
        if present == undone:
            return expected, state
        if state is None or present is None:
            raise UndoError('object %r was changed by a later transaction'
                            % p64(oid), p64(oid))
        try:
            merged = self.resolve(
                p64(oid), p64(expected), p64(undo_tid), state,
                committedData=present)
        except Exception:
            raise UndoError(
                'object %r was changed by a later transaction and the '
                'changes cannot be merged' % p64(oid), p64(oid)) from None
        return expected, merged

    def _copy_blob_for_undo(self, tpc, oid, tid):
        """Give *oid* in this transaction a copy of the blob of its
        revision *tid* (undo restores an earlier revision)."""
        tpc.blobs[oid] = copy_into(
            self.load_blob(p64(oid), p64(tid)),
            self.blobs.temporary_directory(), 'undo-')
