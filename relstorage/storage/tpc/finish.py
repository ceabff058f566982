"""The finish phase: commit lock, tid, rows made current, commit."""
from ZODB._compat import dumps

from ...exceptions import CommitOutcomeUnknown
from ...exceptions import DatabaseDisconnected


def _bytes(text):
    if not text:
        return b''
    return text if isinstance(text, bytes) else text.encode('utf-8')


def commit_args(commit, tpc):
    """The keyword arguments of the store session's prepare() and
    commit() for *tpc*."""
    meta = tpc.transaction
    ext = getattr(meta, 'extension_bytes', None)
    if ext is None:
        # A plain transaction object (not TransactionMetaData) has a dict.
        ext = dumps(meta.extension, 3) if getattr(meta, 'extension',
                                                   None) else b''
    # Objects new to the database may carry oids chosen elsewhere (restore,
    # copies, explicit oids); existing ones were allocated already.
    max_oid = max((oid for oid, actual, _ in tpc.rows if not actual),
                  default=None)
    if max_oid is not None and max_oid <= commit.adapter.max_known_oid:
        max_oid = None
    blobs = commit.blobs
    serials = tpc.own_serials()
    return dict(
        meta=(_bytes(meta.user), _bytes(meta.description), ext or b''),
        restore_tid=tpc.restore_tid, packed=tpc.packed,
        empty=not tpc.rows, max_oid=max_oid,
        first_row_tid=min(serials.values()) if serials else None,
        before_commit=blobs.before_commit(tpc) if blobs else None)


def finish(commit, tpc):
    """Commit what vote uploaded (and, where vote prepared the commit,
    only make it visible); return the new tid (an int)."""
    session = commit.store_session()
    args = tpc.commit_args or commit_args(commit, tpc)
    blobs = commit.blobs
    try:
        tid = session.commit(
            probe_oid=tpc.rows[0][0] if tpc.rows else None, **args)
    except (DatabaseDisconnected, CommitOutcomeUnknown):
        # The commit may have happened: keep blob files already placed
        # (an orphan file is harmless, a missing one is not).
        del tpc.placed[:]
        raise
    max_oid = args['max_oid']
    if max_oid is not None:
        commit.adapter.note_oid(max_oid)
    commit.after_commit(tid, tpc.rows, session.previous_tid,
                          tpc.own_serials(), checked=tpc.view_checked)
    if blobs is not None:
        blobs.after_commit(tpc, tid)
    return tid
