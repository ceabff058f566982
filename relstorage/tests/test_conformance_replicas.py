"""ZODB's storage conformance suites with every load from a replica.

Each storage writes to the primary of a private replicated pair
(replica_pairs: a PostgreSQL hot standby, a MariaDB GTID replica) and
loads through ``ro-replica-conf`` from its replica, which replays
asynchronously: a read that needs what the replica has not replayed yet
waits for it, or goes to the primary."""
from .conformance import REPLICA_DATABASES
from .conformance import make_classes

for _database in REPLICA_DATABASES:
    globals().update(make_classes(_database, replicas=True))
del _database
