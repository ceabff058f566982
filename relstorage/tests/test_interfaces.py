"""Every adapter keeps the contract of relstorage.adapters.interfaces: its
sessions and components, in both history modes, pass zope.interface's
verifyObject (every declared method and attribute present, every
signature compatible), on real databases.

Oracle, without a server, is checked as far as it is built without one:
the adapter and its components with verifyObject, the session classes
with verifyClass."""
import pytest
from zope.interface import Interface
from zope.interface import implementer
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyClass
from zope.interface.verify import verifyObject

from relstorage.adapters import components as C
from relstorage.adapters import interfaces as I
from relstorage.adapters import pack_interfaces as P
from relstorage.adapters.loadstore import StoreSession
from relstorage.adapters.packwork import PackReads
from relstorage.adapters.packwork import PackWriter
from relstorage.adapters.relstorage4 import RelStorage4Reader
from relstorage.adapters.replicas import ReplicaLoadSession
from relstorage.adapters.replicas import ReplicaStoreSession
from relstorage.options import Options
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import mysql_params

MODES = [True, False]

#: (database, driver): the drivers installed here, each on its database.
DRIVERS = [('sqlite', None), ('postgresql', 'psycopg2'),
           ('postgresql', 'psycopg'), ('mysql', 'MySQLdb'),
           ('mysql', 'PyMySQL')]

#: The module each driver imports.
MODULES = {None: 'sqlite3', 'psycopg2': 'psycopg2', 'psycopg': 'psycopg',
           'MySQLdb': 'MySQLdb', 'PyMySQL': 'pymysql'}

COMPONENTS = [('mover', C.IMover), ('locker', C.ILocker),
              ('packer', C.IPacker), ('schema', C.ISchema),
              ('oids', C.IOIDAllocator), ('inspector', C.IInspector),
              ('iterator', C.IIterator)]


def verify_components(adapter):
    verifyObject(I.IRelStorageAdapter, adapter)
    verifyObject(C.IConnector, adapter.connector)
    for name, iface in COMPONENTS:
        verifyObject(iface, getattr(adapter, name))
    if adapter.keep_history:
        verifyObject(C.IHistoryPreservingIterator, adapter.iterator)
    # What replicas need, where the database has them.
    assert (adapter.replication is not None) == adapter.supports_replicas
    if adapter.replication is not None:
        verifyObject(C.IReplication, adapter.replication)


def build(db, driver, keep_history):
    """A prepared adapter of *db* through *driver*, and its factory."""
    pytest.importorskip(MODULES[driver])
    factory = DatabaseFactory(db, keep_history,
                              driver=driver if db == 'postgresql' else None)
    adapter = factory.adapter()
    if db == 'mysql' and driver != 'MySQLdb':
        adapter.close()
        from relstorage.adapters.mysql import MySQLAdapter
        adapter = MySQLAdapter(driver=driver,
                               options=Options(keep_history=keep_history),
                               **mysql_params(keep_history))
    adapter.prepare()
    if driver is not None:
        assert adapter.driver.name == driver
    return factory, adapter


@pytest.mark.parametrize('keep_history', MODES,
                         ids=['history-preserving', 'history-free'])
@pytest.mark.parametrize('db, driver', DRIVERS,
                         ids=[d or db for db, d in DRIVERS])
def test_adapter_sessions_and_components_keep_the_contract(
        db, driver, keep_history):
    factory, adapter = build(db, driver, keep_history)
    try:
        verify_components(adapter)
        opened = []
        for iface, open_ in [(I.ILoadSession, adapter.open_load_session),
                             (I.IStoreSession, adapter.open_store_session),
                             (P.IPackReads, adapter.open_pack_reads),
                             (P.IPackWriter, adapter.open_pack_writer),
                             (P.IPackKeeper, adapter.open_pack_keeper)]:
            session = open_()
            opened.append(session)
            verifyObject(iface, session)
            verifyObject(I.ISession, session.session)
        load = opened[0]
        load.restart()  # a session in use keeps it too
        verifyObject(I.ILoadSession, load)
        for session in opened:
            session.close()
    finally:
        adapter.close()
        factory.cleanup()


@pytest.mark.parametrize('keep_history', MODES,
                         ids=['history-preserving', 'history-free'])
def test_oracle_as_far_as_it_is_built_without_a_server(keep_history):
    pytest.importorskip('oracledb')
    from relstorage.adapters.oracle import OracleAdapter
    from relstorage.adapters.oracle.session import OracleSession
    adapter = OracleAdapter(user='nobody', password='-', dsn='localhost/x',
                            options=Options(keep_history=keep_history))
    verify_components(adapter)
    verifyClass(I.ISession, OracleSession)


@pytest.mark.parametrize('iface, cls', [
    (I.IStoreSession, StoreSession), (P.IPackWriter, PackWriter),
    (P.IPackReads, PackReads), (I.IRelStorage4Reader, RelStorage4Reader),
    (I.ILoadSession, ReplicaLoadSession),
    (I.IStoreSession, ReplicaStoreSession)])
def test_session_classes_declare_their_interfaces(iface, cls):
    # Also those no test above opens (RelStorage 4's reader needs a
    # RelStorage 4 database; the replica sessions, replica servers).
    assert iface.implementedBy(cls)
    verifyClass(iface, cls)


class IExample(Interface):

    def commit(meta, restore_tid=None):
        """Declared."""


def test_verification_fails_on_a_missing_member_or_a_drifted_signature():
    # What keeps the tests above from passing vacuously.
    @implementer(IExample)
    class Missing:
        pass

    @implementer(IExample)
    class Drifted:
        def commit(self, tid_hint, meta, restore_tid=None):
            pass

    @implementer(IExample)
    class Kept:
        def commit(self, meta, restore_tid=None, packed=False):
            pass

    for broken in (Missing, Drifted):
        with pytest.raises(Invalid):
            verifyObject(IExample, broken())
    verifyObject(IExample, Kept())
