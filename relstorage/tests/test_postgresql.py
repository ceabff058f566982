"""PostgreSQL specifics: zap_all truncates large tables, but never waits
for a reader to do so; commits copy rows into place without temp_store;
commit announcements. Through psycopg2 and psycopg 3."""
import contextlib
import time

import pytest
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import ConflictError
from ZODB.POSException import POSKeyError
from ZODB.utils import maxtid
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import admin_query
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import wait_for

from .test_mysql import _first_revision


@pytest.fixture(params=[(True, 'psycopg2'), (False, 'psycopg2'),
                        (True, 'psycopg'), (False, 'psycopg')],
                ids=['hp', 'hf', 'hp-psycopg3', 'hf-psycopg3'])
def factory(request):
    keep_history, driver = request.param
    f = DatabaseFactory('postgresql', keep_history, driver=driver)
    yield f
    f.cleanup()


def _filenode(keep_history):
    return admin_query('postgresql', keep_history,
                       "SELECT pg_relation_filenode('object_state')")[0][0]


def test_zap_truncates_large_tables(factory):
    storage = factory.storage(zap=True)
    try:
        oid, _ = _first_revision(storage)
        before = _filenode(factory.keep_history)
        storage.adapter.schema.truncate_above_bytes = 0  # every table is large
        storage.zap_all()
        # TRUNCATE gives the table new storage (DELETE keeps the old).
        assert _filenode(factory.keep_history) != before
        with pytest.raises(POSKeyError):
            storage.load(oid)
        assert len(storage) == 0
        _first_revision(storage)
        assert len(storage) == 1
    finally:
        storage.close()


def test_zap_deletes_when_a_reader_holds_the_table(factory):
    import psycopg2
    storage = factory.storage(zap=True, commit_lock_timeout=600)
    reader = psycopg2.connect(pg_dsn(factory.keep_history))
    try:
        oid, _ = _first_revision(storage)
        # A reader in a transaction: TRUNCATE would wait for it to end.
        reader.cursor().execute('SELECT count(*) FROM object_state')
        before = _filenode(factory.keep_history)
        storage.adapter.schema.truncate_above_bytes = 0
        started = time.monotonic()
        storage.zap_all()
        # It gave up on TRUNCATE long before commit-lock-timeout.
        assert time.monotonic() - started < 60
        assert _filenode(factory.keep_history) == before
        reader.rollback()
        assert admin_query('postgresql', factory.keep_history,
                           'SELECT count(*) FROM object_state') == [(0,)]
        with pytest.raises(POSKeyError):
            storage.load(oid)
    finally:
        reader.close()
        storage.close()


@contextlib.contextmanager
def _writer_and_listener(factory):
    """``(wtm, wconn, rtm, rconn)``: a writer's connection that committed
    ``root['x'] = 1``, and a connection with a poll-interval that read it
    (its transaction ended), each with its transaction manager."""
    import transaction
    import ZODB
    writer = ZODB.DB(factory.storage(zap=True))
    reader = ZODB.DB(factory.storage(poll_interval=3600))
    try:
        wtm = transaction.TransactionManager()
        wconn = writer.open(wtm)
        wconn.root()['x'] = 1
        wtm.commit()
        rtm = transaction.TransactionManager()
        rconn = reader.open(rtm)
        assert rconn.root()['x'] == 1
        rtm.abort()
        yield wtm, wconn, rtm, rconn
    finally:
        writer.close()
        reader.close()


def test_poll_interval_with_commit_announcements(factory):
    """With a poll-interval, every commit is announced (NOTIFY) to the
    load sessions listening: an instance within its interval sees another
    process's commit once its announcement arrives (on its own, shortly
    after the COMMIT), and polls nothing while nobody commits. (The first
    read, by a connection taken from the pool, sees the commit made
    before: see test_reopened_connection_sees_commits_not_yet_announced.)
    """
    with _writer_and_listener(factory) as (wtm, wconn, rtm, rconn):
        inst = rconn._storage
        session = inst._view.load.session
        assert session.fetchall('SELECT pg_listening_channels()') == [
            ('relstorage_commits',)]

        trips = session.round_trips
        for _ in range(5):          # nobody commits: no query at all
            rtm.begin()
            assert rconn.root()['x'] == 1
            rtm.abort()
        assert session.round_trips == trips

        wconn.root()['x'] = 2
        wtm.commit()

        def sees_it():
            rtm.begin()
            try:
                return rconn.root()['x'] == 2
            finally:
                rtm.abort()
        # Without the announcement the view would stay for an hour.
        assert wait_for(sees_it)
        assert session.round_trips > trips


def _hold_announcements(instance):
    """Keep the commits announced from now on from reaching *instance*'s
    load session: PostgreSQL holds a notification for a listening session
    that is in a transaction until the transaction ends. It stands for
    the listener's server process that a loaded machine has not run yet:
    the commit is visible, its announcement not there (in a loop of
    commits, nearly half had not reached the listener when the COMMIT
    returned). A read through the instance begins its snapshot."""
    instance.loadBefore(z64, maxtid)
    assert instance._view.load.session.in_transaction


@pytest.mark.parametrize('explicit', [False, True],
                         ids=['implicit', 'explicit'])
def test_reopened_connection_sees_commits_not_yet_announced(factory,
                                                            explicit):
    """A connection taken from ZODB's pool sees every commit made before
    it was opened, even one whose announcement has not reached it yet:
    within its poll-interval it would otherwise trust the silence. (With
    an explicit transaction manager, open() does not poll; begin() does.)
    """
    import transaction
    import ZODB
    writer = ZODB.DB(factory.storage(zap=True))
    reader = ZODB.DB(factory.storage(poll_interval=3600))
    try:
        rtm = transaction.TransactionManager(explicit=explicit)
        rconn = reader.open(rtm)
        if explicit:
            rtm.begin()
        assert 'x' not in rconn.root()
        rtm.abort()
        inst = rconn._storage
        rconn.close()

        _hold_announcements(inst)
        wtm = transaction.TransactionManager()
        wconn = writer.open(wtm)
        wconn.root()['x'] = 1
        wtm.commit()

        again = reader.open(rtm)
        assert again is rconn and again._storage is inst
        if explicit:
            rtm.begin()
        assert again.root()['x'] == 1
        rtm.abort()
        again.close()
    finally:
        writer.close()
        reader.close()


def test_announcement_arriving_with_a_read_is_not_lost(factory):
    """A commit announced while the instance's snapshot was open reaches
    it with the snapshot's end (a statement's results), through either
    driver: the next transaction sees the commit, within the interval."""
    with _writer_and_listener(factory) as (wtm, wconn, rtm, rconn):
        rtm.begin()
        _hold_announcements(rconn._storage)
        wconn.root()['x'] = 2
        wtm.commit()
        rtm.abort()         # ends the snapshot: the announcement comes
        rtm.begin()
        assert rconn.root()['x'] == 2
        rtm.abort()


def test_no_listening_without_a_poll_interval(factory):
    """Without an interval every transaction polls; a listening session
    would only pile notifications up in the driver."""
    storage = factory.storage(zap=True)
    try:
        storage._view.ensure()
        session = storage._view.load.session
        assert session.fetchall('SELECT pg_listening_channels()') == []
        assert storage._view.load.commits_announced() is None
    finally:
        storage.close()


def _recording_copies(storage):
    """The COPY statements the store session sends, with their row
    counts (``[(sql, rows)]``), and the other statements."""
    session = storage._commit.store_session().session
    copies, sent = [], []
    execute = session.execute

    class Cursor:
        def __init__(self, cursor):
            self.cursor = cursor

        def __getattr__(self, name):
            return getattr(self.cursor, name)

        def copy_expert(self, sql, data, size=8192):
            self.cursor.copy_expert(sql, data, size)
            copies.append((sql.split(' (')[0], self.cursor.rowcount))

    def recording(stmt, params=()):
        sent.append(stmt)
        return execute(stmt, params)
    session.cursor = Cursor(session.cursor)
    session.execute = recording
    return copies, sent


def _commit(storage, stores):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for oid, serial, state in stores:
        storage.store(oid, serial, state, '', t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_commits_copy_rows_into_place(keep_history):
    """Rows that need no upsert skip temp_store: one COPY into
    object_state at commit. Without history those are the objects new to
    the database (changed ones still go through temp_store; a commit may
    hold both); with history, every row (current_object follows)."""
    factory = DatabaseFactory('postgresql', keep_history)
    storage = factory.storage(zap=True)
    try:
        copies, sent = _recording_copies(storage)
        oids = [storage.new_oid() for _ in range(60)]
        first = [(oid, None, b'new %d' % u64(oid)) for oid in oids[:50]]
        tid1 = _commit(storage, first)
        assert copies == [('COPY object_state', 50)]
        assert not [s for s in sent if 'temp_store' in s]
        del copies[:], sent[:]
        # Ten new objects, five changed ones and a deletion.
        second = ([(oid, None, b'') for oid in oids[50:]]
                  + [(oid, tid1, b'changed %d' % u64(oid))
                     for oid in oids[:5]])
        t = TransactionMetaData()
        storage.tpc_begin(t)
        for oid, serial, state in second:
            storage.store(oid, serial, state, '', t)
        storage.deleteObject(oids[5], tid1, t)
        storage.tpc_vote(t)
        tid2 = storage.tpc_finish(t)
        if keep_history:
            assert copies == [('COPY object_state', 16)]
            assert not [s for s in sent if 'temp_store' in s]
        else:
            assert copies == [('COPY temp_store', 6),
                              ('COPY object_state', 10)]
            assert [s for s in sent if 'FROM temp_store' in s]
        want = {u64(oid): (u64(tid1), len(state), state)
                for oid, _, state in first}
        want.update((u64(oid), (u64(tid2), len(state), state))
                    for oid, _, state in second)
        want[u64(oids[5])] = (u64(tid2), 0, None)
        rows = {zoid: (tid, size, bytes(state) if state is not None
                       else None)
                for zoid, tid, size, state in admin_query(
                    'postgresql', keep_history,
                    'SELECT zoid, tid, state_size, state FROM object_state '
                    + ('JOIN current_object USING (zoid, tid)'
                       if keep_history else ''))}
        assert {oid: rows[oid] for oid in want} == want
        if keep_history:
            # The old revisions are kept, each with its previous tid.
            assert sorted(admin_query(
                'postgresql', True, 'SELECT zoid, prev_tid FROM '
                'object_state WHERE tid = %s', (u64(tid2),))) == sorted(
                    [(u64(oid), 0) for oid in oids[50:]]
                    + [(u64(oid), u64(tid1)) for oid in oids[:6]])
            for oid in oids[:5]:
                assert storage.loadSerial(oid, tid1) == b'new %d' % u64(oid)
    finally:
        storage.close()
        factory.cleanup()


def test_states_of_every_byte_come_back_whole(factory):
    """States travel escaped (bytea_output, a third less work for the
    drivers than hex, and fewer bytes for pickles): states of every byte
    value, the escape character and NUL among them, come back as they
    were written, through loads, record_iternext and iterator(), with
    both drivers."""
    storage = factory.storage(zap=True)
    try:
        states = [bytes(range(256)), b'\\' * 300, b'\x00' * 50,
                  b"\\x41'\\\\001", bytes(range(255, -1, -1)) * 9, b'']
        oids = [storage.new_oid() for _ in states]
        tid = _commit(storage, [(oid, None, state)
                                for oid, state in zip(oids, states)])
        for oid, state in zip(oids, states):
            assert storage.load(oid) == (state, tid)
        seen, next_oid = {}, None
        while True:
            oid, _, data, next_oid = storage.record_iternext(next_oid)
            seen[oid] = data
            if next_oid is None:
                break
        assert [seen[oid] for oid in oids] == states
        it = storage.iterator()
        try:
            records = {r.oid: r.data for txn in it for r in txn}
        finally:
            it.close()
        assert [records[oid] for oid in oids] == states
        load = storage.adapter.open_load_session()
        try:
            load.restart()
            assert load.session.scalar('SHOW bytea_output') == 'escape'
        finally:
            load.close()
    finally:
        storage.close()


def test_an_oid_created_by_two_transactions_conflicts():
    """Two transactions that both create an object with an oid of their
    own choosing (not from new_oid) both find no row at vote. The second
    to commit gets a ConflictError naming the oid, and the first one's
    object stays as it committed it: nothing is overwritten."""
    factory = DatabaseFactory('postgresql', False)
    first = factory.storage(zap=True)
    second = factory.storage()
    try:
        oid = p64(0x5eed0000)
        t2 = TransactionMetaData()
        second.tpc_begin(t2)
        second.store(oid, None, b'from the second', '', t2)
        second.tpc_vote(t2)
        tid = _commit(first, [(oid, None, b'from the first')])
        with pytest.raises(ConflictError, match='object 0x5eed0000 was '
                           'created by another transaction'):
            second.tpc_finish(t2)
        assert [(t, bytes(state)) for t, state in admin_query(
            'postgresql', False,
            'SELECT tid, state FROM object_state WHERE zoid = %s',
            (u64(oid),))] == [(u64(tid), b'from the first')]
        # Both commit again: the locks were released, the sessions work.
        other = second.new_oid()
        _commit(second, [(other, None, b'second again'),
                         (oid, tid, b'second after all')])
        _commit(first, [(first.new_oid(), None, b'first again')])
        first.sync()
        assert first.load(oid)[0] == b'second after all'
    finally:
        first.close()
        second.close()
        factory.cleanup()


@pytest.mark.parametrize('keep_history', [True, False], ids=['hp', 'hf'])
def test_opening_draws_no_warning_from_the_server(keep_history,
                                                  monkeypatch):
    """Nothing the storage sends on opening (the schema's transaction
    and what follows) has the server warn, as a ROLLBACK outside any
    transaction did: the warnings psycopg2 received on every session are
    looked at as it closes (its notices, "relation exists, skipping"
    and the like, are not warnings)."""
    from relstorage.adapters.session import Session
    warnings = []
    close = Session.close

    def closing(self):
        notices = getattr(self.conn, 'notices', None)
        if notices:
            warnings.extend(n for n in notices if n.startswith('WARNING'))
        close(self)

    monkeypatch.setattr(Session, 'close', closing)
    f = DatabaseFactory('postgresql', keep_history, driver='psycopg2')
    try:
        for _ in range(2):  # creating the schema, then finding it
            storage = f.storage()
            storage.close()
    finally:
        f.cleanup()
    assert warnings == []
