"""The vote phase: lock, detect conflicts, resolve them, upload."""
from ZODB.POSException import ConflictError
from ZODB.POSException import ReadConflictError
from ZODB.utils import p64

from ...exceptions import OidOutOfRange
from ...pickledrefs import any_refers_elsewhere
from ..load import MAX_ID
from .finish import commit_args


def vote(commit, tpc):
    """Lock the rows *tpc* changes (and its readCurrent rows, shared), check
    that what the transaction read is still current, resolve write
    conflicts and upload the final states. Sets ``tpc.rows`` and
    ``tpc.resolved``; raises ConflictError / ReadConflictError."""
    adapter = commit.adapter
    if adapter.requires_snapshot_end_at_vote:
        # Nothing more is read at the view (conflict resolution reads
        # through the store session); a snapshot held while this waits
        # for the writer would hold back the WAL's restart.
        commit.end_snapshot()
    session = commit.store_session()
    stores = tpc.stores
    highest = max(max(stores, default=0), max(tpc.read_current, default=0))
    if highest >= MAX_ID:
        # MAX_ID itself would fit a column, but the oid counter, which
        # must move past every stored oid, could not.
        raise OidOutOfRange(
            'object 0x%x cannot be stored in the %s: its oid is not below '
            '0x7fffffffffffffff (its 64-bit signed columns hold oids up to '
            '0x7ffffffffffffffe)' % (highest, adapter.describe()))
    tpc.timing.lock_begins()
    if _creates_the_root(tpc):
        current = session.lock_commit_and_read_current(stores.keys())
    else:
        current = session.lock_and_read_current(stores.keys(),
                                                tpc.read_current.keys())
    tpc.timing.lock_ends()

    for oid, expected in tpc.read_current.items():
        if oid in stores:
            continue  # the store's own check below covers it
        actual = current.get(oid, 0)
        if actual != expected:
            raise ReadConflictError(
                oid=p64(oid), serials=(p64(actual), p64(expected)))

    rows = []
    resolved = []
    restored = tpc.restored
    # In oid order: SQLite writes the rows in this order, and its
    # history-free table, keyed by oid, fills its pages only when they
    # come in order (ZODB stores new objects newest first; so inserted,
    # each 1.5 KB state took a 4 KB page of its own). Indexes elsewhere
    # take them in order too.
    for oid, (expected, state) in sorted(stores.items()):
        actual = current.get(oid, 0)
        if oid not in restored and actual != expected:
            if _creates_the_root(tpc):
                # Made by another process meanwhile: that root is what
                # ZODB.DB() wanted. The store is dropped and the root
                # reported as resolved (ZODB reloads it), instead of a
                # ConflictError in ZODB.DB().
                resolved.append(p64(oid))
                continue
            if state is None or not actual:
                raise ConflictError(
                    oid=p64(oid), serials=(p64(actual), p64(expected)))
            # Raises ConflictError when the states cannot be merged.
            state = commit.resolve(
                p64(oid), p64(actual), p64(expected), state)
            resolved.append(p64(oid))
            commit.metrics.conflict_resolved(p64(oid), state)
        rows.append((oid, actual, state))
    if session.claims_other_databases and any_refers_elsewhere(
            [state for _, _, state in rows]):
        # Until this commit ends, a pack of the databases it refers to
        # waits (see adapters.votes). (Where the commit transaction is
        # claim enough, SQLite's only writer, nothing is looked for.)
        session.claim_other_databases()
    blobs = commit.blobs
    blob_ids = blobs.vote(session, tpc, current) if blobs is not None else {}
    serials = tpc.own_serials()
    if serials is not None:
        # History-free rows of a copy keep their own tids; temp_store's
        # prev_tid column carries them (history-free rows have no
        # prev_tid of their own).
        session.upload([(oid, serials[oid], state, blob_ids.get(oid))
                        for oid, actual, state in rows])
    else:
        session.upload([(oid, actual, state, blob_ids.get(oid))
                        for oid, actual, state in rows],
                       tid_free=tpc.restore_tid is None)
    tpc.rows = rows
    tpc.resolved = resolved
    if adapter.supports_prepare_at_vote:
        # The commit transaction is the only writer already: everything
        # but the COMMIT is done now, so that a vote that succeeded
        # leaves finish nothing that can fail for lack of room.
        tpc.commit_args = commit_args(commit, tpc)
        session.prepare(**tpc.commit_args)


def _creates_the_root(tpc):
    """Whether the transaction *tpc* only creates the root object (oid
    0), as ZODB.DB() does on a new database: the one object that
    processes started at once each create. Such a transaction takes the
    commit lock before it reads whether the root exists (see
    IStoreSession.lock_commit_and_read_current), so that of processes
    doing so at once the first creates it and the others find it."""
    stores = tpc.stores
    return (len(stores) == 1 and 0 in stores and stores[0][0] == 0
            and stores[0][1] is not None and not tpc.restored
            and not tpc.read_current)
