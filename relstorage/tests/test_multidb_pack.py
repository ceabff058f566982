"""Packing the databases of a ZODB multi-database: no pack removes an
object that another database refers to (see storage.pack.multidb)."""
import io
import json
import logging
import subprocess
import sys
import threading
import time

import pytest
import transaction
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB.FileStorage import FileStorage
from ZODB.POSException import POSKeyError
from ZODB.POSException import Unsupported
from ZODB.serialize import referencesf
from ZODB.utils import oid_repr
from ZODB.utils import p64

from relstorage import zodbcheck
from relstorage import zodbpack
from relstorage.storage.pack import multidb as multipack
from relstorage.storage.pack import prepackio
from relstorage.storage.pack import workers as refworkers
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn
from relstorage.tests.test_zodbpack import run

#: The second database of each test lives where the fixtures keep the
#: copy target of zodbconvert's tests.
CATALOG = 'dst'


def storage_section(factory, which, options=''):
    if factory.db == 'sqlite':
        adapter = '<sqlite3>\n data-dir %s\n</sqlite3>' % factory.data_dir(
            which)
    elif factory.db == 'postgresql':
        adapter = '<postgresql>\n dsn %s\n</postgresql>' % pg_dsn(
            factory.keep_history, which)
    else:
        adapter = ('<mysql>\n host %(host)s\n port %(port)s\n user %(user)s'
                   '\n passwd %(passwd)s\n db %(db)s\n</mysql>'
                   % mysql_params(factory.keep_history, which))
    return '<relstorage>\n keep-history %s\n%s%s\n</relstorage>' % (
        'true' if factory.keep_history else 'false', options, adapter)


def zope_conf(tmp_path, factory, main=None, options='', first='main'):
    """A Zope zope.conf mounting the catalog database at /catalog (its
    storages' sections with *options*), the database *first* first (the
    one zodbpack packs first)."""
    path = tmp_path / 'zope.conf'
    sections = [
        '<zodb_db main>\n%s\n mount-point /\n cache-size 5000\n</zodb_db>\n'
        % (main or storage_section(factory, 'main', options)),
        '<zodb_db catalog>\n%s\n mount-point /catalog\n</zodb_db>\n'
        % storage_section(factory, CATALOG, options)]
    if first != 'main':
        sections.reverse()
    path.write_text(
        '%%define INSTANCE %s\ninstancehome $INSTANCE\n%%import relstorage\n'
        '%s' % (tmp_path, ''.join(sections)))
    return str(path)


def zodb_conf(tmp_path, factory):
    path = tmp_path / 'zodb.conf'
    path.write_text(
        '%%import relstorage\n<zodb main>\n%s\n</zodb>\n'
        '<zodb>\n database-name catalog\n%s\n</zodb>\n'
        % (storage_section(factory, 'main'),
           storage_section(factory, CATALOG)))
    return str(path)


@pytest.fixture
def pair(factory):
    """The factory, with its second database emptied too."""
    factory.storage(CATALOG, zap=True).close()
    return factory


def open_databases(factory, main_storage=None):
    databases = {}
    if main_storage is None:  # (an empty storage is false)
        main_storage = factory.storage('main')
    ZODB.DB(main_storage, databases=databases, database_name='main')
    ZODB.DB(factory.storage(CATALOG), databases=databases,
            database_name='catalog')
    return databases


def close_databases(databases):
    for db in list(databases.values()):
        db.close()


def oid_of(obj):
    return obj._p_oid


def populate(databases, filler=0):
    """Objects of each database that only the other refers to, and
    garbage in each, a cycle across the two included, after *filler*
    other objects in each. Returns ``{database name: {what: oid}}``."""
    with databases['main'].transaction() as conn:
        root = conn.root()
        catalog = conn.get_connection('catalog')
        root['filler'] = [PersistentMapping() for _ in range(filler)]
        catalog.root()['filler'] = [PersistentMapping()
                                    for _ in range(filler)]
        # Only main refers to 'kept' (in catalog); only 'kept' refers to
        # 'deep' (in main); only 'deep' to 'deeper' (in catalog).
        kept = PersistentMapping(name='kept')
        catalog.add(kept)
        deep = PersistentMapping(name='deep')
        conn.add(deep)
        deeper = PersistentMapping(name='deeper')
        catalog.add(deeper)
        kept['deep'] = deep
        deep['deeper'] = deeper
        root['far'] = kept
        # Garbage to be: one object in each, and a cycle across them.
        root['gone'] = PersistentMapping()
        catalog.root()['gone'] = PersistentMapping()
        x = PersistentMapping(name='x')
        y = PersistentMapping(name='y')
        conn.add(x)
        catalog.add(y)
        x['y'] = y
        y['x'] = x
        root['x'] = x
    with databases['main'].transaction() as conn:
        root = conn.root()
        croot = conn.get_connection('catalog').root()
        oids = {'main': {'deep': oid_of(root['far']['deep']),
                         'gone': oid_of(root['gone']),
                         'x': oid_of(root['x'])},
                'catalog': {'kept': oid_of(root['far']),
                            'deeper': oid_of(root['far']['deep']['deeper']),
                            'gone': oid_of(croot['gone']),
                            'y': oid_of(root['x']['y'])}}
        del root['gone']
        del root['x']
        del croot['gone']
    # The pack time must follow the last commit.
    time.sleep(0.01)
    return oids


def assert_reachable(databases):
    with databases['main'].transaction() as conn:
        kept = conn.root()['far']
        assert kept['name'] == 'kept'
        assert kept._p_jar is conn.get_connection('catalog')
        assert kept['deep']['name'] == 'deep'
        assert kept['deep']['deeper']['name'] == 'deeper'


def present(databases, oids, name):
    """Which of the objects *oids* names in database *name* are still
    there."""
    storage = databases[name].storage
    found = set()
    for what, oid in oids[name].items():
        try:
            storage.load(oid)
        except POSKeyError:
            continue
        found.add(what)
    return found


def check_packed(factory, oids, packed=('main', 'catalog')):
    """Everything reachable loads; the garbage of the databases *packed*
    is gone (the cycle across them only when both were)."""
    databases = open_databases(factory)
    try:
        assert_reachable(databases)
        both = set(packed) == {'main', 'catalog'}
        expected = {
            'main': {'deep'} | ({'gone', 'x'} if 'main' not in packed
                                else set() if both else {'x'}),
            'catalog': {'kept', 'deeper'} | (
                {'gone', 'y'} if 'catalog' not in packed
                else set() if both else {'y'})}
        for name in ('main', 'catalog'):
            assert present(databases, oids, name) == expected[name], name
    finally:
        close_databases(databases)


def make(factory):
    databases = open_databases(factory)
    try:
        return populate(databases)
    finally:
        close_databases(databases)


def test_zodbpack_of_a_zope_conf_packs_the_databases_together(
        pair, tmp_path):
    oids = make(pair)
    out = run('-d', '0', zope_conf(tmp_path, pair))
    assert out.returncode == 0, out.stderr
    assert 'main (' in out.stdout and 'catalog (' in out.stdout
    check_packed(pair, oids)


def test_zodbpack_of_a_zodb_config(pair, tmp_path):
    oids = make(pair)
    out = run('-d', '0', zodb_conf(tmp_path, pair))
    assert out.returncode == 0, out.stderr
    check_packed(pair, oids)


@pytest.fixture(params=[True, False], ids=['HP', 'HF'])
def sqlite_pair(request):
    """Two SQLite databases, in each history mode."""
    factory = DatabaseFactory('sqlite', request.param)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.mark.parametrize('name', ['catalog', 'main'])
def test_zodbpack_of_one_database_keeps_what_the_other_refers_to(
        sqlite_pair, tmp_path, name):
    oids = make(sqlite_pair)
    out = run('-d', '0', '--database', name, zope_conf(tmp_path,
                                                       sqlite_pair))
    assert out.returncode == 0, out.stderr
    assert ('%s (' % name) in out.stdout
    assert ('%s (' % ({'main', 'catalog'} - {name}).pop()) \
        not in out.stdout
    # The other database is read, not packed: its cycle half keeps this
    # one's alive, and its garbage stays.
    check_packed(sqlite_pair, oids, packed=(name,))


def test_db_pack_of_one_database_of_a_multi_database(sqlite_pair):
    # Zope's "Pack" button: DB.pack of the mounted database.
    oids = make(sqlite_pair)
    databases = open_databases(sqlite_pair)
    try:
        databases['catalog'].pack(time.time())
    finally:
        close_databases(databases)
    check_packed(sqlite_pair, oids, packed=('catalog',))
    # Alone, the same pack would have removed what main refers to: the
    # test above is one of the multi-database.
    pack_the_catalog_alone(sqlite_pair, oids)


def pack_the_catalog_alone(factory, oids):
    """Pack the catalog on its own, not knowing main: what only main
    refers to goes."""
    storage = factory.storage(CATALOG)
    try:
        storage.pack(time.time(), referencesf)
        with pytest.raises(POSKeyError):
            storage.load(oids['catalog']['kept'])
    finally:
        storage.close()


def test_a_mapping_storage_among_the_databases(sqlite_pair):
    # An in-memory database lists its transactions but not its current
    # records: DB.pack of ours reads what its revisions refer to, and
    # keeps it; the garbage of ours still goes.
    from ZODB.MappingStorage import MappingStorage
    databases = {}
    ours = ZODB.DB(sqlite_pair.storage('main'), databases=databases,
                   database_name='main')
    ZODB.DB(MappingStorage(), databases=databases, database_name='memory')
    try:
        with ours.transaction() as conn:
            held = PersistentMapping(name='held')
            garbage = PersistentMapping(name='garbage')
            conn.add(held)
            conn.add(garbage)
            conn.get_connection('memory').root()['held'] = held
        held_oid, garbage_oid = held._p_oid, garbage._p_oid
        time.sleep(0.01)
        ours.pack(time.time())
        storage = ours.storage
        assert storage.load(held_oid)  # only the memory database had it
        with pytest.raises(POSKeyError):
            storage.load(garbage_oid)
    finally:
        close_databases(databases)


def test_a_filestorage_among_the_databases(sqlite_pair, tmp_path):
    # main in a FileStorage: its references to the catalog are read from
    # its records, and since the catalog refers to main's objects, main
    # is packed without garbage collection.
    fs_path = str(tmp_path / 'Data.fs')
    databases = open_databases(sqlite_pair, FileStorage(fs_path))
    try:
        oids = populate(databases)
    finally:
        close_databases(databases)
    main = '<filestorage>\n path %s\n</filestorage>' % fs_path
    out = run('-d', '0', zope_conf(tmp_path, sqlite_pair, main))
    assert out.returncode == 0, out.stderr
    databases = open_databases(sqlite_pair, FileStorage(fs_path))
    try:
        assert_reachable(databases)
        # (main's records are all taken as alive: x keeps y.)
        assert present(databases, oids, 'catalog') == {'kept', 'deeper',
                                                       'y'}
        assert present(databases, oids, 'main') == {'deep', 'gone', 'x'}
    finally:
        close_databases(databases)


def test_prepack_then_use_prepack_state_together(sqlite_pair, tmp_path):
    oids = make(sqlite_pair)
    config = zope_conf(tmp_path, sqlite_pair)
    out = run('-d', '0', '--prepack', config)
    assert out.returncode == 0, out.stderr
    out = run('--use-prepack-state', config)
    assert out.returncode == 0, out.stderr
    check_packed(sqlite_pair, oids)


@pytest.mark.parametrize('options,says', [
    ('', 'with 2 worker processes'),
    (' pack-graph-mb 0\n', 'its graph followed in the database')],
    ids=['workers', 'graph-in-database'])
def test_the_references_read_by_workers_or_followed_in_the_database(
        sqlite_pair, tmp_path, monkeypatch, options, says):
    # Pages of 20 states, workers from the first: the cross-database
    # references come back from worker processes; or the graph is
    # followed in the database's scratch tables.
    monkeypatch.setattr(prepackio, 'PAGE', 20)
    monkeypatch.setattr(refworkers, 'START_AFTER', 1)
    databases = open_databases(sqlite_pair)
    try:
        oids = populate(databases, filler=100)
    finally:
        close_databases(databases)
    out = io.StringIO()
    status = zodbpack.main(['-v', '-d', '0', '--workers', '2',
                            zope_conf(tmp_path, sqlite_pair,
                                      options=options)], out=out)
    assert status == 0
    assert out.getvalue().count(says) == 2, out.getvalue()
    check_packed(sqlite_pair, oids)


def test_a_reference_moved_across_databases_while_packing(
        sqlite_pair, monkeypatch):
    # Between the pre-pack of main and that of the catalog, a transaction
    # moves the only reference to a catalog object from the catalog into
    # main: neither pre-pack sees it referred to; the catalog's batches
    # read main's newer commits and keep it.
    databases = open_databases(sqlite_pair)
    try:
        with databases['main'].transaction() as conn:
            moved = PersistentMapping(name='moved')
            conn.get_connection('catalog').root()['r'] = moved
        time.sleep(0.01)
        start = multipack._Together.start

        def start_then_move(together, name, pack):
            if name == 'catalog':
                with databases['main'].transaction() as conn:
                    croot = conn.get_connection('catalog').root()
                    conn.root()['s'] = croot.pop('r')
            return start(together, name, pack)
        monkeypatch.setattr(multipack._Together, 'start', start_then_move)
        storages = {name: db.storage for name, db in databases.items()}
        results = multipack.pack_databases(storages, time.time(),
                                           referencesf)
        assert results['catalog']['objects_removed'] == 0
        with databases['main'].transaction() as conn:
            assert conn.root()['s']['name'] == 'moved'
    finally:
        close_databases(databases)


def test_two_databases_of_one_name_are_refused(sqlite_pair, tmp_path):
    path = tmp_path / 'zodb.conf'
    path.write_text('%%import relstorage\n<zodb>\n%s\n</zodb>\n'
                    '<zodb>\n%s\n</zodb>\n'
                    % (storage_section(sqlite_pair, 'main'),
                       storage_section(sqlite_pair, CATALOG)))
    out = run('-d', '0', str(path))
    assert out.returncode == 2
    assert "more than one database named ''" in out.stderr, out.stderr


def test_another_references_reader_is_refused(sqlite_pair):
    # A reader other than ZODB's may leave out what the pack must see.
    oids = make(sqlite_pair)
    databases = open_databases(sqlite_pair)
    try:
        storages = {name: db.storage for name, db in databases.items()}
        with pytest.raises(Unsupported, match='referencesf'):
            multipack.pack_databases(storages, time.time(),
                                     lambda data, oids=None:
                                     referencesf(data, oids))
    finally:
        close_databases(databases)
    check_packed(sqlite_pair, oids, packed=())


class StalledFinish:
    """A resource manager of a transaction, sorted right after the
    connection *after*: its tpc_finish calls *stall*, which returns when
    the transaction may go on; until then it has finished in the
    databases sorted before only."""

    def __init__(self, after, stall):
        self.key = after.sortKey() + '\0'  # right after, before the next
        self.stall = stall

    def sortKey(self):
        return self.key

    def tpc_finish(self, transaction):
        self.stall()

    def abort(self, transaction):
        pass

    tpc_begin = commit = tpc_vote = tpc_abort = abort


def finishing_order(conn):
    """``(home, other)``: the databases in the order a commit through the
    ZODB connection *conn* finishes them; objects move from the first
    into the second."""
    return tuple(sorted(('main', 'catalog'), key=lambda name:
                        conn.get_connection(name).sortKey()))


def add_x(db):
    """Add the object 'x' to the root of the database a commit finishes
    first; return its oid and ``(home, other)``."""
    with db.transaction() as conn:
        home, other = finishing_order(conn)
        x = conn.get_connection(home).root()['x'] = PersistentMapping(
            name='x')
    return x._p_oid, (home, other)


def move_x(conn, stall, manager=transaction.manager):
    """Move 'x' (see add_x) into the other database's root, as 'ref', in
    one transaction whose finish calls *stall* between the two
    databases'."""
    home, other = finishing_order(conn)
    conn.get_connection(other).root()['ref'] = \
        conn.get_connection(home).root().pop('x')
    manager.get().join(StalledFinish(conn.get_connection(home), stall))
    manager.commit()


class Seen(logging.Handler):
    """Sets *event* when a record whose message holds *text* is logged."""

    def __init__(self, text, event):
        super().__init__(logging.INFO)
        self.text = text
        self.event = event

    def emit(self, record):
        if self.text in record.getMessage():
            self.event.set()


def test_a_pack_waits_for_a_move_across_databases_half_finished(
        pair, tmp_path):
    # A transaction moves the only reference to an object from the
    # database it lives in to the other one; it has voted in both and
    # finished in the first when the pack of both runs. Seen from the
    # pack, nothing refers to the object any more: the new reference is
    # not visible yet. The pack waits for that commit to end.
    databases = open_databases(pair)
    try:
        # The object lives where the transaction finishes first (packed
        # first: on SQLite, the other's batches wait for that commit's
        # writer whatever the pack knows).
        _, (home, other) = add_x(databases['main'])
        manager = transaction.TransactionManager()
        conn = databases['main'].open(manager)
        reached = threading.Event()
        go = threading.Event()

        def stall():
            reached.set()
            assert go.wait(60), 'never let go'
        moved = []

        def move():
            try:
                move_x(conn, stall, manager)
                moved.append(True)
            finally:
                conn.close()
        mover = threading.Thread(target=move)
        mover.start()
        assert reached.wait(60)
        time.sleep(0.01)  # the pack time follows that first finish
        waits = threading.Event()
        seen = Seen('has voted in database %r' % other, waits)
        logger = logging.getLogger('relstorage.storage.pack.multidb')
        logger.addHandler(seen)
        level = logger.level
        logger.setLevel(logging.INFO)
        status = []
        out = io.StringIO()

        def pack():
            try:
                status.append(zodbpack.main(
                    ['-v', '-d', '0', zope_conf(tmp_path, pair, first=home)],
                    out=out))
            finally:
                waits.set()  # ended without waiting
        packer = threading.Thread(target=pack)
        try:
            packer.start()
            assert waits.wait(120)
        finally:
            go.set()
            mover.join(60)
            packer.join(120)
            logger.removeHandler(seen)
            logger.setLevel(level)
        assert moved and status == [0]
        assert 'spent waiting for commits voted in other databases' in \
            out.getvalue(), out.getvalue()
    finally:
        close_databases(databases)
    # Read afresh (no cache of the connections above has it).
    databases = open_databases(pair)
    try:
        with databases['main'].transaction() as conn:
            assert conn.get_connection(other).root()['ref']['name'] == 'x'
    finally:
        close_databases(databases)


def test_the_checks_report_a_reference_to_an_object_missing_elsewhere(
        pair, tmp_path):
    # A pack of the catalog alone, not knowing main, removed the object
    # only main refers to: zodbcheck and zodbpack --check-refs-only of the
    # multi-database name it, main's object that refers to it, and the
    # database where it is missing.
    oids = make(pair)
    pack_the_catalog_alone(pair, oids)
    config = zope_conf(tmp_path, pair)
    missing = oid_repr(oids['catalog']['kept'])
    out = io.StringIO()
    assert zodbcheck.main([config], out=out, err=io.StringIO()) == \
        zodbcheck.EXIT_BROKEN
    assert ("dangling reference to another database: 0x00 "
            "(persistent.mapping.PersistentMapping) refers to %s of "
            "database 'catalog', which does not exist there" % missing
            in out.getvalue()), out.getvalue()
    # (deep refers to deeper, x to y: gone too.)
    assert 'BROKEN: 3 references to missing objects of other databases' \
        in out.getvalue()
    out = io.StringIO()
    assert zodbcheck.main(['--json', config], out=out,
                          err=io.StringIO()) == zodbcheck.EXIT_BROKEN
    report = {r['name']: r for r in json.loads(out.getvalue())['storages']}
    assert report['main']['dangling_elsewhere'][0] == {
        'oid': '0x00', 'class': 'persistent.mapping.PersistentMapping',
        'database': 'catalog', 'missing': missing}
    assert report['main']['dangling_elsewhere_count'] == 3
    assert report['catalog']['dangling_elsewhere'] == []
    out = run('--check-refs-only', config)
    assert out.returncode == zodbpack.EXIT_DANGLING, out.stderr
    assert ("dangling: 0x00 -> %s of database 'catalog' (missing there)"
            % missing) in out.stdout, out.stdout


def test_the_checks_find_nothing_wrong_across_intact_databases(
        sqlite_pair, tmp_path):
    make(sqlite_pair)
    config = zope_conf(tmp_path, sqlite_pair)
    out = io.StringIO()
    assert zodbcheck.main([config], out=out, err=io.StringIO()) == 0
    assert out.getvalue().count('no problems found') == 2, out.getvalue()
    out = run('--check-refs-only', config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert '0 dangling references (0 to other databases)' in out.stdout


#: A process that moves the object 'x' (see move_x) and stalls between
#: the two finishes, until it is killed.
MOVER = """
import sys
import ZODB.config
from relstorage.tests.test_multidb_pack import move_x

move_x(ZODB.config.databaseFromURL(sys.argv[1]).open(),
       lambda: print('stalled', flush=True) or sys.stdin.read())
"""


def test_a_process_dead_between_its_finishes_holds_no_pack_back(
        pair, tmp_path):
    # The claim of a vote ends with its process: the pack does not wait
    # for a commit that will never finish, and the object, which only
    # the finished half of it refers to no more, is garbage.
    databases = open_databases(pair)
    try:
        oid, (home, other) = add_x(databases['main'])
    finally:
        close_databases(databases)
    mover = subprocess.Popen(
        [sys.executable, '-c', MOVER, zodb_conf(tmp_path, pair)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=child_env())
    try:
        assert mover.stdout.readline() == 'stalled\n'
    finally:
        mover.kill()
        mover.wait(60)
    time.sleep(0.01)  # the pack time follows its first finish
    status = []
    packer = threading.Thread(target=lambda: status.append(zodbpack.main(
        ['-d', '0', zope_conf(tmp_path, pair, first=home)],
        out=io.StringIO())))
    packer.start()
    packer.join(300)
    assert status == [0]
    databases = open_databases(pair)
    try:
        with databases['main'].transaction() as conn:
            assert 'ref' not in conn.get_connection(other).root()
            assert 'x' not in conn.get_connection(home).root()
        with pytest.raises(POSKeyError):
            databases[home].storage.load(oid)
    finally:
        close_databases(databases)


def test_a_vote_referring_elsewhere_is_seen_until_its_commit_ends(factory):
    # What the pack of another database asks: seen from another
    # connection, the claim of a voted commit whose states refer to
    # another database lasts until that commit finishes or aborts.
    from ZODB.Connection import TransactionMetaData
    databases = {}
    db = ZODB.DB(factory.storage(), databases=databases,
                 database_name='main')
    ZODB.DB(None, databases=databases, database_name='catalog')
    try:
        with db.transaction() as conn:
            far = PersistentMapping()
            conn.get_connection('catalog').add(far)
            conn.root()['far'] = far  # the root refers elsewhere
            near = conn.root()['near'] = PersistentMapping()
        writer = db.storage.new_instance()
        watch = db.storage.adapter.open_vote_watch()
        try:
            assert watch.pending() is False
            # Only where a claim is taken does a vote look for references
            # to other databases (SQLite's writer is claim enough).
            store = db.storage.adapter.open_store_session()
            assert store.claims_other_databases is (factory.db != 'sqlite')
            store.close()
            for oid, claims, end in ((p64(0), True, writer.tpc_finish),
                                     (near._p_oid, False, writer.tpc_finish),
                                     (p64(0), True, writer.tpc_abort)):
                writer.poll_invalidations()  # see the last commit
                meta = TransactionMetaData()
                writer.tpc_begin(meta)
                state, serial = writer.load(oid)
                writer.store(oid, serial, state, '', meta)
                writer.tpc_vote(meta)
                # (SQLite's writer is claim enough: any vote is seen.)
                assert watch.pending() is (claims or factory.db == 'sqlite')
                end(meta)
                assert watch.pending() is False
        finally:
            watch.close()
            writer.release()
    finally:
        close_databases(databases)
