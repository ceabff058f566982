"""Builds the ZODB conformance test classes for one database and mode.

ZODB ships its storage tests as mixins (``ZODB.tests``); each concrete class
here combines the ones that apply with a base that opens a RelStorage on a
real database. Methods named ``check*`` (the older spelling some mixins
still use) are exposed as ``test_check*`` so that both are collected.
Tests that cannot apply are replaced by a skip whose reason says why.
"""
import gc
import unittest

from ZODB.tests import BasicStorage
from ZODB.tests import ConflictResolution
from ZODB.tests import HistoryStorage
from ZODB.tests import IteratorStorage
from ZODB.tests import MTStorage
from ZODB.tests import PackableStorage
from ZODB.tests import PersistentStorage
from ZODB.tests import ReadOnlyStorage
from ZODB.tests import RecoveryStorage
from ZODB.tests import RevisionStorage
from ZODB.tests import Synchronization
from ZODB.tests import TransactionalUndoStorage
from ZODB.tests.StorageTestBase import StorageTestBase

from relstorage.testing.dbs import ALL_DATABASES
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import require
from relstorage.testing.dbs import POOLER_OPTIONS
from relstorage.testing.dbs import require_galera
from relstorage.testing.dbs import require_pair
from relstorage.testing.dbs import require_pooler
from relstorage.testing.private_servers import private_server

NO_HISTORY = 'needs earlier revisions, which a history-free storage drops'

HISTORY_PRESERVING_MIXINS = (
    BasicStorage.BasicStorage,
    TransactionalUndoStorage.TransactionalUndoStorage,
    RevisionStorage.RevisionStorage,
    Synchronization.SynchronizedStorage,
    ConflictResolution.ConflictResolvingStorage,
    ConflictResolution.ConflictResolvingTransUndoStorage,
    HistoryStorage.HistoryStorage,
    IteratorStorage.IteratorStorage,
    IteratorStorage.ExtendedIteratorStorage,
    PersistentStorage.PersistentStorage,
    MTStorage.MTStorage,
    ReadOnlyStorage.ReadOnlyStorage,
    PackableStorage.PackableStorageWithOptionalGC,
    PackableStorage.PackableUndoStorage,
)

HISTORY_FREE_MIXINS = (
    BasicStorage.BasicStorage,
    Synchronization.SynchronizedStorage,
    ConflictResolution.ConflictResolvingStorage,
    HistoryStorage.HistoryStorage,
    IteratorStorage.IteratorStorage,
    IteratorStorage.ExtendedIteratorStorage,
    PersistentStorage.PersistentStorage,
    MTStorage.MTStorage,
    ReadOnlyStorage.ReadOnlyStorage,
    PackableStorage.PackableStorageWithOptionalGC,
)

#: test name -> reason, for tests that cannot apply in either mode.
SKIP_ALWAYS = {
    # Backpointers (data_txn) are a FileStorage layout detail: undo stores
    # a full copy of the earlier state, so iteration reports None.
    'testTransactionalUndoIterator': (
        'expects FileStorage backpointers (data_txn) for undone records; '
        'undo here stores a full copy of the earlier state'),
}

#: Extra skips for history-free storages.
SKIP_HISTORY_FREE = {
    'testSimpleHistory': NO_HISTORY,
    'testSimpleIteration': NO_HISTORY,
    'testExtendedIteration': NO_HISTORY,
    'testUndoZombie': 'undo needs history',
    'testTransactionExtensionFromIterator':
        'transaction metadata is not kept without history',
    # These read old revisions with loadSerial before packing.
    'testPackAllRevisions': NO_HISTORY,
    'testPackAllRevisionsNoGC': NO_HISTORY,
    'testPackJustOldRevisions': NO_HISTORY,
    'testPackOnlyOneObject': NO_HISTORY,
}


class RelStorageTestBase(StorageTestBase):
    """Opens ``self._storage`` on an emptied database before each test."""

    database = None  # set by make_classes
    driver = None    # the adapter's driver option, when not its default
    #: Whether every load goes to a streaming replica (ro-replica-conf)
    #: of a private primary (replica_pairs).
    replicas = False
    #: The pool_mode of a private pgbouncer every connection goes
    #: through (in front of the private PostgreSQL server), or None.
    pooler = None
    #: On a private Galera cluster (galera_cluster): 'one node' writes
    #: and loads on node 1; 'two nodes' writes on node 1 and loads from
    #: node 2 (ro-replica-conf). None: not on a cluster.
    cluster = None
    keep_history = True
    use_extension_bytes = True

    #: Tests that run more clients at once than a server with its default
    #: max_connections admits (64 databases, each with connections of its
    #: own): on a private server of the run (private_servers), never on a
    #: reconfigured shared one.
    MANY_CLIENTS = frozenset([
        'test_race_external_invalidate_vs_disconnect',
        'test_race_load_vs_external_invalidate',
    ])

    #: ZODB's invalidation race tests: on a cluster, run in the two-node
    #: layout only.
    RACES = MANY_CLIENTS | {'test_race_loadopen_vs_local_invalidate'}

    def setUp(self):
        if self.cluster == 'one node' and \
                self._testMethodName in self.RACES:
            raise unittest.SkipTest(
                'run on the cluster in the two-node layout, whose loads '
                'come from another node than its stores (a minute or two '
                'each on a cluster)')
        if self.pooler == 'session' and self._testMethodName in self.RACES:
            raise unittest.SkipTest(
                'run through the transaction pooler, where connections '
                'change server sessions; a session pooler keeps each '
                'client on one session, as the direct suites do')
        private = (self.database in ('postgresql', 'mysql')
                   and self._testMethodName in self.MANY_CLIENTS)
        options = {}
        if self.replicas:
            pair = require_pair(self.database)
            server = pair.primary
            options['ro_replica_conf'] = pair.server_file(pair.replica)
        elif self.pooler:
            server = require_pooler(self.pooler)
        elif self.cluster:
            nodes = require_galera().nodes
            server = nodes[0]
            if self.cluster == 'two nodes':
                options['ro_replica_conf'] = nodes[0].cluster.server_file(
                    nodes[1])
        elif not private:
            # Before the base's setUp, which enters a temporary directory
            # that only its tearDown leaves (not run after a skip here).
            require(self.database)
        super().setUp()
        if not (self.replicas or self.pooler or self.cluster):
            server = private_server(self.database) if private else None
        self.factory = DatabaseFactory(self.database, self.keep_history,
                                       server=server, driver=self.driver,
                                       options=options,
                                       pooler=POOLER_OPTIONS.get(self.pooler))
        self._storage = self.factory.storage(zap=True)
        self._clients = []

    def tearDown(self):
        for client in self._clients:
            client.close()
        super().tearDown()
        self.factory.cleanup()
        # Storages the ZODB tests drop without closing hold database
        # connections until collected; collect now, so that tests with many
        # concurrent clients (RaceTests) do not run out of server slots.
        gc.collect()

    def open(self, **kwargs):
        """Reopen the same database (PersistentStorage, ReadOnlyStorage)."""
        if self._storage is not None:
            self._storage.close()
        self._storage = self.factory.storage(**kwargs)

    def _new_storage_client(self):
        """Another client of the same database, as a second process would
        have (RaceTests)."""
        client = self.factory.storage()
        self._clients.append(client)
        return client


class RecoveryTestBase(RelStorageTestBase):

    def setUp(self):
        super().setUp()
        self._dst = self.factory.storage('dst', zap=True)

    def tearDown(self):
        self._dst.close()
        super().tearDown()

    def new_dest(self):
        return self.factory.storage('dst')


class InstancePerThreadMTStorage(MTStorage.MTStorage):
    """ZODB's MTStorage storage-thread tests with each thread given its
    own ``new_instance()``, as ZODB's DB gives each connection: every
    thread then reads back its own commits through an instance whose
    snapshot has not been polled since (``load_current`` after
    ``tpc_finish``). The ZODB-thread tests, which go through a DB and so
    through instances already, run in the plain MTStorage class."""

    test2ZODBThreads = test7ZODBThreads = None

    def _checkNThreads(self, n, constructor, *args):
        if not args or args[0] is not self._storage:
            return super()._checkNThreads(n, constructor, *args)
        root, rest = args[0], args[1:]
        instances = []

        def with_instance():
            instance = root.new_instance()
            instances.append(instance)
            return constructor(instance, *rest)
        try:
            super()._checkNThreads(n, with_instance)
        finally:
            for instance in instances:
                instance.release()
        assert len(instances) == n


def _skipper(reason):
    @unittest.skip(reason)
    def skipped(self):
        pass  # never runs; unittest reports the reason
    return skipped


def _expose_check_methods(cls):
    names = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if name.startswith('check') and callable(value):
                names['test_' + name] = value
    for name, value in names.items():
        if not hasattr(cls, name):
            setattr(cls, name, value)


def _apply_skips(cls, skips):
    for name, reason in skips.items():
        if hasattr(cls, name):
            setattr(cls, name, _skipper(reason))


#: The (database, driver) pairs the storage suites run on: every database
#: with its default driver (Oracle only where a server is configured),
#: and PostgreSQL through psycopg 3 too.
VARIANTS = [(db, None) for db in ALL_DATABASES] + [('postgresql', 'psycopg')]
#: The databases the suites also run on with every load from a replica.
REPLICA_DATABASES = ('postgresql', 'mysql')
#: The pgbouncer pool modes the PostgreSQL suites also run through.
POOL_MODES = ('transaction', 'session')
#: The ways the suites run on a Galera cluster (see RelStorageTestBase).
CLUSTER_LAYOUTS = ('one node', 'two nodes')


def make_classes(database, driver=None, replicas=False, pooler=None,
                 cluster=None):
    """``{class_name: TestCase}`` for *database* in both history modes
    (through *driver*, when not the adapter's default; with *replicas*,
    loading from a replica of the primary it writes to; with *pooler*,
    through a pgbouncer in that pool mode; with *cluster*, on a Galera
    cluster laid out so, see CLUSTER_LAYOUTS)."""
    classes = {}
    layout = cluster.title().replace(' ', '') if cluster else ''
    title = {'sqlite': 'SQLite', 'postgresql': 'PostgreSQL',
             'mysql': 'MySQL', 'oracle': 'Oracle'}[database] + (
                 driver or '').title() + ('RoReplica' if replicas else '') + (
                     'Pgbouncer' + pooler.title() if pooler else '') + (
                     'Galera' + layout if cluster else '')
    label = (database + ('-' + driver if driver else '')
             + ('-ro-replica' if replicas else '')
             + ('-pgbouncer-' + pooler if pooler else '')
             + ('-galera-' + cluster.replace(' ', '-') if cluster else ''))
    for keep_history, mixins, skips in (
            (True, HISTORY_PRESERVING_MIXINS, {}),
            (False, HISTORY_FREE_MIXINS, SKIP_HISTORY_FREE)):
        mode = 'HP' if keep_history else 'HF'
        attrs = {'database': database, 'keep_history': keep_history,
                 'driver': driver, 'replicas': replicas, 'pooler': pooler,
                 'cluster': cluster,
                 'conformance_key': '%s-%s' % (label, mode)}
        name = '%s%sConformance' % (title, mode)
        cls = type(name, (RelStorageTestBase,) + mixins, attrs)
        _expose_check_methods(cls)
        _apply_skips(cls, dict(SKIP_ALWAYS, **skips))
        classes[name] = cls
        mname = '%s%sMTInstances' % (title, mode)
        classes[mname] = type(mname, (RelStorageTestBase,
                                      InstancePerThreadMTStorage),
                              dict(attrs, conformance_key='%s-%s-mt-instances'
                                   % (label, mode)))
        if keep_history:
            rname = '%s%sRecovery' % (title, mode)
            rcls = type(rname, (RecoveryTestBase,
                                RecoveryStorage.RecoveryStorage), dict(attrs))
            _expose_check_methods(rcls)
            _apply_skips(rcls, SKIP_ALWAYS)
            classes[rname] = rcls
    return classes


def count_tests(cls):
    """How many tests unittest collects from *cls*."""
    return len(unittest.TestLoader().getTestCaseNames(cls))
