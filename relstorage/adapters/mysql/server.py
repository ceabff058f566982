"""What kind of server an adapter talks to, learnt from its first answer:
the flavour and version (ServerInfo), and the parts that differ on a node
of a Galera cluster (SingleServer here; galera.GaleraNode there), chosen
once, after the adapter's probe, among SERVER_KINDS of the adapter."""
import re

from ..packwork import PackWriter
from .locker import MySQLLocker
from .session import MySQLSession


class ServerInfo:
    """Flavour and version of the server, read from ``VERSION()``;
    *label* names a kind other than a single server (``Galera``)."""

    def __init__(self, version_string, label=''):
        self.version_string = version_string
        self.label = label
        self.mariadb = 'mariadb' in version_string.lower()
        numbers = re.match(r'(\d+)\.(\d+)\.(\d+)', version_string)
        self.version = (tuple(int(n) for n in numbers.groups())
                        if numbers else (0, 0, 0))

    @property
    def flavour(self):
        name = 'MariaDB' if self.mariadb else 'MySQL'
        return name + ' ' + self.label if self.label else name

    @property
    def has_for_share(self):
        # MySQL 8.0.1 added FOR SHARE; MariaDB spells it LOCK IN SHARE MODE.
        return not self.mariadb and self.version >= (8, 0, 1)


#: What a server has written (mark_position), by how it counts.
POSITION = {
    'mariadb': 'SELECT @@gtid_binlog_pos',
    # MySQL 5.7 and 8: the set of GTIDs executed (not checked here
    # against a MySQL server: none is at hand).
    'mysql': 'SELECT @@GLOBAL.gtid_executed',
}
#: 1 when a replica has applied a position, asked without waiting.
REPLAYED = {
    # 0 at once where the replica has applied the GTIDs, else -1.
    'mariadb': 'SELECT MASTER_GTID_WAIT(%s, 0) = 0',
    # The position is a subset of what was executed; WAIT_FOR_EXECUTED_
    # GTID_SET would wait (its timeout 0 means for ever on 8.0).
    'mysql': 'SELECT GTID_SUBSET(%s, @@GLOBAL.gtid_executed)',
}


class SingleServer:
    """One MySQL or MariaDB server (a primary, or a replica of one): the
    parts of an adapter that a Galera node has otherwise."""

    #: Names the kind in descriptions ('' for a single server).
    label = ''
    locker_class = MySQLLocker
    #: The sessions of load sessions, and of store sessions.
    session_class = store_session_class = MySQLSession
    #: The session a pack writes with (IPackWriter).
    pack_writer_class = PackWriter
    #: Starts the snapshot transaction of a load session.
    load_begin_sql = 'START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY'
    #: Deletes the rows of new_oid below the one just inserted.
    oid_delete_sql = 'DELETE FROM new_oid WHERE zoid < %s'
    #: Settings (``SESSION name = value``) a store session adds.
    store_settings = ()
    #: Driver error codes that also mean the connection is no use.
    disconnect_errors = ()

    @classmethod
    def recognizes(cls, cursor):
        """Whether the server that *cursor* talks to is of this kind."""
        return True

    def __init__(self, info):
        self.info = info

    def takes_writes(self, session):
        """Whether the server of *session*, writable, takes queries."""
        return True

    def positions(self):
        """How the server counts what it applied: MariaDB's GTID
        position or MySQL's executed GTID set."""
        return 'mariadb' if self.info.mariadb else 'mysql'

    def write_position(self, session):
        return session.scalar(POSITION[self.positions()])

    def replayed(self, session, position):
        return session.scalar(REPLAYED[self.positions()], (position,)) == 1
