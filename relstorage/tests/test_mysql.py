"""MySQL/MariaDB specifics: GET_LOCK never left behind, unix socket and
TCP, both drivers, clear connection errors, how states are uploaded, a
pack that never waits for a row a committer locked."""
import re
import socket
import threading
import time

import pytest
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import ConflictError
from ZODB.serialize import referencesf
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import u64

from relstorage.adapters.session import in_list
from relstorage.exceptions import DatabaseUnavailable
from relstorage.options import Options
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import admin_query
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import require

COMMIT_LOCK_HELD = (
    "SELECT IS_USED_LOCK(CONCAT('relstorage.commit.', "
    "LEFT(MD5(DATABASE()), 16)))")


@pytest.fixture
def factory():
    require('mysql')
    f = DatabaseFactory('mysql', True)
    f.storage(zap=True).close()
    yield f
    f.cleanup()


def _admin():
    import MySQLdb
    return MySQLdb.connect(**mysql_params(True))


def _commit_lock_holder():
    conn = _admin()
    try:
        cur = conn.cursor()
        cur.execute(COMMIT_LOCK_HELD)
        return cur.fetchone()[0]
    finally:
        conn.close()


def _store(storage, oid, serial, value):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, serial, zodb_pickle(MinPO(value)), '', t)
    return t


def _first_revision(storage):
    """Commit a new object; return its oid and tid."""
    oid = storage.new_oid()
    t = _store(storage, oid, None, 1)
    storage.tpc_vote(t)
    return oid, storage.tpc_finish(t)


def test_failed_vote_leaves_no_lock(factory):
    a = factory.storage()
    b = factory.storage(commit_lock_timeout=1)
    try:
        oid, first = _first_revision(a)
        t = _store(a, oid, None, 2)  # stale serial: conflicts at vote
        with pytest.raises(ConflictError):
            a.tpc_vote(t)
        a.tpc_abort(t)
        assert _commit_lock_holder() is None
        # b locks the same row and commits within its 1 s timeouts.
        t = _store(b, oid, first, 3)
        b.tpc_vote(t)
        b.tpc_finish(t)
    finally:
        a.close()
        b.close()


def test_killed_connection_holding_commit_lock_leaves_nothing(factory):
    a = factory.storage()
    b = factory.storage(commit_lock_timeout=1)
    try:
        oid, first = _first_revision(a)
        # a votes (row locked) and takes the commit lock, as in tpc_finish,
        # and then its connection dies.
        t = _store(a, oid, first, 2)
        a.tpc_vote(t)
        session = a._commit.session.session
        a._adapter.locker.hold_commit_lock(session, 'SELECT 1')
        conn_id = session.scalar('SELECT CONNECTION_ID()')
        assert _commit_lock_holder() == conn_id
        admin = _admin()
        admin.cursor().execute('KILL %s', (conn_id,))
        admin.close()
        with pytest.raises(Exception):
            a.tpc_finish(t)
        assert _commit_lock_holder() is None
        # Nothing of the half-done commit is visible, nothing is locked.
        assert b.load(oid)[1] == first
        t = _store(b, oid, first, 3)
        b.tpc_vote(t)
        b.tpc_finish(t)
        assert b.load(oid)[0] == zodb_pickle(MinPO(3))
    finally:
        b.close()
        try:
            a.close()
        except Exception:  # noqa: BLE001 -- its connection was killed
            pass


def test_unix_socket_and_tcp(factory):
    admin = _admin()
    cur = admin.cursor()
    cur.execute('SELECT @@socket')
    socket_path = cur.fetchone()[0]
    admin.close()
    for params in (mysql_params(True),
                   dict(mysql_params(True), host='localhost',
                        unix_socket=socket_path)):
        params.pop('port') if 'unix_socket' in params else None
        from relstorage.adapters.mysql import MySQLAdapter
        from relstorage.storage import RelStorage
        storage = RelStorage(MySQLAdapter(options=Options(), **params))
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            conn.root()['via'] = params.get('unix_socket', 'tcp')
        with db.transaction() as conn:
            assert conn.root()['via'] == params.get('unix_socket', 'tcp')
        db.close()


@pytest.mark.parametrize('driver', ['MySQLdb', 'PyMySQL'])
def test_drivers_through_zope_conf(factory, driver):
    pytest.importorskip(driver if driver == 'MySQLdb' else 'pymysql')
    p = mysql_params(True)
    db = ZODB.config.databaseFromString('''
        %%import relstorage
        <zodb>
          <relstorage>
            <mysql>
              driver %s
              host %s
              port %s
              user %s
              passwd %s
              db %s
              connect_timeout 10
            </mysql>
          </relstorage>
        </zodb>
        ''' % (driver, p['host'], p['port'], p['user'], p['passwd'], p['db']))
    try:
        assert db.storage._adapter.driver.name == driver
        with db.transaction() as conn:
            conn.root()['driver'] = driver
        with db.transaction() as conn:
            assert conn.root()['driver'] == driver
    finally:
        db.close()


@pytest.mark.parametrize('overrides, words', [
    ({'passwd': 'Sekr1t-pw'}, ['Access denied', 'user=relstoragetest']),
    ({'db': 'no_such_db'}, ['no_such_db']),
    ({'host': '127.0.0.1', 'port': 9}, ['host=127.0.0.1 port=9']),
])
def test_connection_errors_are_clear(overrides, words):
    require('mysql')
    from relstorage.adapters.mysql import MySQLAdapter
    params = mysql_params(True, connect_timeout=5, **overrides)
    with pytest.raises(DatabaseUnavailable) as exc:
        MySQLAdapter(options=Options(), **params)
    for word in words:
        assert word in str(exc.value)
    assert 'Sekr1t' not in str(exc.value)  # passwords are never shown


@pytest.mark.parametrize('version, flavour, for_share', [
    ('10.11.19-MariaDB-0+deb12u1', 'MariaDB', False),
    ('11.4.2-MariaDB', 'MariaDB', False),
    ('8.0.36', 'MySQL', True),
    ('8.4.0-commercial', 'MySQL', True),
    ('5.7.44-log', 'MySQL', False),
])
def test_server_flavour_and_features(version, flavour, for_share):
    from relstorage.adapters.mysql.server import ServerInfo
    info = ServerInfo(version)
    assert info.flavour == flavour
    assert info.has_for_share is for_share


@pytest.mark.parametrize('keep_history', [True, False])
def test_temp_store_is_emptied_outside_the_transaction(keep_history):
    """An InnoDB temporary table keeps the rows DELETE removed, and every
    later DELETE and INSERT ... SELECT scans them again: commits of a
    long-lived connection grew slower without end. After each commit or
    abort temp_store is truncated instead, so no DELETE is needed."""
    require('mysql')
    factory = DatabaseFactory('mysql', keep_history)
    storage = factory.storage(zap=True)
    try:
        session = storage._commit.store_session().session
        sent = []
        execute = session.execute

        def recording(stmt, params=()):
            sent.append(stmt)
            return execute(stmt, params)
        session.execute = recording

        def temp_rows():
            return session.scalar('SELECT COUNT(*) FROM temp_store')

        oids = [storage.new_oid() for _ in range(50)]
        for value in (1, 2):
            t = TransactionMetaData()
            storage.tpc_begin(t)
            for oid in oids:
                serial = storage.load(oid)[1] if value > 1 else None
                storage.store(oid, serial, zodb_pickle(MinPO(value)), '', t)
            storage.tpc_vote(t)
            storage.tpc_finish(t)
            assert temp_rows() == 0
        # Voted (rows uploaded), then aborted.
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.store(oids[0], storage.load(oids[0])[1],
                      zodb_pickle(MinPO(3)), '', t)
        storage.tpc_vote(t)
        storage.tpc_abort(t)
        assert temp_rows() == 0
        assert not [s for s in sent if 'DELETE FROM temp_store' in s]
        assert sum(s.startswith('TRUNCATE') for s in sent) == 3
        for oid in oids:
            assert storage.load(oid)[0] == zodb_pickle(MinPO(2))
    finally:
        storage.close()
        factory.cleanup()


@pytest.mark.parametrize('keep_history', [True, False])
def test_oid_lists_are_planned_from_index_statistics(keep_history):
    """Reads of many oids (IN lists) are planned from the index
    statistics: below eq_range_index_dive_limit values (200 by default)
    the server dives into the index once per oid, and counting every
    revision of often-updated objects made planning a 100-oid read take
    70 ms against 0.4 ms to run it. Both kinds of session."""
    require('mysql')
    factory = DatabaseFactory('mysql', keep_history)
    storage = factory.storage(zap=True)
    try:
        oid, _ = _first_revision(storage)
        load = storage._view.session().session
        store = storage._commit.store_session().session
        for session in (load, store):
            assert session.scalar(
                'SELECT @@SESSION.eq_range_index_dive_limit') == 1
            # A metadata lock wait is bounded too.
            assert session.scalar('SELECT @@SESSION.lock_wait_timeout') \
                == max(1, int(storage._options.commit_lock_timeout))
        assert store.scalar('SELECT @@SESSION.innodb_lock_wait_timeout') \
            == max(1, int(storage._options.commit_lock_timeout))
        assert storage.load(oid)[0] == zodb_pickle(MinPO(1))
    finally:
        storage.close()
        factory.cleanup()


UPLOAD = re.compile(
    r"INSERT INTO temp_store \(zoid(, prev_tid)?, state(, blob_id)?\) "
    r"VALUES \((\d+|NULL|X'[0-9a-f]*'|%s)(, (\d+|NULL|X'[0-9a-f]*'|%s))*\)"
    r"(, \((\d+|NULL|X'[0-9a-f]*'|%s)(, (\d+|NULL|X'[0-9a-f]*'|%s))*\))*$")


@pytest.mark.parametrize('driver', ['MySQLdb', 'PyMySQL'])
@pytest.mark.parametrize('keep_history', [True, False])
def test_uploaded_states_are_hex_literals_or_parameters(keep_history,
                                                        driver):
    """States are written into the upload statement as hex literals (the
    drivers quote parameters slowly), the large ones still as parameters;
    nothing but digits, NULL and hex reaches the SQL text, and every
    byte comes back as it was."""
    require('mysql')
    pytest.importorskip(driver if driver == 'MySQLdb' else 'pymysql')
    from relstorage.adapters.mysql import MySQLAdapter
    from relstorage.storage import RelStorage
    factory = DatabaseFactory('mysql', keep_history)
    factory.storage(zap=True).close()
    adapter = MySQLAdapter(driver=driver, options=Options(
        keep_history=keep_history), **mysql_params(keep_history))
    adapter.mover.inline_state_bytes = 300
    storage = RelStorage(adapter)
    try:
        assert adapter.driver.name == driver
        session = storage._commit.store_session().session
        sent = []
        execute = session.execute

        def recording(stmt, params=()):
            if stmt.startswith('INSERT INTO temp_store'):
                sent.append((stmt, params))
            return execute(stmt, params)
        session.execute = recording

        states = [bytes(range(256)), b"x'); DROP TABLE object_state; -- %s",
                  b'\\\x00\'"%%\x1a\n\r', b'', bytes(range(256)) * 3]
        oids = [storage.new_oid() for _ in states]
        serials = {}
        for round_ in (1, 2):
            t = TransactionMetaData()
            storage.tpc_begin(t)
            for oid, state in zip(oids, states):
                storage.store(oid, serials.get(oid),
                              state if round_ == 1 else state[::-1], '', t)
            storage.tpc_vote(t)
            tid = storage.tpc_finish(t)
            serials = dict.fromkeys(oids, tid)
            stored = dict(admin_query(
                'mysql', keep_history,
                'SELECT zoid, state FROM object_state WHERE tid = %s',
                (int.from_bytes(tid, 'big'),)))
            assert [bytes(stored[int.from_bytes(oid, 'big')])
                    for oid in oids] == [
                s if round_ == 1 else s[::-1] for s in states]
        assert len(sent) == 2
        for stmt, params in sent:
            assert UPLOAD.match(stmt), stmt[:200]
            # Only the state above inline_state_bytes is a parameter.
            assert params == [states[-1] if stmt is sent[0][0]
                              else states[-1][::-1]]
        assert 'prev_tid' in sent[1][0] and 'prev_tid' not in sent[0][0]
    finally:
        storage.close()
        factory.cleanup()


def test_connection_lost_while_the_commit_scripts_results_come_back(factory):
    """The commit script's later results (the COMMIT's among them) are
    read after it was sent: a connection lost then is a lost connection
    in the middle of a commit, so the storage asks whether it committed,
    and reports it committed (not a raw driver error, which an
    application would take for a failed commit and retry)."""
    import MySQLdb
    storage = factory.storage()
    try:
        oid, first = _first_revision(storage)
        t = _store(storage, oid, first, 2)
        storage.tpc_vote(t)
        session = storage._commit.session.session
        cursor = session.cursor
        run_script = session.execute_script

        def lost():
            raise MySQLdb.OperationalError(
                2013, 'Lost connection to server during query')

        def script_losing_its_results(statements):
            # Only the script's: the commit lock's message has two
            # results too.
            cursor.nextset = lost
            return run_script(statements)
        session.execute_script = script_losing_its_results
        tid = storage.tpc_finish(t)
        assert tid > first
        assert storage.load(oid) == (zodb_pickle(MinPO(2)), tid)
        assert _commit_lock_holder() is None
    finally:
        storage.close()


@pytest.mark.parametrize('keep_history', [True, False], ids=['HP', 'HF'])
def test_pack_never_waits_for_a_live_row_a_committer_locked(keep_history):
    """A committer locks its objects' rows before it asks for the commit
    lock; a pack batch holds the commit lock. The batch's deletes must
    lock only the garbage's rows: here a live object between two garbage
    objects is locked the way a voting commit locks it, and the pack
    (which would give up after commit-lock-timeout) must go through."""
    require('mysql')
    factory = DatabaseFactory('mysql', keep_history)
    storage = factory.storage(zap=True, commit_lock_timeout=2)
    db = ZODB.DB(storage)
    holder = None
    try:
        with db.transaction() as conn:
            root = conn.root()
            objects = [PersistentMapping(i=i) for i in range(60)]
            root['all'] = objects
            root['live'] = objects[30]
        with db.transaction() as conn:
            live = conn.root()['live']._p_oid
            conn.root()['live']['i'] = -1  # an old revision, with history
            conn.root()['all'] = None
        adapter = storage._adapter
        holder = adapter.connect(for_store=True)
        holder.begin(adapter.store_begin_sql)
        assert holder.fetchall(
            'SELECT zoid FROM %s WHERE zoid = %%s FOR UPDATE'
            % adapter.mover.lock_table, (u64(live),))
        result = storage.pack_with_result(time.time() + 1, referencesf)
        assert result['objects_removed'] == 59
        # With history: the live object's old revision and the root's two.
        assert result['revisions_removed'] == (62 if keep_history else 59)
        assert storage.load(live)[0]
    finally:
        if holder is not None:
            holder.rollback_quietly()
            holder.close()
        db.close()
        factory.cleanup()


def test_old_revisions_are_found_along_the_primary_key():
    # Each step of the pack's removal asks for the next objects with old
    # revisions; read along another index, each step read everything
    # after it (0.4 s a step at 1,000,000 objects).
    require('mysql')
    factory = DatabaseFactory('mysql', True)
    storage = factory.storage(zap=True)
    try:
        session = storage._adapter.connect(for_store=False)
        try:
            plan = session.fetchall(
                'EXPLAIN ' + storage._adapter.packer.old_after_sql,
                (1 << 62, 0, 500))
        finally:
            session.close()
        assert [row[5] for row in plan] == ['PRIMARY'], plan
    finally:
        storage.close()
        factory.cleanup()


def test_current_revisions_are_read_from_current_object_first():
    """Loads with history read current_object's row, then object_state's
    revision by its whole primary key, whatever the statistics say.
    Statistics counted after many revisions were deleted (zap_all, a
    pack) make object_state look smaller than current_object: the plain
    join then read object_state first, every revision of each oid (2.5 s
    instead of 0.02 for 1,000 objects after zap_all of 1,000,000
    revisions, while InnoDB purged them)."""
    require('mysql')
    factory = DatabaseFactory('mysql', True)
    storage = factory.storage(zap=True)
    try:
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            conn.root()['items'] = items = [
                PersistentMapping(i=i) for i in range(300)]
        oids = [u64(item._p_oid) for item in items[100:140]]
        admin = _admin()
        try:
            cur = admin.cursor()
            cur.execute('SELECT MAX(tid) FROM object_state')
            (top,), = cur.fetchall()
            # 200 older revisions of each object, counted, then deleted.
            cur.execute(
                'INSERT INTO object_state (zoid, tid, prev_tid, state_size, '
                'state) WITH RECURSIVE n (k) AS (SELECT 1 UNION ALL SELECT '
                'k + 1 FROM n WHERE k < 200) SELECT zoid, tid - k, 0, '
                'state_size, state FROM object_state, n WHERE tid = %s',
                (top,))
            assert cur.rowcount == 301 * 200
            admin.commit()
            for sql in ('ANALYZE TABLE object_state, current_object',
                        'DELETE FROM object_state WHERE tid < %s' % top,
                        'COMMIT', 'ANALYZE TABLE object_state'):
                cur.execute(sql)
                cur.fetchall()
        finally:
            admin.close()
        mover = storage._adapter.mover
        session = storage._view.session().session
        for sql, params in ((mover.load_current_sql, oids[:1]),
                            (mover.load_many_sql % in_list(oids), oids)):
            plan = session.fetchall('EXPLAIN ' + sql, params)
            # (table, key): object_state by both columns of its primary
            # key (16 bytes), once current_object's row is read.
            assert [(row[2], row[5]) for row in plan] == [
                ('c', 'PRIMARY'), ('s', 'PRIMARY')], plan
            assert plan[1][3] in ('eq_ref', 'const') and \
                int(plan[1][6]) == 16, plan
        db.close()
    finally:
        storage.close()
        factory.cleanup()


class _CuttingProxy(threading.Thread):
    """A TCP proxy to the test server that closes a connection when the
    client sends a query containing *cut*: the server went away (a
    restart) between accepting the connection and answering it."""

    def __init__(self, host, port, cut):
        super().__init__(daemon=True)
        self.target = (host, port)
        self.cut = cut
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.port = self.listener.getsockname()[1]
        self.cuts = 0

    def run(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(server, client, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(client, server, True),
                             daemon=True).start()

    def _pump(self, source, sink, from_client):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if from_client and self.cut in data:
                    self.cuts += 1
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self):
        self.listener.close()


@pytest.mark.parametrize('cut', [b'SELECT VERSION()', b'autocommit=1',
                                 b'ISOLATION LEVEL'])
def test_a_server_going_away_while_connecting_is_unavailable(cut):
    """A connection the server accepted, then lost before its first
    statements were answered, is DatabaseUnavailable naming the
    database, never the driver's own error."""
    require('mysql')
    from relstorage.adapters.mysql import MySQLAdapter
    params = mysql_params(True, connect_timeout=5)
    if 'unix_socket' in params:
        pytest.skip('the test server is reached by its socket')
    proxy = _CuttingProxy(params.get('host', '127.0.0.1'),
                          int(params.get('port', 3306)), cut)
    proxy.start()
    try:
        params.update(host='127.0.0.1', port=proxy.port)
        with pytest.raises(DatabaseUnavailable) as exc:
            adapter = MySQLAdapter(options=Options(), **params)
            adapter.connect(for_store=False)
        assert 'port=%d' % proxy.port in str(exc.value), exc.value
        assert proxy.cuts >= 1
    finally:
        proxy.close()
