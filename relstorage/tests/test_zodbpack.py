"""``zodbpack`` end to end: a config file of storage sections, run as a
command, on every database (and a FileStorage beside them)."""
import os
import subprocess
import sys
import time

import pytest
import ZODB
import ZODB.config
from ZODB.FileStorage import FileStorage
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.TimeStamp import TimeStamp
from ZODB.utils import p64

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn


def adapter_section(factory):
    if factory.db == 'sqlite':
        return '<sqlite3>\n data-dir %s\n</sqlite3>' % factory.data_dir()
    if factory.db == 'postgresql':
        return '<postgresql>\n dsn %s\n</postgresql>' % pg_dsn(
            factory.keep_history)
    p = mysql_params(factory.keep_history)
    return ('<mysql>\n host %(host)s\n port %(port)s\n user %(user)s\n'
            ' passwd %(passwd)s\n db %(db)s\n</mysql>' % p)


def write_config(tmp_path, factory, extra=''):
    path = tmp_path / 'pack.conf'
    path.write_text(
        '%%import relstorage\n<relstorage main>\n keep-history %s\n%s\n'
        '</relstorage>\n%s' % ('true' if factory.keep_history else 'false',
                               adapter_section(factory), extra))
    return str(path)


def run(*args, verbose=True):
    env = child_env()
    return subprocess.run([sys.executable, '-m', 'relstorage.zodbpack']
                          + (['-v'] if verbose else []) + list(args),
                          capture_output=True, text=True, env=env,
                          timeout=300)


def make_garbage(db):
    with db.transaction() as conn:
        conn.root()['a'] = PersistentMapping(n=1)
        conn.root()['b'] = PersistentMapping(n=1)
    with db.transaction() as conn:
        conn.root()['a']['n'] = 2
        del conn.root()['b']


def test_zodbpack_packs_every_section(factory, tmp_path):
    db = ZODB.DB(factory.storage())
    make_garbage(db)
    db.close()
    fs_path = tmp_path / 'Data.fs'
    fsdb = ZODB.DB(FileStorage(str(fs_path)))
    make_garbage(fsdb)
    fsdb.close()
    config = write_config(tmp_path, factory,
                          '<filestorage other>\n path %s\n</filestorage>\n'
                          % fs_path)
    time.sleep(0.01)
    out = run('-d', '0', config)
    assert out.returncode == 0, out.stderr
    assert 'main (' in out.stdout and 'other (' in out.stdout
    assert ', 1 object;' in out.stdout, out.stdout  # the unlinked mapping
    if factory.keep_history:
        assert 'revisions' in out.stdout and 'transactions' in out.stdout
    assert os.path.exists(str(fs_path) + '.old')  # FileStorage packed too
    storage = factory.storage()
    assert len(storage) == 2  # root and 'a'
    storage.close()


@pytest.mark.parametrize('graph_mb', ['', ' pack-graph-mb 0\n'],
                         ids=['default', 'graph-in-database'])
def test_zodbpack_says_where_the_graph_was_followed(tmp_path, graph_mb):
    factory = DatabaseFactory('sqlite', True)
    try:
        db = ZODB.DB(factory.storage())
        make_garbage(db)
        db.close()
        config = write_config(tmp_path, factory)
        with open(config) as f:
            text = f.read()
        with open(config, 'w') as f:
            f.write(text.replace(' keep-history', graph_mb + ' keep-history'))
        time.sleep(0.01)
        out = run('-d', '0', config)
        time.sleep(0.01)
        again = run('-d', '0', config)
    finally:
        factory.cleanup()
    assert out.returncode == 0, out.stderr
    # Counts in the number they take: one object, one batch.
    assert ', 1 object;' in out.stdout, out.stdout
    assert 'then 1 batch;' in out.stdout, out.stdout
    said = 'its graph followed in the database' in out.stdout
    assert said == bool(graph_mb), out.stdout
    # The second pack reads no state again: the first kept what they
    # refer to.
    assert again.returncode == 0, again.stderr
    assert ', 0 states unpickled, 2 taken as the last pack kept them' \
        in again.stdout, again.stdout


def test_zodbpack_prepack_then_use_prepack_state(factory, tmp_path):
    db = ZODB.DB(factory.storage())
    make_garbage(db)
    db.close()
    config = write_config(tmp_path, factory)
    time.sleep(0.01)
    out = run('-d', '0', '--prepack', config)
    assert out.returncode == 0, out.stderr
    assert '1 unreachable object found' in out.stdout, out.stdout
    storage = factory.storage()
    assert len(storage) == 3  # nothing removed yet
    storage.close()
    out = run('--use-prepack-state', config)
    assert out.returncode == 0, out.stderr
    assert 'removed' in out.stdout and ', 1 object;' in out.stdout, \
        out.stdout
    storage = factory.storage()
    assert len(storage) == 2
    storage.close()
    # Used up: a second run says to pre-pack first.
    out = run('--use-prepack-state', config)
    assert out.returncode == 1
    assert 'run a pre-pack first' in out.stderr


def test_zodbpack_prepack_refuses_filestorage(tmp_path):
    fs_path = tmp_path / 'Data.fs'
    FileStorage(str(fs_path)).close()
    path = tmp_path / 'fs.conf'
    path.write_text('<filestorage fs>\n path %s\n</filestorage>\n' % fs_path)
    out = run('--prepack', str(path))
    assert out.returncode == 1
    assert 'apply to RelStorage only' in out.stderr


def test_zodbpack_check_refs_only_reports_dangling(factory, tmp_path):
    storage = factory.storage()
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        conn.root()['a'] = PersistentMapping()
    with db.transaction() as conn:
        a = conn.root()['a']
        a._p_activate()
        oid, serial = a._p_oid, a._p_serial
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(oid, serial, t)  # the root still refers to it
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    db.close()
    out = run('--check-refs-only', write_config(tmp_path, factory))
    assert out.returncode == 3, out.stderr
    assert 'dangling: 0x00 -> 0x01' in out.stdout
    assert '1 dangling reference\n' in out.stdout


def test_second_pack_says_so_and_fails(factory, tmp_path):
    storage = factory.storage()
    db = ZODB.DB(storage)
    make_garbage(db)
    adapter = storage._adapter
    holder = adapter.connect(for_store=True)
    try:
        assert adapter.locker.try_pack_lock(holder)
        out = run(write_config(tmp_path, factory))
        assert out.returncode == 1
        assert 'another pack of the' in out.stderr
        assert 'is running' in out.stderr
    finally:
        holder.close()
        db.close()
    assert run(write_config(tmp_path, factory)).returncode == 0


@pytest.mark.parametrize('args, message', [
    (['--prepack', '--use-prepack-state'], 'exclude each other'),
    (['--check-refs-only', '--prepack'], 'packs nothing'),
    ([], 'No such file'),
])
def test_usage_errors(tmp_path, args, message):
    out = run(*(args + [str(tmp_path / 'missing.conf')]))
    assert out.returncode == 2
    assert message in out.stderr


def test_bad_config_names_the_problem(tmp_path):
    path = tmp_path / 'bad.conf'
    path.write_text('%import relstorage\n<relstorage>\n keep-history maybe\n'
                    '</relstorage>\n')
    out = run(str(path))
    assert out.returncode == 2
    assert 'keep-history' in out.stderr


def tid_at(when):
    """The transaction id of Unix time *when*."""
    return TimeStamp(*time.gmtime(when)[:5] + (when % 60,)).raw()


def commit_at(storage, when, records):
    """Commit ``{oid: MinPO value}`` as a transaction made at *when*."""
    tid = tid_at(when)
    meta = TransactionMetaData()
    storage.tpc_begin(meta, tid)
    for oid, value in records.items():
        storage.restore(p64(oid), tid, zodb_pickle(MinPO(value)), '', None,
                        meta)
    storage.tpc_vote(meta)
    storage.tpc_finish(meta)
    return tid


@pytest.mark.parametrize('args, keeps_a_day', [
    ([], True), (['-d', '1'], True), (['-d', '0'], False),
    (['-d', '-1'], False), (['--days=-3'], False)],
    ids=['default', 'one', 'zero', 'minus-one', 'minus-three'])
def test_zodbpack_keeps_a_day_by_default(factory, tmp_path, args,
                                         keeps_a_day):
    """RelStorage 4's zodbpack keeps a day of history unless told
    otherwise, and reads a negative number of days as "pack to now": a
    cron line carried over from it keeps meaning what it meant."""
    now = time.time()
    storage = factory.storage()
    try:
        root = [commit_at(storage, now - days * 86400, {0: n})
                for n, days in enumerate((3, 2, 2 / 24.))]
        # Written an hour ago and referred to by nothing.
        young_garbage = commit_at(storage, now - 3600, {1: 'young'})
        root.append(commit_at(storage, now - 1800, {0: 3}))
    finally:
        storage.close()
    out = run(*(args + [write_config(tmp_path, factory)]))
    assert out.returncode == 0, out.stderr
    storage = factory.storage()
    try:
        def revisions(oid, tids):
            kept = []
            for tid in tids:
                try:
                    storage.loadSerial(p64(oid), tid)
                except POSKeyError:
                    continue
                kept.append(tids.index(tid))
            return kept

        # The garbage of the last day is garbage only after that day.
        assert revisions(1, [young_garbage]) == ([0] if keeps_a_day
                                                 else [])
        if factory.keep_history:
            # Kept: what was current a day ago and everything since, so
            # the last day's transactions can still be undone.
            assert revisions(0, root) == ([1, 2, 3] if keeps_a_day
                                          else [3])
            undoable = {entry['id'] for entry in storage.undoLog(0, 10)}
            assert (root[2] in undoable) == keeps_a_day
            assert (root[3] in undoable) == keeps_a_day
        else:
            assert revisions(0, root) == [3]
    finally:
        storage.close()


def test_zodbpack_help_says_the_default():
    out = subprocess.run([sys.executable, '-m', 'relstorage.zodbpack',
                          '--help'], capture_output=True, text=True,
                         env=child_env(), timeout=60)
    assert out.returncode == 0
    text = ' '.join(out.stdout.split())
    assert 'default 1' in text and '-d -1' in text, text


def test_the_cron_line_after_a_pack_to_now(factory, tmp_path):
    """A pack to now by hand, then the nightly cron line keeping a day:
    nothing is left to pack there, which is said, not a failure (as
    RelStorage 4 found nothing to pack)."""
    db = ZODB.DB(factory.storage())
    make_garbage(db)
    db.close()
    config = write_config(tmp_path, factory)
    time.sleep(0.01)
    out = run('-d', '0', config)
    assert out.returncode == 0, out.stderr
    out = run(config)
    assert out.returncode == 0, out.stderr
    if factory.keep_history:
        # (Without history, the pack simply finds nothing to remove.)
        assert 'nothing to pack' in out.stdout
        assert 'an earlier pack already went to' in out.stdout
    else:
        assert ' 0 objects' in out.stdout, out.stdout


def test_quiet_on_success_summary_with_v(factory, tmp_path):
    """For cron: nothing at all on a successful pack, or on one that finds
    nothing to pack (a time before the last pack); -v prints the summary
    (and the storage's log lines)."""
    db = ZODB.DB(factory.storage())
    make_garbage(db)
    db.close()
    config = write_config(tmp_path, factory)
    time.sleep(0.01)
    out = run('-d', '0', config, verbose=False)
    assert (out.returncode, out.stdout, out.stderr) == (0, '', '')
    storage = factory.storage()
    assert len(storage) == 2  # packed all the same
    storage.close()
    # A day back, before the pack just made: nothing to do, not an error.
    out = run(config, verbose=False)
    assert (out.returncode, out.stdout, out.stderr) == (0, '', '')
    db = ZODB.DB(factory.storage())
    make_garbage(db)
    db.close()
    time.sleep(0.01)
    out = run('-d', '0', config)
    assert out.returncode == 0, out.stderr
    assert 'main (' in out.stdout and 'packed to' in out.stdout
    assert 'INFO' in out.stderr


def test_a_failure_is_said_without_v(tmp_path):
    path = tmp_path / 'missing.conf'
    path.write_text('%%import relstorage\n<relstorage main>\n create-schema '
                    'false\n <sqlite3>\n  data-dir %s\n </sqlite3>\n'
                    '</relstorage>\n' % tmp_path)
    out = run(str(path), verbose=False)
    assert out.returncode == 1
    assert out.stdout == ''
    assert out.stderr.startswith('zodbpack: main: '), out.stderr
