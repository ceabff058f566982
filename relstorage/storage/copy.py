"""Copying transactions from any ZODB storage into another, with blobs
(what ``zodbconvert`` and ``copyTransactionsFrom`` use).

Each source transaction becomes one destination transaction with the same
id, status and metadata; its records are restored as they are (no conflict
checks). A history-free RelStorage, which keeps no transactions, receives
several at once instead, each object keeping its own tid. A copy that
stops midway leaves whole commits behind, each ending with a source
transaction, so an incremental copy can resume after the destination's
last one.
"""
import contextlib
import os
import time

import ZODB.interfaces
from ZODB.blob import is_blob_record
from ZODB.POSException import POSKeyError
from ZODB.TimeStamp import TimeStamp
from ZODB.utils import p64
from ZODB.utils import tid_repr
from ZODB.utils import u64
from ZODB.utils import z64

from ..blobs.files import copy_into
from ..exceptions import CopyError  # re-exported too


def tid_time(tid):
    return TimeStamp(tid).timeTime()


@contextlib.contextmanager
def transactions_of(source, start=None, stop=None):
    """``source.iterator(start, stop)``, closed on the way out however it
    is left: a copy that fails half-way (a damaged record, a destination
    refusing) does not keep the source's connection, and its snapshot,
    while the error is kept (a traceback shown, logged, held by a caller)
    until the garbage collector frees the iterator."""
    transactions = source.iterator(start, stop)
    try:
        yield transactions
    finally:
        close = getattr(transactions, 'close', None)
        if close is not None:
            close()


class CopyResult(dict):
    """Counts of one copy: transactions, records, blobs, bytes, seconds."""

    def __init__(self):
        super().__init__(transactions=0, records=0, blobs=0, bytes=0,
                         missing_blobs=0, seconds=0.0)


def is_empty(storage):
    return storage.lastTransaction() in (None, z64)


def resume_point(source, destination):
    """The tid an incremental copy starts after: the destination's last
    transaction, which must also be in the source (else the two have
    diverged and copying on would mix histories)."""
    last = destination.lastTransaction()
    if last in (None, z64):
        return None
    with transactions_of(source, last, last) as transactions:
        found = next(iter(transactions), None)
    if found is None or found.tid != last:
        raise CopyError(
            'the destination ends with transaction %s, which the source '
            'does not have: they have diverged, so an incremental copy '
            'cannot continue (use --clear to copy everything again)'
            % tid_repr(last))
    return last


#: A history-free destination receives this many source records (or
#: GROUP_BYTES of them) per destination transaction.
GROUP_RECORDS = 5000
GROUP_BYTES = 16 * 1024 * 1024


def copy_transactions(source, destination, after=None, progress=None,
                      dry_run=False):
    """Copy every transaction of *source* newer than *after* (a tid, or
    None for all) into *destination*; return a CopyResult.

    A history-free RelStorage receives several source transactions per
    commit (each object keeping its own tid, the commit ending with the
    last transaction's), except those holding blobs, which go one by one.

    *progress*, if given, is called after each commit with the
    CopyResult so far and the fraction of the source's time span done.
    With *dry_run* nothing is written; the counts say what would be."""
    result = CopyResult()
    started = time.monotonic()
    blobs_in = ZODB.interfaces.IBlobStorage.providedBy(source)
    blobs_out = ZODB.interfaces.IBlobStorage.providedBy(destination)
    grouped = getattr(destination, 'restores_transactions_together', False)
    start = p64(u64(after) + 1) if after is not None else None
    last = source.lastTransaction()
    span = []
    group = []
    group_records = group_bytes = 0

    def done(trans_count, tid):
        result['transactions'] += trans_count
        if progress is not None:
            if not span:
                span.extend((tid_time(tid), tid_time(last) if last
                             else tid_time(tid)))
            first_time, end_time = span
            progress(result, min(1.0, (tid_time(tid) - first_time)
                                 / ((end_time - first_time) or 1.0)))

    def flush():
        nonlocal group_records, group_bytes
        if group:
            _restore(destination, group[-1][0],
                     [r for _, records in group for r in records])
            done(len(group), group[-1][0].tid)
            del group[:]
        group_records = group_bytes = 0

    with transactions_of(source, start) as transactions:
        for trans in transactions:
            records = []
            with_blobs = False
            size = 0
            for record in trans:
                data = record.data
                size += len(data or b'')
                blob = None
                if blobs_in and data and is_blob_record(data):
                    blob = _source_blob(source, record)
                    if blob is None:
                        # Nothing to copy; the record goes as it is, as
                        # ZODB's own copy does, and the summary says so.
                        result['missing_blobs'] += 1
                if blob is not None:
                    with_blobs = True
                    result['blobs'] += 1
                    size += os.path.getsize(blob)
                    if not blobs_out:
                        raise CopyError(
                            'the source holds blobs but the destination '
                            'has no blob directory; configure blob-dir '
                            '(first blob: oid %s in transaction %s)'
                            % (u64(record.oid), tid_repr(trans.tid)))
                records.append((record.oid, record.tid, data,
                                record.data_txn, blob))
            result['records'] += len(records)
            result['bytes'] += size
            if dry_run:
                done(1, trans.tid)
                continue
            if grouped and not with_blobs:
                group.append((trans, records))
                group_records += len(records)
                group_bytes += size
                if (group_records >= GROUP_RECORDS
                        or group_bytes >= GROUP_BYTES):
                    flush()
                continue
            flush()
            _restore(destination, trans, records)
            done(1, trans.tid)
    flush()
    result['seconds'] = time.monotonic() - started
    return result


def _restore(destination, trans, records):
    """*records* as one destination transaction with *trans*'s id, status
    and metadata: one source transaction's, or (history-free, without
    blobs) those of several ending with *trans*, each object then keeping
    the tid of its last revision."""
    destination.tpc_begin(trans, trans.tid, trans.status)
    try:
        for oid, serial, data, data_txn, blob in records:
            if blob is not None:
                destination.restoreBlob(
                    oid, serial, data,
                    copy_into(blob, destination.temporaryDirectory(),
                              'copy-'), data_txn, trans)
            else:
                destination.restore(oid, serial, data, '', data_txn, trans)
        destination.tpc_vote(trans)
        destination.tpc_finish(trans)
    except BaseException:
        destination.tpc_abort(trans)
        raise


def _source_blob(source, record):
    try:
        return source.loadBlob(record.oid, record.tid)
    except POSKeyError:
        return None

