"""Load and store sessions: what an adapter hands the storage.

A load session reads (one snapshot at a time); a store session votes and
commits. Both wrap one connection and reopen it at transaction
boundaries; the database module supplies the connection and the SQL.
"""
import functools
import logging
import time

from ZODB.TimeStamp import TimeStamp
from ZODB.utils import p64
from ZODB.utils import u64
from zope.interface import implementer

from ..exceptions import CommitOutcomeUnknown
from ..exceptions import DatabaseDisconnected
from ..exceptions import RelStorageError
from . import blobs
from .interfaces import ILoadSession
from .interfaces import IStoreSession

log = logging.getLogger(__name__)


def working_as(kind):
    """A session wrapper's method whose statements count as *kind* of
    work (see adapters.traffic), rather than as the wrapper's own (but
    for a pack's, which counts all it sends as the pack's)."""
    def decorate(method):
        @functools.wraps(method)
        def counted(self, *args, **kw):
            if self.kind == 'pack':
                return method(self, *args, **kw)
            before = self.current_kind
            self.count_as(kind)
            try:
                return method(self, *args, **kw)
            finally:
                self.count_as(before)
        return counted
    return decorate


def tid_for_now(last_tid):
    """A tid for the current time that is greater than *last_tid*."""
    now = time.time()
    ts = TimeStamp(*time.gmtime(now)[:5] + (now % 60,))
    if last_tid:
        ts = ts.laterThan(TimeStamp(p64(last_tid)))
    return u64(ts.raw())


class _SessionWrapper:
    """What load and store sessions share: the connection, reconnecting at
    transaction boundaries, and the history, iteration and undo-log queries
    of the iterator module, run on this session (a snapshot for loads; the
    latest, locked view while an undo is prepared)."""

    for_store = False
    #: The kind of work its statements count as (see adapters.traffic),
    #: but where a method says otherwise (working_as).
    kind = 'load'

    def __init__(self, adapter):
        self.adapter = adapter
        # The components this session runs (the adapter assembled them).
        self.mover = adapter.mover
        self.iterator = adapter.iterator
        self.inspector = adapter.inspector
        self.oids = adapter.oids
        self.current_kind = self.kind
        self._open()

    def count_as(self, kind):
        """Count what the sessions held send from now on as *kind*."""
        self.current_kind = kind
        for session in self.held():
            session.kind = kind

    def held(self):
        """The sessions this wrapper holds open."""
        return [self.session] if self.session is not None else []

    def _open(self):
        self.session = self.adapter.connect(for_store=self.for_store)
        self.session.kind = self.current_kind
        #: Whether temp_store may hold rows of an earlier transaction (a
        #: new connection's temp table is new).
        self.temp_rows = False
        if self.for_store:
            try:
                self.adapter.prepare_store_session(self.session)
            except BaseException:
                # (A user that may not make temporary tables, say: the
                # connection goes now, not when the error is dropped.)
                self.session.close()
                raise

    def at_boundary(self, func, *args):
        """Run *func* at a point where no transaction of ours is pending
        on the connection; if the connection turns out to be lost (server
        restarted, connection killed), reconnect once and run it again."""
        try:
            return func(*args)
        except DatabaseDisconnected as e:
            self.session.close()
            self._open()
            self.reconnected(e)
            return func(*args)

    def reconnected(self, error):
        """Say, once, that the connection was lost (*error* names the
        server and what happened) and that a new one is open."""
        self.adapter.reconnects += 1  # read by relstorage.metrics
        log.warning('%s; reconnected%s', error,
                    '' if self.session.server is None
                    else ' (to the %s)' % self.session.describe())

    def _read(self, func, *args):
        """Run a reading *func(session, *args)*; load sessions begin
        their snapshot here, with the first read that needs one."""
        return func(self.session, *args)

    def load_current(self, oid):
        return self._read(self.mover.load_current, oid)

    def load_revision(self, oid, tid):
        return self._read(self.mover.load_revision, oid, tid)

    def load_before(self, oid, tid):
        return self._read(self.mover.load_before, oid, tid)

    def current_tids(self, oids):
        return self._read(self.mover.current_tids, oids)

    def blob_of(self, oid, tid):
        return self._read(blobs.blob_of, oid, tid, self.mover.blob_of_sql)

    def blob_chunk(self, blob_id, num):
        return self._read(blobs.read_chunk, blob_id, num)

    # The iterator's queries (see IReads).

    def iter_current_records(self, start_oid, limit):
        return self._read(self.iterator.iter_current_records,
                          start_oid, limit)

    def stream_current_records(self, start_oid):
        return self._read(self.iterator.stream_current_records,
                          start_oid)

    def transactions(self, start, stop, newest_first=False,
                     include_packed=True, limit=None):
        return self._read(self.iterator.transactions, start, stop,
                          newest_first, include_packed, limit)

    def records(self, tid):
        return self._read(self.iterator.records, tid)

    def object_history(self, oid, limit):
        return self._read(self.iterator.object_history, oid, limit)

    def transaction_exists(self, tid):
        return self._read(self.iterator.transaction_exists, tid)

    def states_before(self, tid):
        return self._read(self.iterator.states_before, tid)

    def object_count(self):
        return self._read(self.iterator.object_count)

    def size_in_bytes(self):
        return self._read(self.iterator.size_in_bytes)

    def database_size(self):
        return self._read(self._database_size)

    def _database_size(self, session):
        stats = self.adapter.statistics_class(self.adapter)
        size = stats.database_bytes(session)
        if size is None:
            size = self.iterator.size_in_bytes(session)
        return size

    def close(self):
        self.session.close()


@implementer(ILoadSession)
class LoadSession(_SessionWrapper):
    """Reads. Between transactions it holds no snapshot (an idle
    application must not keep the database from cleaning up, nor an SQLite
    WAL from being checkpointed): :meth:`poll` reads the newest tid outside
    any transaction, the first read after it begins a snapshot (which may
    be newer than the poll), and :meth:`end_snapshot` ends it."""

    @working_as('poll')
    def restart(self):
        """Begin a snapshot now; return the newest tid in it."""
        return self.at_boundary(self._restart)

    def _restart(self):
        session = self.session
        session.restart(self.adapter.load_begin_sql)
        return session.scalar(self.mover.last_tid_sql) or 0

    @working_as('poll')
    def poll(self):
        """End the snapshot, if any; return the newest committed tid."""
        return self.at_boundary(self._poll)

    def _poll(self):
        session = self.session
        session.end_read(now=False)
        return session.scalar(self.mover.last_tid_sql) or 0

    def snapshot_tid(self):
        """The newest tid the current snapshot sees (beginning one)."""
        return self._read(
            lambda session: session.scalar(self.mover.last_tid_sql) or 0)

    @working_as('poll')
    def poll_changes(self, after_tid):
        """``(newest tid, [(oid, tid)])``: the objects changed after
        *after_tid*, read with the newest tid in one statement."""
        newest, changes = 0, []
        for oid, tid in self.session.fetchall(self.mover.poll_sql,
                                              (after_tid,)):
            if oid == -1:
                newest = tid or 0
            else:
                changes.append((oid, tid))
        return newest, changes

    def end_snapshot(self, now=True):
        self.session.end_read(now)

    @working_as('poll')
    def commits_announced(self):
        """Whether the database announced a commit since the last call:
        True or False where it announces them (without a round trip),
        None where it cannot tell."""
        return self.session.commits_announced()

    def _read(self, func, *args):
        if self.session.in_transaction:
            return func(self.session, *args)

        def begin_and_read():
            # Nothing of ours is open on the connection: if it turns out
            # to be lost, reopening it loses nothing.
            self.session.begin(self.adapter.load_begin_sql)
            return func(self.session, *args)
        return self.at_boundary(begin_and_read)

    @working_as('poll')
    def changes(self, after_tid, upto_tid):
        """(oid, tid) of changes in (after_tid, upto_tid]: bounded, so
        correct outside a snapshot too."""
        return self.session.fetchall(self.mover.changes_sql,
                                     (after_tid, upto_tid))

    def load_many(self, oids):
        return self._read(self.mover.load_many, oids)

    def new_oid_blocks(self, blocks):
        return self._read(self.oids.new_blocks, blocks)

    # What zodbinfo, zodbcheck and the metrics server read (see
    # ILoadSession).

    def figures(self, exact=False):
        return self._read(self.inspector.figures, exact)

    def estimated_object_count(self):
        inspector = self.inspector
        return self._read(inspector.count, False, inspector.objects_table,
                          self.iterator.object_count_sql)[0]

    def object_headers(self, after_oid, limit, length):
        return self._read(self.inspector.headers, after_oid, limit,
                          length)

    def object_rows(self, after_oid, limit):
        return self._read(self.inspector.records, after_oid, limit)

    def blob_chunk_counts(self, blob_ids):
        return self._read(self.inspector.blob_chunks, blob_ids)


@implementer(IStoreSession)
class StoreSession(_SessionWrapper):

    for_store = True
    kind = 'store'

    def __init__(self, adapter):
        super().__init__(adapter)
        self.locker = adapter.locker
        self.claims = adapter.vote_claims
        #: Whether claim_other_databases() claims anything.
        self.claims_other_databases = self.claims.takes_claims
        #: The newest tid before the last commit (set by commit()).
        self.previous_tid = None
        #: The tid chosen at upload, when the rows were written in place.
        self.chosen_tid = None
        #: The tid of a commit prepared at vote (prepare()), until its
        #: COMMIT.
        self.prepared_tid = None
        #: The rows of the last upload, until its commit.
        self.uploaded = ()
        #: Rows that commit() copies into place (mover.split_direct);
        #: the other uploaded rows went through temp_store.
        self.direct_rows = ()

    @property
    def committing(self):
        return self.session.in_transaction

    def _outside_commit(self, func, *args):
        """Like at_boundary, but reconnect only when no commit transaction
        of ours is open (then a lost connection means a lost commit)."""
        if self.session.in_transaction:
            return func(*args)
        return self.at_boundary(func, *args)

    def _read(self, func, *args):
        # Between commits (a read past an instance's snapshot), a lost
        # connection is reopened as for any read.
        return self._outside_commit(lambda: func(self.session, *args))

    def lock_and_read_current(self, store_oids, read_oids):
        return self._outside_commit(self._lock, store_oids, read_oids)

    def _lock(self, store_oids, read_oids):
        if not self.session.in_transaction:
            self.session.begin(self.adapter.store_begin_sql)
        return self.locker.lock_rows(self.session, store_oids, read_oids)

    def lock_commit_and_read_current(self, oids):
        return self._outside_commit(self._lock_commit, oids)

    def claim_other_databases(self):
        self.claims.claim(self.session)

    def _lock_commit(self, oids):
        if not self.session.in_transaction:
            self.session.begin(self.adapter.store_begin_sql)
        self.previous_tid, self.chosen_tid = self._choose_tid()
        return self.mover.current_tids(self.session, list(oids))

    def new_oid_blocks(self, blocks):
        return self._outside_commit(
            lambda: self.oids.new_blocks(self.session, blocks))

    def upload_blob(self, path, chunk_size):
        return blobs.upload_blob(self.session, path, chunk_size)

    def drop_replaced_blobs(self, oids):
        blobs.drop_replaced_blobs(self.session, oids)

    def upload(self, rows, tid_free=False):
        """*tid_free*: the commit's tid is not imposed (no restore), so a
        database whose commit transaction is already the only writer
        (SQLite) chooses it now and writes the rows in place, sparing
        their copy through temp_store."""
        chosen, self.chosen_tid = self.chosen_tid, None
        self.uploaded = rows
        self.direct_rows = ()
        if chosen is None and tid_free and rows \
                and self.adapter.supports_prepare_at_vote:
            # Nobody can commit before this transaction does now.
            self.previous_tid, chosen = self._choose_tid()
        if chosen is not None:
            # (Or the commit lock was taken with the tid chosen already:
            # lock_commit_and_read_current.)
            self.chosen_tid = chosen
            self.mover.write_in_place(self.session, rows, chosen)
            return
        if tid_free:
            self.direct_rows, rows = self.mover.split_direct(rows)
        if self.temp_rows:
            self.mover.clear_temp(self.session)
        if rows:
            self.mover.upload(self.session, rows)
            self.temp_rows = not self.adapter.temp_store_emptied_by_commit

    def _empty_temp(self):
        """Empty temp_store once its transaction has ended, where the
        database does that better outside a transaction (an InnoDB
        temporary table keeps deleted rows as garbage that every later
        DELETE and INSERT ... SELECT scans again, so DELETE grows slower
        with each commit of a long-lived connection; TRUNCATE, which
        would end a transaction, drops them). Otherwise the next upload
        deletes them."""
        sql = self.adapter.empty_temp_store_sql
        if not self.temp_rows or sql is None:
            return
        try:
            self.session.execute(sql)
        except Exception:  # noqa: BLE001 -- the next upload deletes them
            log.debug('could not empty temp_store on %s',
                      self.adapter.describe(), exc_info=True)
            return
        self.temp_rows = False

    def _choose_tid(self, restore_tid=None, first_row_tid=None):
        """Take the commit lock; ``(the newest tid, the commit's tid)``."""
        last = self.locker.take_commit_lock(self.session,
                                            self.mover.last_tid_sql) or 0
        if restore_tid is None:
            return last, tid_for_now(last)
        first = min(restore_tid, first_row_tid or restore_tid)
        if first <= last:
            raise RelStorageError(
                'cannot restore transaction %016x: the database already '
                'holds transaction %016x, and transaction ids must '
                'increase' % (first, last))
        return last, restore_tid

    def _prepare(self, meta, restore_tid=None, packed=False, empty=False,
                 max_oid=None, first_row_tid=None):
        """``(tid, statements)``: the commit's tid, chosen (and the commit
        lock taken) now unless it was at upload, and the statements that
        make the uploaded rows current and record the transaction."""
        session = self.session
        tid = self.chosen_tid
        self.chosen_tid = None
        if tid is not None:
            # Chosen, and the rows written, at upload.
            script = self.mover.add_transaction(tid, meta, packed, empty)
        else:
            if not session.in_transaction:
                session.begin(self.adapter.store_begin_sql)
            self.previous_tid, tid = self._choose_tid(restore_tid,
                                                      first_row_tid)
            script = self.mover.add_transaction(tid, meta, packed, empty)
            direct = self.direct_rows
            # Nothing went through temp_store when nothing was uploaded
            # (an empty commit): touching it anyway would cost a move
            # and, on PostgreSQL, emptying it at COMMIT (0.3 ms).
            if len(direct) < len(self.uploaded):
                script += self.mover.move_into_place(
                    tid, own_tids=first_row_tid is not None)
            if direct:
                script += self.mover.after_copy(tid)
        if max_oid is not None:
            script += self.oids.raise_to(max_oid)
        script += self.session.commit_announcements
        return tid, script

    def _write(self, tid, script, before_commit):
        if before_commit is not None:
            # With the tid chosen and the commit lock held; whatever it
            # does is undone by the caller if the commit fails.
            before_commit(tid)
        if self.direct_rows:
            self.mover.copy_into_place(self.session, self.direct_rows, tid)
        self.session.execute_script(script)

    @working_as('commit')
    def prepare(self, meta, restore_tid=None, packed=False, empty=False,
                max_oid=None, before_commit=None, first_row_tid=None):
        """Where the commit transaction is the only writer from vote on
        (SQLite), do at vote everything of the commit but the COMMIT
        itself: choose the tid, make the rows current, record the
        transaction and take the room its COMMIT needs, so that commit()
        only makes them visible. Arguments as for commit(); raises
        (DatabaseFull...) with nothing committed."""
        tid, script = self._prepare(meta, restore_tid, packed, empty,
                                    max_oid, first_row_tid)
        self._write(tid, script, before_commit)
        self.adapter.reserve_commit(self.session)
        self.prepared_tid = tid
        return tid

    @working_as('commit')
    def commit(self, meta, restore_tid=None, packed=False, empty=False,
               max_oid=None, before_commit=None, first_row_tid=None,
               probe_oid=None):
        """Make the uploaded rows current; return the tid. With
        *first_row_tid* (history-free copies only) each row keeps the tid
        uploaded in its prev_tid column, the oldest being *first_row_tid*,
        and *restore_tid* becomes the last transaction. *probe_oid*: an
        object the commit writes as its tid, to ask the database whether
        it committed if the connection is lost while committing. After
        prepare(), only the COMMIT is left (the arguments were given to
        prepare)."""
        session = self.session
        tid, self.prepared_tid = self.prepared_tid, None
        prepared = tid is not None
        if not prepared:
            tid, script = self._prepare(meta, restore_tid, packed, empty,
                                        max_oid, first_row_tid)
        end = self.locker.end_commit()
        try:
            if prepared:
                session.execute_script(end)
            else:
                self._write(tid, script + end, before_commit)
        except DatabaseDisconnected as lost:
            # The COMMIT may have reached the server before the connection
            # went: ask, on a new connection. Only a commit known not to
            # have happened may be retried.
            committed = self._committed(
                tid, None if first_row_tid is not None else probe_oid)
            if committed is None:
                raise CommitOutcomeUnknown(
                    '%s; could not find out whether transaction %016x '
                    'committed: check the database before retrying it'
                    % (lost, tid)) from lost
            if not committed:
                raise
            log.warning('%s while committing transaction %016x, which '
                        'committed all the same', lost, tid)
            return tid
        except Exception:
            # Nothing of it became visible; leave the connection usable.
            self.rollback()
            raise
        session.in_transaction = False
        session.holds_commit_lock = False
        self._empty_temp()
        self.adapter.committed(self.uploaded, tid)
        self.uploaded = self.direct_rows = ()
        return tid

    def _committed(self, tid, probe_oid):
        """Whether *tid* committed, asked on a new connection; None when
        that cannot be known."""
        probe = self.mover.committed_probe(tid, probe_oid)
        try:
            self.session.close()
            self._open()
            if probe is None:
                return None
            return bool(self.session.scalar(*probe))
        except Exception:  # noqa: BLE001 -- the server is still away
            log.debug('could not ask whether %016x committed', tid,
                      exc_info=True)
            return None

    def rollback(self):
        self.chosen_tid = self.prepared_tid = None
        self.uploaded = self.direct_rows = ()
        ok = True
        if self.session.in_transaction:
            ok = self.session.rollback_quietly()
        self.locker.after_rollback(self.session)
        if ok:
            self._empty_temp()
        return ok
