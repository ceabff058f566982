"""Every statement the Oracle adapter sends, gathered by running its code.

No Oracle server is needed: the real OracleAdapter, with its real sessions
(and so their translation to named binds), runs every code path that
sends SQL -- schema creation and removal, loads, polls, iteration, row
and commit locks (DBMS_LOCK and the LOCK TABLE fallback), upload, commit,
restore, oid allocation, blobs and pack -- over a connection that keeps
each statement as the server would receive it and answers with a few
plausible rows, enough for each path to reach its next statement.
"""
import importlib
import os
import tempfile

from relstorage.adapters.adapter import LoadSession
from relstorage.adapters.adapter import StoreSession
from relstorage.adapters.oracle.adapter import OracleAdapter
from relstorage.adapters.oracle.session import OracleSession
from relstorage.adapters.schema import SCHEMA_VERSION
from relstorage.options import Options

#: Rows answered to statements beginning so (as sent, binds named).
ANSWERS = {
    # Load before: the revision before, then the next one's tid.
    'SELECT state, tid FROM object_state WHERE zoid = :p1 AND tid < :p2':
        [(b'state', 3)],
    # The oid sequence is below the oids a restore stores.
    'SELECT zoid_seq.NEXTVAL FROM DUAL': [(1,)],
    # A pre-pack state to pick up.
    "SELECT name, value FROM relstorage_meta WHERE name IN":
        [('prepack_tid', '5'), ('prepack_checked_tid', '6')],
    # Revisions and garbage to remove, one with a blob.
    'SELECT state_size, blob_id FROM object_state WHERE':
        [(10, 7), (8, None)],
    'SELECT COUNT(*) FROM pack_gc': [(2,)],
    # A pre-pack page: one object, deleted (with history, a full page of
    # one object's revisions: its state is asked for on its own).
    'SELECT s.zoid, s.state, s.tid, r.tid AS kept_tid, r.refs AS kept FROM '
    'object_state s': [(4, None, 3, None, None)],
    'SELECT COUNT(*) FROM (SELECT zoid FROM object_state': [(2,)],
    'SELECT blob_id FROM object_state WHERE zoid IN': [(7,)],
    'SELECT MAX(tid) FROM transactions': [(9,)],
    'SELECT COUNT(*) FROM transactions WHERE tid <= :p1': [(1,)],
}


class Recorder:
    """What the connections of one adapter were asked to run."""

    def __init__(self):
        self.statements = []
        #: user_tables and user_sequences answer this count.
        self.exists = 0
        #: What DBMS_LOCK.REQUEST answers (0: granted).
        self.lock_status = 0
        #: Text -> exception: a statement containing the text raises it.
        self.errors = {}
        #: The rows of relstorage_meta.
        self.meta = []

    def run(self, sql):
        self.statements.append(sql)
        for marker, error in self.errors.items():
            if marker in sql:
                raise error
        if sql == 'SELECT name, value FROM relstorage_meta':
            return list(self.meta)
        if sql.startswith(('SELECT COUNT(*) FROM user_tables',
                           'SELECT COUNT(*) FROM user_sequences')):
            return [(self.exists,)]
        for prefix, rows in ANSWERS.items():
            if sql.startswith(prefix):
                return list(rows)
        return []


class _Value:
    def __init__(self, value):
        self.value = value

    def getvalue(self):
        return self.value


class RecordingCursor:
    arraysize = 100
    rowcount = 0

    def __init__(self, recorder):
        self.recorder = recorder
        self.rows = []

    def execute(self, sql, params=None):
        self.rows = self.recorder.run(sql)

    def executemany(self, sql, seq):
        self.recorder.run(sql)
        self.rows = []

    def fetchone(self):
        return self.rows.pop(0) if self.rows else None

    def fetchall(self):
        rows, self.rows = self.rows, []
        return rows

    def var(self, type_, *args, **kw):
        return _Value(self.recorder.lock_status)

    def close(self):
        pass


class RecordingConnection:

    def __init__(self, recorder):
        self.recorder = recorder

    def cursor(self):
        return RecordingCursor(self.recorder)

    def commit(self):
        pass

    def rollback(self):
        pass

    def close(self):
        pass


class RecordingOracleAdapter(OracleAdapter):
    """The real adapter; only its connections record instead of sending."""

    def __init__(self, recorder, keep_history):
        super().__init__(user='app', password='secret',
                         dsn='db.example.org:1521/ORCLPDB1',
                         options=Options(keep_history=keep_history))
        self.recorder = recorder

    def connect(self, for_store):
        return OracleSession(self, RecordingConnection(self.recorder))


def _blob_file(directory, size):
    path = os.path.join(directory, 'blob-%d' % size)
    with open(path, 'wb') as f:
        f.write(b'x' * size)
    return path


def collect(keep_history, blobs):
    """``[statement]``, as sent, of every path of the adapter in one
    history mode, with (*blobs*) or without blobs in the database."""
    recorder = Recorder()
    adapter = RecordingOracleAdapter(recorder, keep_history)
    driver_error = adapter.driver.Error

    # The schema: created, found, emptied, removed.
    adapter.prepare()
    recorder.exists = 1
    recorder.meta = [('schema_version', str(SCHEMA_VERSION)),
                     ('keep_history', 'true' if keep_history else 'false')]
    RecordingOracleAdapter(recorder, keep_history).prepare()
    # The persistent cache's key: looked for, not found, created.
    RecordingOracleAdapter(recorder, keep_history).cache_key()
    adapter.zap_all()
    adapter.drop_all()
    recorder.exists = 0

    load = LoadSession(adapter)
    load.restart()
    load.poll()
    load.poll_changes(0)
    load.snapshot_tid()
    load.changes(0, 10)
    load.load_current(1)
    load.load_many([1, 2, 3])
    load.load_revision(1, 2)
    load.load_before(1, 5)
    load.current_tids([1, 2])
    load.transactions(0, 10)
    load.transactions(0, 10, newest_first=True, include_packed=False,
                      limit=5)
    load.records(5)
    load.object_history(1, 10)
    if keep_history:
        load.transaction_exists(5)
        load.states_before(5)
    load.iter_current_records(0, 100)
    load.object_count()
    load.size_in_bytes()
    load.end_snapshot()
    load.close()

    store = StoreSession(adapter)
    rows = [(1, 0, b'new', None), (2, 3, b'changed', None),
            (4, 3, None, None)]
    meta = (b'user', b'description', b'')
    # Runs of consecutive oids are locked as ranges, the rest one by one.
    store.lock_and_read_current([1, 2, 3, 4, 5, 9], [20, 21])
    store.new_oid_blocks(3)
    store.upload(rows, tid_free=True)
    store.commit(meta, probe_oid=1)
    store.lock_and_read_current([1], [])
    store.upload(rows)
    store.commit(meta, restore_tid=1 << 60, max_oid=1000, packed=True,
                 empty=False)
    if not keep_history:
        store.upload([(1, 7, b'copied', None)])
        store.commit(meta, restore_tid=(1 << 60) + 2,
                     first_row_tid=(1 << 60) + 1)
    store.upload(rows)
    store.rollback()
    for oid in (None, 1):
        probe = adapter.mover.committed_probe(1 << 60, oid)
        if probe is not None:
            store.session.scalar(*probe)
    if blobs:
        with tempfile.TemporaryDirectory() as tmp:
            for size in (0, 10, 2500):
                store.upload_blob(_blob_file(tmp, size), 1000)
        store.drop_replaced_blobs([1, 2])
        store.blob_of(1, 2)
        store.blob_chunk(7, 0)

    # Locks, busy and free, and without the DBMS_LOCK privilege.
    session = store.session
    locker = adapter.locker
    last_tid = adapter.mover.last_tid_sql
    locker.try_commit_lock(session, last_tid)
    locker.try_pack_lock(session)
    locker.release_pack_lock(session)
    # As the driver raises it: its error object carries the ORA- number.
    detail = importlib.import_module('oracledb.errors')._Error(
        "ORA-06550: line 1, column 17:\nPLS-00201: identifier 'DBMS_LOCK' "
        "must be declared", code=6550)
    recorder.errors['DBMS_LOCK'] = driver_error(detail)
    locker.hold_commit_lock(session, last_tid)
    locker.try_commit_lock(session, last_tid)
    locker.try_pack_lock(session)
    locker.release_pack_lock(session)
    recorder.errors.clear()

    # Pack.
    packer = adapter.packer
    packer.last_pack_tid(session)
    packer.states_at(session, 5, -1, 100)
    packer.states_at(session, 5, -1, 1, deleted=[])
    packer.states_after(session, 5)
    packer.start_graph(session)
    packer.add_references(session, [(1, 2), (2, 3)])
    packer.keep_references(session, [(1, 5, b'\0' * 8), (2, 5, b'')], [1])
    packer.add_roots(session, [0, 1])
    packer.mark(session)
    packer.find_garbage(session, 5, True)
    packer.find_garbage(session, 5, False)
    packer.add_garbage(session, [3, 4])
    packer.garbage_after(session, -1, 100)
    packer.still_garbage(session, [1, 2])
    packer.spare(session, [1, 2])
    packer.count_old_revisions(session, 5)
    packer.old_revisions_after(session, 5, -1, 100)
    adapter.schema.ensure_pack_garbage(session)
    adapter.schema.ensure_state_refs(session)
    packer.save_prepack(session, 5, 6)
    recorder.exists = 1
    packer.load_prepack(session)
    packer.start_graph(session)
    packer.forget_prepack(session)
    recorder.exists = 0
    packer.remove_garbage(session, [1, 2])
    packer.remove_old_revisions(session, [(1, 3), (2, 4)])
    packer.finish(session, 5)
    store.close()
    return recorder.statements
