"""What replica-conf and ro-replica-conf need of PostgreSQL (see
adapters.replicas): a server file's line as connection parameters,
whether a server is a standby, and how far the primary wrote and a
standby replayed (WAL positions)."""
import re

from zope.interface import implementer

from ..components import IReplication
from ..replicas import split_host_port
from .dsn import make_dsn
from .dsn import parse_dsn


@implementer(IReplication)
class PostgreSQLReplication:

    def __init__(self, adapter):
        self.adapter = adapter

    def server_params(self, line):
        """A replica file's line is ``host``, ``host:port`` or a libpq
        connection string (key=value or URI); what it leaves out comes
        from the dsn."""
        params = parse_dsn(self.adapter.connector.dsn)
        if '=' in line or re.match(r'postgres(ql)?://', line):
            self.adapter.connector.check_dsn(line, '')
            params.update(parse_dsn(line))
        else:
            host, port = split_host_port(line)
            params.pop('hostaddr', None)
            params['host'] = host
            if port is not None:
                params['port'] = str(port)
            else:
                params.pop('port', None)
        return make_dsn(params)

    def is_read_only_server(self, session):
        return bool(session.scalar('SELECT pg_is_in_recovery()'))

    def write_position(self, session):
        return session.scalar('SELECT pg_current_wal_lsn()::text')

    def replayed(self, session, position):
        return session.scalar(
            'SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, true)',
            (position,))
