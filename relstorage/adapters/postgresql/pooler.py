"""PostgreSQL behind a connection pooler (pgbouncer, pgpool-II).

``pooler`` in ``<postgresql>`` says what stands between the storage and
the server:

* ``none`` (the default): a server session per connection, as direct.
  The storage prepares its most frequent statement, sets its timeouts
  once per connection, keeps its scratch tables as temporary tables and
  listens for commits. At open, before it sets anything in a server
  session, it checks that this holds (see
  ``refuse_unannounced_transaction_pooler``): a pooler in transaction
  mode that the storage was not told of is refused with an error naming
  it, and leaves no server session changed.
* ``session``: a session pooler (pgbouncer ``pool_mode = session``),
  which gives each client a server session of its own for as long as it
  is connected: the same as direct.
* ``transaction``: a transaction pooler (pgbouncer ``pool_mode =
  transaction``), which lends a server session for one transaction only.
  Nothing then depends on a session surviving a transaction's end: no
  prepared statement, no session setting (each transaction sets its own
  with SET LOCAL, in the message that begins it), temp_store created by
  the transaction that uses it and dropped at its end, the pack's
  scratch tables unlogged tables of the database (one pack at a time, by
  the pack lock), the pack lock a lease row in relstorage_meta kept
  alive by a thread of the pack's process instead of a session advisory
  lock, and no LISTEN (instances poll; said once in the log).
"""
import logging
import threading

from ...exceptions import ConfigurationError
from ...exceptions import PackLockLost
from ..packer import PACK_TABLES
from ..sql import DROP_TABLE
from ..sql import SQL

log = logging.getLogger(__name__)

POOLER_MODES = ('none', 'session', 'transaction')


def pooler_mode(value):
    """The ``pooler`` option's value, checked: none, session or
    transaction (any case; empty means none)."""
    mode = str(value or 'none').strip().lower()
    if mode not in POOLER_MODES:
        raise ConfigurationError(
            'pooler: %r is not one of %s (what stands between the storage '
            'and PostgreSQL: nothing, a session pooler, or a transaction '
            'pooler such as pgbouncer with pool_mode = transaction)'
            % (value, ', '.join(POOLER_MODES)))
    return mode


# The pack lock as a lease: a relstorage_meta row holding the holder's
# random token and the server time (epoch seconds) it expires at.

LEASE_NAME = 'pack_lock'
#: Seconds a lease lasts unless renewed, and between renewals.
LEASE_SECONDS = 30
RENEW_SECONDS = 5
_EXPIRY = ("%s || ' ' || (extract(epoch FROM clock_timestamp()) + %s)"
           "::text")
#: Takes the lease unless someone else's is alive; a row when taken.
TAKE_LEASE = SQL(
    'INSERT INTO relstorage_meta (name, value) VALUES (%s, {expiry}) '
    'ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value WHERE '
    "split_part(relstorage_meta.value, ' ', 2)::float8 < "
    'extract(epoch FROM clock_timestamp()) RETURNING 1').format(
        expiry=_EXPIRY)
RENEW_LEASE = SQL(
    'UPDATE relstorage_meta SET value = {expiry} WHERE name = %s '
    "AND split_part(value, ' ', 1) = %s").format(expiry=_EXPIRY)
DROP_LEASE = ("DELETE FROM relstorage_meta WHERE name = %s AND "
              "split_part(value, ' ', 1) = %s")
#: Empties the scratch tables when a pack ends (they are nobody's
#: session's, so nothing else would).
EMPTY_SCRATCH = SQL('TRUNCATE {tables}').format(tables=', '.join(PACK_TABLES))
#: Drops them with the schema.
DROP_SCRATCH = DROP_TABLE.format(table=', '.join(PACK_TABLES))


class LeaseKeeper(threading.Thread):
    """Renews a pack lease every RENEW_SECONDS, on a connection of its
    own, until stopped; a process that dies stops renewing it, and the
    lease lapses LEASE_SECONDS later."""

    def __init__(self, adapter, token):
        super().__init__(name='relstorage pack lease', daemon=True)
        self.adapter = adapter
        self.token = token
        self.stopping = threading.Event()
        self.lost = False

    def run(self):
        session = None
        while not self.stopping.wait(RENEW_SECONDS):
            try:
                if session is None or session.closed:
                    session = self.adapter.open_connection(True)
                cursor = session.execute(RENEW_LEASE, (
                    self.token, LEASE_SECONDS, LEASE_NAME, self.token))
                if cursor.rowcount == 0:
                    self.lost = True
                    log.error('the pack lock of the %s was taken from this '
                              'pack (its lease lapsed)',
                              self.adapter.describe())
                    break
            except Exception as e:  # noqa: BLE001 -- retried at the next
                log.warning('could not renew the pack lock of the %s: %s',
                            self.adapter.describe(), e)
                if session is not None:
                    session.close()
                session = None
        if session is not None:
            session.close()

    def stop(self):
        self.stopping.set()
        self.join(RENEW_SECONDS * 2)

    def confirm(self, session):
        """Renew the lease in the transaction a pack batch began on
        *session*: the row stays locked until the batch ends, so no other
        pack takes the lease meanwhile (its claim waits, then finds it
        renewed). PackLockLost when it is this pack's no more."""
        if not self.lost:
            cursor = session.execute(RENEW_LEASE, (
                self.token, LEASE_SECONDS, LEASE_NAME, self.token))
            self.lost = cursor.rowcount == 0
        if self.lost:
            raise PackLockLost(
                'the pack lock of the %s was lost to another pack: this '
                "pack's lease lapsed (it was stopped for longer than %s s) "
                'and another pack took it; this pack stops here, removing '
                'nothing more, and the other one finishes the job'
                % (self.adapter.describe(), LEASE_SECONDS))


#: Statements each of two clients sends in turn, outside any
#: transaction, when looking for a transaction pooler.
PROBE_ROUNDS = 16
BACKEND_PID = 'SELECT pg_backend_pid()'


def refuse_unannounced_transaction_pooler(adapter, session, open_raw):
    """Refuse *session* (nothing set on it yet), naming the mode, when the
    adapter (told of no pooler) reaches the server through a pooler in
    transaction mode. *open_raw* opens another such session.

    A pooler answers a connection with a backend key of its own, so the
    process id libpq was given is not the server's: only then are two
    clients compared, each asking for its server session's process id in
    turn, outside any transaction (a pool of one must be free for them),
    PROBE_ROUNDS times. Behind a session pooler each keeps its own server
    session; behind a transaction pooler a client sees another server
    session than before, or the other client's, as soon as the pool
    hands out its sessions otherwise than one per client, which other
    clients' traffic (taking the session one just gave back) makes it do
    all the more. Nothing is set in any server session before this
    passed: a refused open leaves none changed."""
    seen = ({session.scalar(BACKEND_PID)}, set())
    if seen[0] == {adapter.driver.backend_pid(session.conn)}:
        return  # the server itself
    other = open_raw()
    try:
        for _ in range(PROBE_ROUNDS):
            for pids, client in zip(reversed(seen), (other, session)):
                pids.add(client.scalar(BACKEND_PID))
            if len(seen[0]) > 1 or len(seen[1]) > 1 or seen[0] & seen[1]:
                raise transaction_pooler_error(
                    adapter, 'server sessions change between transactions')
    finally:
        other.close()
    log.info('the %s is reached through a connection pooler that keeps '
             'sessions (session mode); "pooler session" in <postgresql> '
             'says so and skips this check', adapter.describe())


def transaction_pooler_error(adapter, why):
    """The error for a pooler in transaction mode that the adapter was
    not told of; *why* says how it showed."""
    return ConfigurationError(
        'pooler: the %s is reached through a connection pooler in '
        'transaction mode, such as pgbouncer with pool_mode = transaction '
        '(%s), and the <postgresql> section does not say so; add "pooler '
        'transaction" to it' % (adapter.describe(), why))
