"""Copying transactions from any ZODB storage into another, with blobs, one
transaction at a time (what ``zodbconvert`` and ``copyTransactionsFrom``
use).

Each source transaction becomes one destination transaction with the same
id, status and metadata; its records are restored as they are (no conflict
checks). A copy that stops midway leaves whole transactions behind, so an
incremental copy can resume after the destination's last one.
"""
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
from ..exceptions import RelStorageError


class CopyError(RelStorageError):
    """A copy cannot start or continue (what is wrong is named)."""


def tid_time(tid):
    return TimeStamp(tid).timeTime()


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
    found = next(iter(source.iterator(last, last)), None)
    if found is None or found.tid != last:
        raise CopyError(
            'the destination ends with transaction %s, which the source '
            'does not have: they have diverged, so an incremental copy '
            'cannot continue (use --clear to copy everything again)'
            % tid_repr(last))
    return last


def copy_transactions(source, destination, after=None, progress=None,
                      dry_run=False):
    """Copy every transaction of *source* newer than *after* (a tid, or
    None for all) into *destination*; return a CopyResult.

    *progress*, if given, is called after each transaction with the
    CopyResult so far and the fraction of the source's time span done.
    With *dry_run* nothing is written; the counts say what would be."""
    result = CopyResult()
    started = time.monotonic()
    blobs_in = ZODB.interfaces.IBlobStorage.providedBy(source)
    blobs_out = ZODB.interfaces.IBlobStorage.providedBy(destination)
    start = p64(u64(after) + 1) if after is not None else None
    last = source.lastTransaction()
    first_time = end_time = None
    for trans in source.iterator(start):
        if first_time is None:
            first_time = tid_time(trans.tid)
            end_time = tid_time(last) if last else first_time
        if not dry_run:
            destination.tpc_begin(trans, trans.tid, trans.status)
        try:
            for record in trans:
                result['records'] += 1
                data = record.data
                result['bytes'] += len(data or b'')
                blob = None
                if blobs_in and data and is_blob_record(data):
                    blob = _source_blob(source, record)
                    if blob is None:
                        # Nothing to copy; the record goes as it is, as
                        # ZODB's own copy does, and the summary says so.
                        result['missing_blobs'] += 1
                if blob is not None:
                    result['blobs'] += 1
                    result['bytes'] += os.path.getsize(blob)
                    if not blobs_out:
                        raise CopyError(
                            'the source holds blobs but the destination '
                            'has no blob directory; configure blob-dir '
                            '(first blob: oid %s in transaction %s)'
                            % (u64(record.oid), tid_repr(trans.tid)))
                if dry_run:
                    continue
                if blob is not None:
                    destination.restoreBlob(
                        record.oid, record.tid, data,
                        copy_into(blob, destination.temporaryDirectory(),
                                  'copy-'), record.data_txn,
                        trans)
                else:
                    destination.restore(record.oid, record.tid, data, '',
                                        record.data_txn, trans)
            if not dry_run:
                destination.tpc_vote(trans)
                destination.tpc_finish(trans)
        except BaseException:
            if not dry_run:
                destination.tpc_abort(trans)
            raise
        result['transactions'] += 1
        if progress is not None:
            span = (end_time - first_time) or 1.0
            progress(result, min(1.0, (tid_time(trans.tid) - first_time)
                                 / span))
    result['seconds'] = time.monotonic() - started
    return result


def _source_blob(source, record):
    try:
        return source.loadBlob(record.oid, record.tid)
    except POSKeyError:
        return None

