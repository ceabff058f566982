"""What replica-conf and ro-replica-conf need of MySQL and MariaDB (see
adapters.replicas): a server file's line as connection parameters,
whether a server takes writes, and the positions, which the kind of
server counts (a single server's GTIDs, a Galera cluster's order: see
server.SingleServer and galera.GaleraNode)."""
from zope.interface import implementer

from ..components import IReplication
from ..replicas import split_host_port


@implementer(IReplication)
class MySQLReplication:

    def __init__(self, adapter):
        self.adapter = adapter

    def server_params(self, line):
        """A replica file's line is ``host`` or ``host:port``; the other
        parameters are the section's."""
        host, port = split_host_port(line)
        given = self.adapter.connector.params
        params = {key: value for key, value in given.items()
                  if key not in ('unix_socket', 'port', 'named_pipe')}
        params['host'] = host
        if port is not None:
            params['port'] = port
        return params

    def is_read_only_server(self, session):
        return (bool(int(session.scalar('SELECT @@read_only')))
                or not self.adapter.kind.takes_writes(session))

    def write_position(self, session):
        return self.adapter.kind.write_position(session)

    def replayed(self, session, position):
        return self.adapter.kind.replayed(session, position)
