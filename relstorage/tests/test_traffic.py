"""The round trips a storage counts, by kind of work (adapters.traffic,
``RelStorage.traffic()``, the ``relstorage_round_trips`` metric), are
those the network carries: a proxy between the storage and its server
counts the messages, and each step of a site's work (a commit, loads
through a cold cache, a poll, a pack) moves the storage's figures, of the
kind that step is, by what the proxy saw."""
import importlib
import time

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.serialize import referencesf

from relstorage.adapters import traffic
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.dbs import MYSQL_HOST
from relstorage.testing.dbs import MYSQL_PORT
from relstorage.testing.dbs import PG_HOST
from relstorage.testing.dbs import PG_PORT
from relstorage.testing.dbs import empty_database
from relstorage.testing.dbs import mysql_params
from relstorage.testing.dbs import pg_dsn
from relstorage.testing.dbs import require
from relstorage.testing.slow_proxy import SlowProxy

#: (database, driver, the module the driver imports)
DRIVERS = [('postgresql', 'psycopg2', 'psycopg2'),
           ('postgresql', 'psycopg', 'psycopg'),
           ('mysql', 'MySQLdb', 'MySQLdb'),
           ('mysql', 'PyMySQL', 'pymysql')]


def _adapter(database, driver, keep_history, port):
    """An adapter of the test database reaching its server through the
    proxy on *port*."""
    options = Options(keep_history=keep_history, cache_local_mb=0)
    if database == 'postgresql':
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        dsn = pg_dsn(keep_history).replace('port=%s' % PG_PORT,
                                           'port=%s' % port)
        dsn = dsn.replace('host=%s' % PG_HOST, 'host=127.0.0.1')
        assert 'port=%s' % port in dsn, dsn
        return PostgreSQLAdapter(dsn, driver=driver, options=options)
    from relstorage.adapters.mysql import MySQLAdapter
    params = mysql_params(keep_history, host='127.0.0.1', port=port)
    return MySQLAdapter(driver=driver, options=options, **params)


@pytest.fixture(params=DRIVERS, ids=[d for _, d, _ in DRIVERS])
def proxied(request):
    """``(storage, proxy)``: a history-keeping storage of the server's
    test database (emptied), every connection through a counting
    proxy."""
    database, driver, module = request.param
    require(database)
    pytest.importorskip(module)
    importlib.import_module(module)
    empty_database(database, True, 'main')
    address = ((PG_HOST, PG_PORT) if database == 'postgresql'
               else (MYSQL_HOST, MYSQL_PORT))
    with SlowProxy(*address) as proxy:
        storage = RelStorage(_adapter(database, driver, True, proxy.port))
        try:
            yield storage, proxy
        finally:
            storage.close()


class Step:
    """What the storage counted, and the proxy carried, during a step
    (*handshake*: the round trips of opening and closing a connection,
    which the storage does not count)."""

    def __init__(self, storage, proxy, handshake=0):
        self.storage, self.proxy = storage, proxy
        self.handshake = handshake

    def __enter__(self):
        self.counted = self.storage.traffic()
        self.carried, self.connected = self.proxy.counts()
        return self

    def __exit__(self, *exc_info):
        after = self.storage.traffic()
        carried, connected = self.proxy.counts()
        self.connected = connected - self.connected
        # The round trips of the storage's own statements.
        self.carried = (carried - self.carried
                        - self.handshake * self.connected)
        self.by_kind = {
            kind: after[kind]['round_trips'] - figures['round_trips']
            for kind, figures in self.counted.items()}
        self.statements = {
            kind: after[kind]['statements'] - figures['statements']
            for kind, figures in self.counted.items()}

    @property
    def kinds(self):
        """The kinds of work that sent anything."""
        return {kind for kind, trips in self.by_kind.items() if trips}


def test_round_trips_by_kind_are_what_the_network_carried(proxied):
    storage, proxy = proxied
    # What a connection costs beyond its statements: its handshake (and
    # TLS negotiation) and its end.
    with Step(storage, proxy) as bare:
        storage.adapter.open_connection(False).close()
    assert bare.connected == 1
    handshake = bare.carried - sum(bare.by_kind.values())
    assert handshake >= 1

    def step():
        return Step(storage, proxy, handshake)

    db = ZODB.DB(storage, pool_size=1, cache_size=0)
    try:
        # The database made ready, its root created: out of the way.
        with db.transaction() as conn:
            conn.root()['folder'] = PersistentMapping()
        conn = db.open()
        try:
            # A commit: the poll of its transaction's start, the vote's
            # work and the commit proper, each as its kind.
            with step() as commit:
                folder = conn.root()['folder']
                for i in range(20):
                    folder['item%d' % i] = PersistentMapping(title=i)
                transaction.commit()
            assert commit.by_kind['store'] >= 1
            assert commit.by_kind['commit'] >= 1
            assert sum(commit.by_kind.values()) == commit.carried
            # A commit sends several statements in one message.
            assert commit.statements['commit'] > commit.by_kind['commit']

            # Loads through cold caches (ZODB's, and the shared one, of
            # no size): only loads and polls.
            conn.cacheMinimize()
            with step() as loads:
                transaction.begin()
                folder = conn.root()['folder']
                assert sorted(folder['item%d' % i]['title']
                              for i in range(20)) == list(range(20))
            assert loads.kinds <= {'load', 'poll'}, loads.by_kind
            assert loads.by_kind['load'] >= 2
            assert sum(loads.by_kind.values()) == loads.carried

            # A poll alone (a new transaction, nothing loaded).
            transaction.abort()
            with step() as poll:
                transaction.begin()
            assert poll.kinds == {'poll'}, poll.by_kind
            assert poll.by_kind['poll'] == poll.carried
            transaction.abort()
        finally:
            conn.close()

        # A pack: the pack's work, with whatever else it asks (the
        # schema's state, oids) as other.
        with step() as pack:
            storage.pack(time.time() + 1, referencesf)
        assert pack.connected >= 1  # the pack's own sessions
        assert pack.by_kind['pack'] >= 3, pack.by_kind
        assert pack.kinds <= {'pack', 'other', 'load'}, pack.by_kind
        assert sum(pack.by_kind.values()) == pack.carried
    finally:
        db.close()
    # What the process counted includes this storage's, closed or not.
    process = traffic.process_totals()
    final = storage.traffic()
    for kind, figures in final.items():
        assert process[kind][0] >= figures['round_trips']


def test_prefetch_of_500_objects_takes_one_round_trip(factory):
    """``Connection.prefetch`` of 500 objects no cache holds reads them in
    one round trip (on SQLite: one statement), after which loading them
    all asks the database nothing."""
    db = ZODB.DB(factory.storage(cache_local_mb=10), cache_size=0)
    try:
        with db.transaction() as conn:
            folder = conn.root()['folder'] = PersistentMapping()
            for i in range(500):
                folder[i] = PersistentMapping(title=i)
        # Another storage of the database, its caches cold.
        other = ZODB.DB(factory.storage(cache_local_mb=10), cache_size=0)
        try:
            conn = other.open()
            folder = conn.root()['folder']
            items = [folder[i] for i in range(500)]  # ghosts
            storage = other.storage
            before = storage.traffic()['load']['round_trips']
            conn.prefetch(items)
            fetched = storage.traffic()['load']['round_trips']
            assert fetched - before == 1
            assert sorted(item['title'] for item in items) == list(range(500))
            assert storage.traffic()['load']['round_trips'] == fetched
            conn.close()
        finally:
            other.close()
    finally:
        db.close()


@pytest.mark.parametrize('explicit', [False, True])
def test_a_page_view_from_the_caches_costs_its_polls_alone(factory,
                                                           explicit):
    """A transaction served from ZODB's cache costs two round trips: the
    poll that begins its snapshot, and the end of the snapshot, which for
    a connection of implicit transactions goes with ZODB's poll as the
    transaction ends (so an idle connection holds no snapshot, and
    sees every commit)."""
    if factory.db == 'sqlite':
        pytest.skip('SQLite: statements in process, no round trips')
    db = ZODB.DB(factory.storage())
    try:
        with db.transaction() as conn:
            conn.root()['page'] = PersistentMapping(title='a page')
        tm = transaction.TransactionManager(explicit=explicit)
        conn = db.open(transaction_manager=tm)
        tm.begin()
        assert conn.root()['page']['title'] == 'a page'
        tm.abort()
        storage = conn._storage
        before = storage.traffic()
        for _ in range(5):
            tm.begin()
            assert conn.root()['page']['title'] == 'a page'
            tm.abort()
        after = storage.traffic()
        trips = {kind: after[kind]['round_trips'] - figures['round_trips']
                 for kind, figures in before.items()}
        assert sum(trips.values()) == 5 * 2, trips
        assert trips['poll'] == 5 * (1 if explicit else 2), trips
        conn.close()
    finally:
        db.close()
