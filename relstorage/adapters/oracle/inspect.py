"""What an Oracle server says of itself, for zodbinfo."""
from ..inspect import ServerStatistics


class OracleStatistics(ServerStatistics):

    kind = 'Oracle'

    def version(self, session):
        # The driver has it from the handshake.
        return '%s %s' % (self.kind, session.conn.version)
