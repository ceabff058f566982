"""The statements that tell where a server's writes are, and whether a
replica has applied them (mark_position / replayed, see
adapters.replicas), by server: MariaDB's GTID position, MySQL's executed
GTID set, a Galera node's seqno.

No MySQL server is at hand: its two statements are pinned here word for
word and checked against MySQL's grammar (sqlglot), as the Oracle
statements are (test_oracle_sql); they have not run on a MySQL server.
MariaDB's run on the machine's MariaDB below, Galera's on the private
cluster (test_galera, test_conformance_galera)."""
import pytest
import sqlglot

from relstorage.adapters.mysql.adapter import MySQLAdapter
from relstorage.adapters.mysql.galera import GaleraNode
from relstorage.adapters.mysql.replication import MySQLReplication
from relstorage.adapters.mysql.server import ServerInfo
from relstorage.adapters.mysql.server import SingleServer
from relstorage.testing.dbs import DatabaseFactory

#: What each server is sent, by (write_position, replayed).
PINNED = {
    'MySQL 8.0.36': ('SELECT @@GLOBAL.gtid_executed',
                     'SELECT GTID_SUBSET(%s, @@GLOBAL.gtid_executed)'),
    '10.11.6-MariaDB': ('SELECT @@gtid_binlog_pos',
                        'SELECT MASTER_GTID_WAIT(%s, 0) = 0'),
}


class Recording:
    """Keeps each statement; answers *answer*."""

    def __init__(self, answer):
        self.answer = answer
        self.sent = []

    def scalar(self, stmt, params=()):
        self.sent.append((stmt, tuple(params)))
        return self.answer


def adapter_for(version, galera=False):
    adapter = MySQLAdapter.__new__(MySQLAdapter)
    kind = GaleraNode if galera else SingleServer
    adapter.server = ServerInfo(version, kind.label)
    adapter.kind = kind(adapter.server)
    adapter.replication = MySQLReplication(adapter)
    return adapter


@pytest.mark.parametrize('version', sorted(PINNED))
def test_position_statements_are_pinned(version):
    adapter = adapter_for(version.split()[-1] if 'MySQL' in version
                          else version)
    session = Recording('0-1-5')
    assert adapter.replication.write_position(session) == '0-1-5'
    session.answer = 1
    assert adapter.replication.replayed(session, '0-1-5') is True
    session.answer = 0
    assert adapter.replication.replayed(session, '0-1-6') is False
    sent = [stmt for stmt, _ in session.sent]
    assert sent == [PINNED[version][0]] + [PINNED[version][1]] * 2
    assert session.sent[1][1] == ('0-1-5',)
    for stmt in set(sent):
        sqlglot.parse_one(stmt.replace('%s', "'0-1-5'"), read='mysql',
                          error_level=sqlglot.ErrorLevel.RAISE)


def test_a_galera_node_counts_in_seqnos():
    adapter = adapter_for('10.11.6-MariaDB', galera=True)
    session = Recording('42')
    assert adapter.replication.write_position(session) == '42'
    replication = adapter.replication
    assert replication.replayed(session, '41')
    assert replication.replayed(session, 42)
    assert not adapter.replication.replayed(session, '43')
    assert {stmt for stmt, _ in session.sent} == {
        'SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS '
        "WHERE VARIABLE_NAME = 'WSREP_LAST_COMMITTED'"}


def test_mariadb_statements_run_on_mariadb():
    """The machine's MariaDB (which writes no binlog, or one): its own
    position is applied at once."""
    adapter = DatabaseFactory('mysql', True).adapter()
    try:
        assert adapter.server.mariadb
        session = adapter.connect(for_store=False)
        try:
            position = adapter.replication.write_position(session)
            assert adapter.replication.replayed(session, position)
        finally:
            session.close()
    finally:
        adapter.close()
