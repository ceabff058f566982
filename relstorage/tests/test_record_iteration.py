"""record_iternext streams: a walk of a storage used directly is one
statement read a batch at a time (pages where the session cannot
stream), in one snapshot, with a bounded number of round trips and of
records held, and correct when the database changes between calls."""
import sys
import threading

import pytest
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import z64

from relstorage.adapters import dbiter
from relstorage.adapters import session as sessions
from relstorage.storage import iteration
from relstorage.testing.dbs import DatabaseFactory


def _walk(storage, between=None, start=None):
    """``[(oid, tid, data)]`` of a whole walk (from oid *start*);
    ``between(next_oid)`` runs between the calls."""
    seen = []
    next_oid = start
    while True:
        oid, tid, data, next_oid = storage.record_iternext(next_oid)
        seen.append((oid, tid, data))
        if next_oid is None:
            return seen
        if between is not None:
            between(next_oid)


def commit_directly(storage, writes=(), deletes=()):
    """Commit *writes* ``(oid, serial, data)`` and *deletes* ``(oid,
    serial)`` through *storage* directly; return the tid."""
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for oid, serial, data in writes:
        storage.store(oid, serial, data, '', t)
    for oid, serial in deletes:
        storage.deleteObject(oid, serial, t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def _sessions_opened(storage, monkeypatch):
    """The sessions (as the database package makes them: round_trips,
    closed) that *storage*'s adapter opens for reads from now on."""
    opened = []
    adapter = storage.adapter
    open_load_session = adapter.open_load_session

    def recording(*args, **kwargs):
        session = open_load_session(*args, **kwargs)
        opened.append(session.session)
        return session
    monkeypatch.setattr(adapter, 'open_load_session', recording)
    return opened


def test_record_iternext_round_trips_are_per_batch(factory, monkeypatch):
    """A walk over n records costs the round trips of about
    n / RECORD_BATCH reads, not of n, in one snapshot (one session of its
    own, closed after the last record), and never holds more than a
    batch."""
    storage = factory.storage()
    db = ZODB.DB(storage)
    n = 2 * iteration.RECORD_BATCH + 300
    try:
        with db.transaction() as conn:
            for i in range(n):
                conn.root()[i] = PersistentMapping(i=i)
        view_session = storage._view.session().session
        opened = _sessions_opened(storage, monkeypatch)

        def trips():
            assert storage._view.load.session is view_session
            return view_session.round_trips + sum(
                session.round_trips for session in opened)
        before = trips()
        storage.record_iternext()
        one_read = trips() - before
        assert one_read >= 1

        before = trips()
        seen = _walk(storage)
        walked = trips() - before
        # The first read, then full batches.
        reads = 1 + -(-(n + 1 - iteration.FIRST_RECORD_BATCH)
                      // iteration.RECORD_BATCH)
        assert walked <= one_read * reads
        assert len(seen) == len(storage) == n + 1  # and the root
        assert [oid for oid, _, _ in seen] == sorted({
            oid for oid, _, _ in seen})
        for oid, tid, data in seen[::97]:
            assert storage.load(oid) == (data, tid)
        # One snapshot for the walk, ended with it (and the walk begun by
        # the single call above, at the same place, was closed).
        assert len(opened) == 2
        assert opened[0].closed and opened[1].closed

        # What is read ahead is at most one batch.
        held = []
        _walk(storage, lambda next_oid: held.append(
            storage._iteration.held()))
        assert (iteration.FIRST_RECORD_BATCH < max(held)
                <= iteration.RECORD_BATCH)
        storage.record_iternext()
        assert not opened[-1].closed
    finally:
        db.close()
    # Closing the storage closes the session of the unfinished walk.
    assert all(session.closed for session in opened)


def _fill(storage, count):
    """*count* objects committed through *storage* directly: their oids."""
    oids = [storage.new_oid() for _ in range(count)]
    commit_directly(storage, [(oid, z64, zodb_pickle(MinPO(i)))
                              for i, oid in enumerate(oids)])
    return oids


def _rewrite(storage, oids, times):
    """Commit a new revision of every one of *oids* (each last committed
    by *storage*'s last transaction), *times* times; the last tid."""
    tid = storage.lastTransaction()
    for i in range(times):
        tid = commit_directly(storage, [
            (oid, tid, zodb_pickle(MinPO((i, oid)))) for oid in oids])
    return tid


def _counting(monkeypatch, owner, name):
    """Count the calls of *owner*'s method *name* (still calling it)."""
    calls = []
    method = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return method(*args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_walk_of_a_storage_used_directly_is_one_statement(
        factory, monkeypatch):
    """Over many batches, the records come from one statement's stream
    (no page queries), and a walk begun at an oid streams from there."""
    storage = factory.storage()
    try:
        oids = _fill(storage, 3 * iteration.RECORD_BATCH + 7)
        streams = _counting(monkeypatch, dbiter.Iterator,
                            'stream_current_records')
        pages = _counting(monkeypatch, dbiter.Iterator,
                          'iter_current_records')
        assert [oid for oid, _, _ in _walk(storage)] == oids
        assert len(streams) == 1 and pages == []
        assert [oid for oid, _, _ in _walk(storage, start=oids[-5])] == (
            oids[-5:])
        assert [args[-1] for args in streams] == [0, int.from_bytes(
            oids[-5], 'big')]
    finally:
        storage.close()


def test_record_iternext_reads_pages_where_a_session_cannot_stream(
        factory, monkeypatch):
    """A session that cannot stream (mysqlclient under gevent, whose
    reads of a stream's rows would not yield) walks a page at a time,
    all the same records."""
    monkeypatch.setattr(iteration, 'RECORD_BATCH', 7)
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 5)
    storage = factory.storage()
    try:
        oids = _fill(storage, 41)
        session_class = type(storage.adapter.open_load_session().session)
        monkeypatch.setattr(session_class, 'stream_cursor', lambda self:
                            None)
        monkeypatch.setattr(session_class, 'stream', lambda self, *a:
                            None)
        pages = _counting(monkeypatch, dbiter.Iterator,
                          'iter_current_records')
        assert [oid for oid, _, _ in _walk(storage)] == oids
        # The first page, then full pages but the last (41 = 5 + 5 * 7 + 1).
        assert [args[-1] for args in pages] == [5] + [7] * 6
    finally:
        storage.close()


def test_record_iternext_while_the_database_changes(factory, monkeypatch):
    """Commits of another client between the calls (changes, deletions,
    new objects, the next oid itself deleted): every object that exists
    throughout is seen exactly once, in oid order, and each record is a
    revision that was committed, its tid and state together."""
    monkeypatch.setattr(iteration, 'RECORD_BATCH', 5)
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 3)
    reader = factory.storage()
    writer = factory.storage()
    try:
        committed = {}   # (oid, tid) -> data
        current = {}     # oid -> tid
        deleted = set()

        def commit(writes=(), deletes=()):
            tid = commit_directly(
                writer, [(oid, current.get(oid, z64), data)
                         for oid, data in writes],
                [(oid, current[oid]) for oid in deletes])
            for oid, data in writes:
                committed[oid, tid] = data
                current[oid] = tid
            for oid in deletes:
                del current[oid]
                deleted.add(oid)

        commit([(writer.new_oid(), zodb_pickle(MinPO(i)))
                for i in range(40)])
        throughout = set(current)
        step = [0]

        def between(next_oid):
            step[0] += 1
            i = step[0]
            ahead = sorted(oid for oid in current if oid > next_oid)
            writes = [(oid, zodb_pickle(MinPO((i, oid))))
                      for oid in ahead[:2]]
            writes.append((writer.new_oid(), zodb_pickle(MinPO(-i))))
            deletes = []
            if i % 3 == 0 and next_oid in current:
                deletes.append(next_oid)
            elif len(ahead) > 3:
                deletes.append(ahead[3])
            commit(writes, deletes)
            throughout.difference_update(deletes)
            throughout.difference_update(oid for oid, _ in writes)

        seen = _walk(reader, between)
        oids = [oid for oid, _, _ in seen]
        assert oids == sorted(set(oids))
        assert throughout <= set(oids)
        assert deleted & set(oids)  # some were read before their deletion
        assert deleted - set(oids)  # and some deleted before being read
        for oid, tid, data in seen:
            assert committed[oid, tid] == data
    finally:
        reader.close()
        writer.close()


def test_record_iternext_sees_its_own_commits(factory, monkeypatch):
    """Records read ahead are read again after the storage commits."""
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 100)
    storage = factory.storage()
    try:
        oids = [storage.new_oid() for _ in range(5)]
        tid = commit_directly(storage, [(oid, z64, zodb_pickle(MinPO(0)))
                                        for oid in oids])
        first = storage.record_iternext()
        assert first[0] == oids[0]
        newer = commit_directly(
            storage, [(oids[3], tid, zodb_pickle(MinPO(1)))])
        rest = [first]
        next_oid = first[3]
        while next_oid is not None:
            record = storage.record_iternext(next_oid)
            rest.append(record)
            next_oid = record[3]
        assert [r[0] for r in rest] == oids
        assert rest[3][1:3] == (newer, zodb_pickle(MinPO(1)))
    finally:
        storage.close()


def test_record_iternext_interleaved_walks(factory, monkeypatch):
    """Two walks of one storage taking turns, one from an oid given as
    FileStorage takes it, each see their records once."""
    monkeypatch.setattr(iteration, 'RECORD_BATCH', 4)
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 2)
    storage = factory.storage()
    try:
        oids = [storage.new_oid() for _ in range(13)]
        commit_directly(storage, [(oid, z64, zodb_pickle(MinPO(i)))
                          for i, oid in enumerate(oids)])
        walks = {'all': None, 'half': oids[6]}
        seen = {'all': [], 'half': []}
        while walks:
            for name in list(walks):
                oid, _, data, walks[name] = storage.record_iternext(
                    walks[name])
                seen[name].append(oid)
                if walks[name] is None:
                    del walks[name]
        assert seen == {'all': oids, 'half': oids[6:]}
    finally:
        storage.close()


def test_record_iternext_from_threads_at_once(factory, monkeypatch):
    """Threads walking one storage at once, some from the same places and
    some asking for one record twice, each get every record once, in oid
    order, and the same record for the same *next*: a call continuing a
    walk takes no lock, so what it serves must prove itself."""
    monkeypatch.setattr(iteration, 'RECORD_BATCH', 7)
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 3)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    storage = factory.storage()
    try:
        oids = [storage.new_oid() for _ in range(150)]
        commit_directly(storage, [(oid, z64, zodb_pickle(MinPO(i)))
                          for i, oid in enumerate(oids)])
        everything = [oid for oid, _, _ in _walk(storage)]
        assert everything == sorted(everything)
        assert set(oids) <= set(everything)
        results = {}
        errors = []

        def walker(name, start, twice):
            try:
                seen = []
                next_oid = start
                while True:
                    record = storage.record_iternext(next_oid)
                    if twice:
                        assert storage.record_iternext(next_oid) == record
                    seen.append(record[0])
                    next_oid = record[3]
                    if next_oid is None:
                        break
                results[name] = seen
            except BaseException as e:  # reported below
                errors.append(e)
        # (No more walks than are remembered: more would begin anew.)
        starts = [None, None, oids[40], oids[40]][:iteration.WALKS]
        # (One asks twice: each second call begins a walk, a session.)
        threads = [threading.Thread(target=walker, args=(i, start, i == 1))
                   for i, start in enumerate(starts)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors
        for i, start in enumerate(starts):
            first = 0 if start is None else everything.index(start)
            assert results[i] == everything[first:]
    finally:
        sys.setswitchinterval(interval)
        storage.close()


def test_record_iternext_past_a_batch_of_deleted_objects(factory,
                                                         monkeypatch):
    """Deleted objects take places in a batch: batches holding only
    deleted ones are read past, not taken for the end."""
    monkeypatch.setattr(iteration, 'RECORD_BATCH', 3)
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 2)
    storage = factory.storage()
    try:
        oids = [storage.new_oid() for _ in range(14)]
        tid = commit_directly(storage, [(oid, z64, zodb_pickle(MinPO(i)))
                                for i, oid in enumerate(oids)])
        gone = oids[1:9]
        commit_directly(storage, deletes=[(oid, tid) for oid in gone])
        kept = [oid for oid in oids if oid not in gone]
        assert [oid for oid, _, _ in _walk(storage)] == kept
        # Also from an oid given, among the deleted ones.
        assert [oid for oid, _, _ in _walk(storage, start=oids[2])] == (
            kept[1:])
    finally:
        storage.close()


def test_record_iternext_walks_are_bounded(factory, monkeypatch):
    """Walks left unfinished are closed beyond WALKS (their snapshots
    end); one continued after that reads from a new snapshot."""
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 2)
    storage = factory.storage()
    try:
        oids = [storage.new_oid() for _ in range(2 * iteration.WALKS + 4)]
        commit_directly(storage, [(oid, z64, zodb_pickle(MinPO(i)))
                                  for i, oid in enumerate(oids)])
        opened = _sessions_opened(storage, monkeypatch)
        # Walks begun at every other oid (each then holds the next).
        tokens = [storage.record_iternext(oid)[3]
                  for oid in oids[:2 * iteration.WALKS + 2:2]]
        assert len(opened) == len(tokens) == iteration.WALKS + 1
        assert [s.closed for s in opened] == [True] + [False] * (
            iteration.WALKS)
        # The first walk, forgotten, goes on all the same.
        rest = []
        next_oid = tokens[0]
        while next_oid is not None:
            oid, _, _, next_oid = storage.record_iternext(next_oid)
            rest.append(oid)
        assert rest == oids[1:]
        assert len(opened) == iteration.WALKS + 2 and opened[-1].closed
    finally:
        storage.close()
    assert all(session.closed for session in opened)


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_record_pages_are_read_along_the_key_on_sqlite(keep_history):
    """SQLite reads a page of current records along current_object's
    primary key (then object_state's), never sorting the joined rows,
    states and all, in a temporary b-tree."""
    f = DatabaseFactory('sqlite', keep_history)
    storage = f.storage(zap=True)
    try:
        commit_directly(storage, [(storage.new_oid(), z64,
                                   zodb_pickle(MinPO(i))) for i in range(20)])
        session = storage.adapter.open_load_session()
        try:
            plan = [row[-1] for row in session.session.fetchall(
                'EXPLAIN QUERY PLAN '
                + storage.adapter.iterator.current_records_sql, (0, 1000))]
        finally:
            session.close()
        assert plan and not any('TEMP B-TREE' in step for step in plan), plan
        assert 'PRIMARY KEY' in plan[0], plan
    finally:
        storage.close()
        f.cleanup()


def test_a_sqlite_walk_goes_along_the_key_that_costs_least():
    """With history, SQLite streams every current record along
    object_state's key while objects have few revisions (one search per
    row), along current_object's once they have many; neither sorts."""
    f = DatabaseFactory('sqlite', True)
    storage = f.storage(zap=True)
    try:
        oids = _fill(storage, 20)
        iterator = storage.adapter.iterator
        session = storage.adapter.open_load_session()
        try:
            def chosen():
                return iterator.streamed_records_sql(session.session)
            assert chosen() == dbiter.STREAMED_ALONG_REVISIONS
            for sql in (dbiter.STREAMED_ALONG_REVISIONS,
                        dbiter.STREAMED_CURRENT_RECORDS[True]):
                plan = [row[-1] for row in session.session.fetchall(
                    'EXPLAIN QUERY PLAN ' + sql, (0,))]
                assert not any('TEMP B-TREE' in step for step in plan), plan
            # Each object rewritten twice: three revisions each.
            _rewrite(storage, oids, 2)
            session.session.end_read()
            assert chosen() == dbiter.STREAMED_CURRENT_RECORDS[True]
        finally:
            session.close()
        assert [oid for oid, _, _ in _walk(storage)] == oids
    finally:
        storage.close()
        f.cleanup()


def test_a_postgresql_walk_merges_the_keys_while_objects_have_few_revisions():
    """With history, PostgreSQL streams every current record by merging
    both primary keys while objects have few revisions (each row read
    once, in order), as its planner chooses along current_object's once
    they have many; and never sorts, whatever the planner's statistics
    say (none yet: the tables were just filled)."""
    from relstorage.adapters.postgresql import session as pg_session
    f = DatabaseFactory('postgresql', True)
    storage = f.storage(zap=True)
    try:
        oids = _fill(storage, 2000)
        iterator = storage.adapter.iterator
        load = storage.adapter.open_load_session()
        session = load.session
        try:
            def plan():
                """The statement a walk would stream, and its plan, with
                the tables' statistics current."""
                session.execute('ANALYZE object_state, current_object')
                session.restart(storage.adapter.load_begin_sql)
                sql = iterator.streamed_records_sql(session)
                session.execute(pg_session.STREAM_SETUP)
                steps = [row[0] for row in session.fetchall(
                    'EXPLAIN DECLARE x NO SCROLL CURSOR FOR ' + sql, (0,))]
                session.rollback()
                assert not any('Sort' in step for step in steps), steps
                return sql, steps[0]
            sql, top = plan()
            assert sql == dbiter.STREAMED_ALONG_REVISIONS
            assert top.startswith('Merge Join'), top
            tid = _rewrite(storage, oids, 2)
            # (The planner's own choice then, without a sort.)
            sql, top = plan()
            assert sql == dbiter.STREAMED_CURRENT_RECORDS[True]
        finally:
            load.close()
        seen = _walk(storage)
        assert [oid for oid, _, _ in seen] == oids
        assert all(serial == tid for _, serial, _ in seen)
    finally:
        storage.close()
        f.cleanup()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_a_postgresql_stream_fetches_more_rows_than_it_hands_out(
        keep_history, monkeypatch):
    """On PostgreSQL each FETCH of a walk's cursor is a round trip: it
    brings SERVER_BATCH rows, handed out a smaller batch at a time."""
    from relstorage.adapters.postgresql import session as pg_session
    monkeypatch.setattr(pg_session.DeclaredStream, 'SERVER_BATCH', 10)
    monkeypatch.setattr(iteration, 'STREAM_BATCH', 3)
    monkeypatch.setattr(iteration, 'FIRST_RECORD_BATCH', 3)
    f = DatabaseFactory('postgresql', keep_history)
    storage = f.storage(zap=True)
    try:
        oids = _fill(storage, 41)
        opened = _sessions_opened(storage, monkeypatch)
        fetches = _counting(monkeypatch, pg_session.DeclaredStream, 'fetch')
        statements = _counting(monkeypatch, pg_session.PostgreSQLSession,
                               'execute')
        assert [oid for oid, _, _ in _walk(storage)] == oids
        assert len(opened) == 1 and opened[0].closed
        # 41 rows: 14 batches of 3 (the last of 2), then the end.
        assert len(fetches) == 15
        sent = [args[1] for args in statements if args[0] is opened[0]]
        assert sum('DECLARE' in stmt for stmt in sent) == 1
        # Five FETCHes of 10 (the last brings one, so no sixth), each a
        # round trip.
        assert sum('FETCH' in stmt for stmt in sent) == 5
    finally:
        storage.close()
        f.cleanup()
