"""One private server of each kind per process, for the tests and the
speed test that cannot use the machine's shared servers (see
``servers`` for why, and for what a private server is).

Usage::

    server = private_server('postgresql')   # or 'mysql'
    conn = server.connect('relstoragetest_hp')
    ...
    server.restart()                         # same port, same data
    pooler = private_pooler('transaction', pool_size=4)   # pgbouncer
"""
from .mysql_server import MySQLServer
from .pgbouncer_server import PgBouncer
from .postgresql_server import PostgreSQLServer
from .processes import lock
from .servers import NotInstalled
from .servers import ServerError

_KINDS = {'postgresql': PostgreSQLServer, 'mysql': MySQLServer}
_servers = {}
#: Why a server would not start, so that the tests after the first do
#: not each wait for it again.
_failures = {}


def private_server(kind, max_connections=300, also_listen=()):
    """The private server of *kind* ('postgresql' or 'mysql') with
    *max_connections*: one per process and per (kind, max_connections),
    created and started on the first call, started again if a test left
    it stopped, and stopped and deleted at interpreter exit (atexit), so
    that no server process outlives the test run.

    Raises NotInstalled when the server's programs are missing and
    ServerError when it will not start.
    """
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError('kind must be one of %s, not %r'
                         % (', '.join(sorted(_KINDS)), kind))
    return _start_once(_servers, (kind, max_connections, tuple(also_listen)),
                       lambda: cls(max_connections, also_listen=also_listen))


def _start_once(registry, key, make):
    """The server *registry* holds under *key* (made by *make()* the
    first time), started; a failure to start is remembered."""
    with lock:
        if key in _failures:
            raise _failures[key]
        server = registry.get(key)
        if server is None:
            server = registry[key] = make()
        try:
            server.start()
        except (NotInstalled, ServerError) as e:
            _failures[key] = e
            raise
    return server


_poolers = {}
#: The max_connections of the server behind the poolers: room for the
#: pools of every mode and database at once.
POOLED_MAX_CONNECTIONS = 500


def private_pooler(pool_mode='transaction', pool_size=4):
    """The private pgbouncer of this process with *pool_mode* and
    *pool_size* (its default_pool_size), in front of a private
    PostgreSQL server of its own (POOLED_MAX_CONNECTIONS): one per
    process and per (pool_mode, pool_size), removed at exit like the
    servers. Raises NotInstalled or ServerError as private_server()."""
    backend = private_server('postgresql', POOLED_MAX_CONNECTIONS)
    return _start_once(_poolers, ('pgbouncer', pool_mode, pool_size),
                       lambda: PgBouncer(backend, pool_mode, pool_size))
