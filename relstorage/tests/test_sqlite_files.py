"""SQLite: the files of a data directory, opened by processes starting
together, and kept from other users.

Several processes opening one new database at once met at the oid file
(``oids.sqlite3``), switched to WAL without waiting for the others:
SQLite answers "database is locked" at once there. Every file of the
data-dir now goes through one opening (adapters/sqlite/files.py). The
files were also created with the umask's mode (0644, readable by every
local user)."""
import logging
import multiprocessing
import os
import sqlite3
import stat
import threading
import time

import pytest
import transaction
from ZODB.serialize import referencesf
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64

from relstorage.adapters.sqlite.files import MAIN_FILE
from relstorage.adapters.sqlite.files import OID_FILE
from relstorage.config import storage_from_string

WORKERS = 6
ROUNDS = 10
OIDS_EACH = 20


def _open(data_dir):
    return storage_from_string(
        '<relstorage>\n  <sqlite3>\n    data-dir %s\n  </sqlite3>\n'
        '</relstorage>\n' % data_dir)


def _schema(path):
    conn = sqlite3.connect('file:%s?mode=ro' % path, uri=True)
    try:
        return sorted(conn.execute(
            'SELECT type, name, sql FROM sqlite_master').fetchall())
    finally:
        conn.close()


def _store(storage, oid, value):
    txn = transaction.Transaction()
    storage.tpc_begin(txn)
    storage.store(oid, z64, zodb_pickle(MinPO(value)), '', txn)
    storage.tpc_vote(txn)
    storage.tpc_finish(txn)


def _failure(e):
    return ('failed', '%s: %s' % (type(e).__name__, e))


def _racer(base, at_open, at_oids, results):
    """In a process of its own: each round, open the round's new
    database together with the other processes, then take oids from it
    together with them, and commit an object."""
    for round_ in range(ROUNDS):
        data_dir = os.path.join(base, 'round%d' % round_)
        storage = result = None
        at_open.wait()
        try:
            storage = _open(data_dir)
        except Exception as e:  # noqa: BLE001 -- reported to the test
            result = _failure(e)
        # Also when opening failed: the others are waiting here.
        at_oids.wait()
        try:
            if storage is not None:
                oids = [u64(storage.new_oid()) for _ in range(OIDS_EACH)]
                _store(storage, p64(oids[0]), os.getpid())
                result = ('ok', oids,
                          _schema(os.path.join(data_dir, MAIN_FILE)),
                          _schema(os.path.join(data_dir, OID_FILE)))
        except Exception as e:  # noqa: BLE001 -- reported to the test
            result = _failure(e)
        finally:
            if storage is not None:
                storage.close()
        results.put((round_, result))


def test_processes_opening_a_new_database_together(tmp_path):
    ctx = multiprocessing.get_context('spawn')
    # Each round the workers meet twice: before opening the new database
    # (its main file and schema) and before their first oid (the oid
    # file), so that they really arrive at each file together.
    at_open = ctx.Barrier(WORKERS, timeout=120)
    at_oids = ctx.Barrier(WORKERS, timeout=120)
    results = ctx.Queue()
    procs = [ctx.Process(target=_racer,
                         args=(str(tmp_path), at_open, at_oids, results))
             for _ in range(WORKERS)]
    for proc in procs:
        proc.start()
    got = [results.get(timeout=300) for _ in range(WORKERS * ROUNDS)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    failures = [(r, res[1]) for r, res in got if res[0] != 'ok']
    assert failures == []
    for round_ in range(ROUNDS):
        mine = [res for r, res in got if r == round_]
        assert len(mine) == WORKERS
        oids = [oid for res in mine for oid in res[1]]
        assert len(oids) == len(set(oids)) == WORKERS * OIDS_EACH
        # One schema, whoever made it, the same seen by every process.
        assert len({repr(res[2]) for res in mine}) == 1
        assert len({repr(res[3]) for res in mine}) == 1
        storage = _open(tmp_path / ('round%d' % round_))
        try:
            assert len(storage) == WORKERS
        finally:
            storage.close()


def test_the_oid_file_held_by_another_process_is_waited_for(tmp_path):
    """The window of the race above, held open: another connection is
    about to write to the oid file, still in rollback-journal mode (as
    another process turning it to WAL is), while the storage takes its
    first oid and so turns that file to WAL: SQLite refuses that at once,
    without waiting in its busy handler."""
    data_dir = tmp_path / 'data'
    storage = _open(data_dir)
    holder = sqlite3.connect(str(data_dir / OID_FILE), isolation_level=None)
    try:
        holder.execute('CREATE TABLE other (x)')
        holder.execute('BEGIN IMMEDIATE')
        got = []
        taker = threading.Thread(
            target=lambda: got.append(_outcome(storage.new_oid)))
        taker.start()
        # Until the storage gave up (as it did at once) or for a while:
        # the storage meets the held file either way.
        taker.join(1.0)
        holder.execute('ROLLBACK')
        taker.join(60)
        assert got and got[0][0] == 'ok', got
    finally:
        holder.close()
        storage.close()


def _outcome(call):
    try:
        return ('ok', call())
    except Exception as e:  # noqa: BLE001 -- reported to the test
        return _failure(e)


def test_a_busy_file_is_named_in_the_error(tmp_path):
    """The wait for another process's hold is bounded, and what ends it
    names the file."""
    from relstorage.adapters.sqlite import files
    from relstorage.exceptions import DatabaseUnavailable
    path = str(tmp_path / 'held.sqlite3')
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute('CREATE TABLE t (x)')
    holder.execute('BEGIN EXCLUSIVE')
    try:
        with pytest.raises(DatabaseUnavailable) as exc:
            files.connect(path, 0.2, [('journal_mode', 'wal')])
    finally:
        holder.execute('ROLLBACK')
        holder.close()
    assert path in str(exc.value)
    assert 'journal_mode' in str(exc.value)


def _modes(root):
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(
                os.lstat(path).st_mode)
    return found


@pytest.fixture(params=[0o022, 0o000], ids=['umask022', 'umask000'])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_files_are_created_for_their_owner_alone(tmp_path, umask):
    data_dir = tmp_path / 'data'
    storage = _open(data_dir)
    try:
        _store(storage, storage.new_oid(), 'x')
        storage.pack(time.time(), referencesf)
        # The WAL and shared-memory files are there while open.
        modes = _modes(data_dir)
    finally:
        storage.close()
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    for name in (MAIN_FILE, MAIN_FILE + '-wal', MAIN_FILE + '-shm',
                 OID_FILE, OID_FILE + '-wal', OID_FILE + '-shm',
                 'pack.lock', 'checkpoint.lock'):
        assert name in modes
    assert {name: oct(mode) for name, mode in modes.items()
            if mode != 0o600} == {}


def test_files_open_to_others_are_warned_about(tmp_path, caplog):
    data_dir = tmp_path / 'data'
    storage = _open(data_dir)
    _store(storage, storage.new_oid(), 'x')
    storage.close()
    main = data_dir / MAIN_FILE
    oids = data_dir / OID_FILE
    # Left as someone else made them: the directory readable by all,
    # the database writable by its group, the oid file private.
    os.chmod(data_dir, 0o755)
    os.chmod(main, 0o620)
    os.chmod(oids, 0o600)
    with caplog.at_level(logging.WARNING):
        storage = _open(data_dir)
        storage.new_oid()
        storage.close()
    warned = [r.getMessage() for r in caplog.records
              if r.levelno == logging.WARNING]
    assert any(str(data_dir) + ' ' in m and '0o755' in m for m in warned)
    assert any(str(main) + ' ' in m and '0o620' in m for m in warned)
    assert not any(str(oids) in m for m in warned)
    # Used all the same, and left as they were.
    assert stat.S_IMODE(os.stat(main).st_mode) == 0o620
