"""Several servers for one database: ``replica-conf`` and ``ro-replica-conf``.

``replica-conf`` names a file listing read-write servers in order of
preference: sessions use the first that answers and takes writes, fail
over to the next when it is lost, and go back to the first after
``replica-timeout`` seconds. ``ro-replica-conf`` lists servers that only
answer loads. Both are read again when they change.

Reads never go back in time: :class:`Replicas` keeps the newest tid this
process has seen (its polls and its commits), and a load session reads
from a replica only once the replica has replayed at least that much. A
replica behind it is waited for at most ``replica-max-lag`` seconds, then
the read-write server answers instead. A read-write server that is older
than what was seen on another one (a failover to a standby that had not
received everything) is *stale*: StaleDatabase (a ReadConflictError)
until it catches up, or with ``revert_when_stale`` a logged warning and
a view that goes back, with every cache of it dropped.

The database package's replication (an IReplication: its
replication.py) says how a line of the file becomes connection
parameters and whether a server takes writes, and reads the positions
replicas have replayed up to; nothing here writes SQL. A line may
hold a password (a PostgreSQL connection string): messages name a server
by its line number and the adapter's description, never by its text.
"""
import logging
import os
import re
import threading
import time

from ..exceptions import ConfigurationError
from ..exceptions import DatabaseDisconnected
from ..exceptions import DatabaseUnavailable
from ..exceptions import StaleDatabase
from .loadstore import LoadSession
from .loadstore import StoreSession

log = logging.getLogger(__name__)

#: Seconds between looks at a server file (and at replica-timeout).
CHECK_EVERY = 1.0
#: Seconds between attempts to reach a replica when none answered.
RETRY_REPLICA = 10.0


def read_server_file(path, option):
    """``[(line number, line)]`` of the servers *path* lists: blank lines
    and ``#`` comments left out. ConfigurationError naming *option* and
    the file when it cannot be read or lists nothing."""
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except OSError as e:
        raise ConfigurationError('%s: cannot read %s: %s'
                                 % (option, path, e.strerror or e)) from None
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith('#'):
            lines.append((number, line))
    if not lines:
        raise ConfigurationError(
            '%s: %s lists no server (one per line: host, host:port%s)'
            % (option, path, '' if option != 'replica-conf'
               else ' or, for PostgreSQL, a connection string'))
    return lines


#: A host name or an IPv4 or IPv6 address, as a server line names it.
_HOST = re.compile(r'^[\w.%:-]+$')


def split_host_port(line):
    """``(host, port or None)`` of ``host``, ``host:port`` or
    ``[v6 address]:port``. The error for anything else does not quote
    the line, which may hold a password."""
    if line.startswith('['):
        host, _, rest = line[1:].partition(']')
        port = rest[1:] if rest.startswith(':') else None
    elif line.count(':') == 1:
        host, port = line.split(':')
    else:
        host, port = line, None
    if not _HOST.match(host):
        raise ConfigurationError(
            'not a host, host:port or [address]:port')
    if port is not None and not port.isdigit():
        raise ConfigurationError('the part after the host is not a port '
                                 'number (host:port)')
    return host, (int(port) if port else None)


class Server:
    """One line of a server file, with its connection parameters. The
    line (which may hold a password) is never shown: describe() says
    which server it is."""

    def __init__(self, adapter, number, line, option):
        self.adapter = adapter
        #: Its line number in the file.
        self.number = number
        self.line = line
        self.params = adapter.replication.server_params(line)
        #: The option whose file lists it.
        self.option = option

    @property
    def read_only(self):
        return self.option == 'ro-replica-conf'

    def describe(self):
        """``replica-conf line 2, the PostgreSQL database (...)``."""
        return '%s line %d, the %s' % (self.option, self.number,
                                       self.adapter.describe(self))

    def __repr__(self):
        return '<Server %s>' % self.describe()


class ServerList:
    """The servers of one file, and which of them sessions use now.

    ``generation`` changes whenever sessions should reconnect: a failover,
    the return to the first server, a new list in the file."""

    def __init__(self, adapter, path, option):
        self.adapter = adapter
        self.path = path
        self.option = option
        self.lock = threading.Lock()
        self.index = 0
        #: monotonic time the list moved off its first server.
        self.since = None
        self.generation = 0
        self.checked = time.monotonic()
        self.stamp = self._stamp()
        self._load(read_server_file(path, option))

    def _load(self, lines):
        servers = []
        for number, line in lines:
            try:
                servers.append(Server(self.adapter, number, line,
                                      self.option))
            except ConfigurationError as e:
                raise ConfigurationError('%s: %s line %d: %s' % (
                    self.option, self.path, number, e)) from None
        self.lines = lines
        self.servers = servers

    def _stamp(self):
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    @property
    def current(self):
        return self.servers[self.index]

    def refresh(self, timeout):
        """At a transaction boundary: take a changed file's new list, and
        go back to the first server after *timeout* seconds on another
        (0: never). Looks at most once a second."""
        now = time.monotonic()
        if now - self.checked < CHECK_EVERY:
            return
        with self.lock:
            self.checked = now
            stamp = self._stamp()
            if stamp != self.stamp:
                self.stamp = stamp
                try:
                    lines = read_server_file(self.path, self.option)
                    if lines != self.lines:
                        self._load(lines)
                        log.warning('%s: %s changed; reconnecting to %s',
                                    self.option, self.path,
                                    self.servers[0].describe())
                        self._move(0)
                except ConfigurationError as e:
                    log.error('%s; keeping the servers it listed before', e)
            if (self.index and timeout and self.since is not None
                    and now - self.since >= timeout):
                log.warning('%s: %.0f s on %s; trying %s again', self.option,
                            now - self.since, self.current.describe(),
                            self.servers[0].describe())
                self._move(0)

    def _move(self, index):
        if index != self.index or index == 0:
            self.generation += 1
        self.index = index
        self.since = time.monotonic() if index else None

    def connect(self, for_store, writable):
        """A session on the first usable server from the current one on,
        in order (with *writable*, one that takes writes)."""
        adapter = self.adapter
        with self.lock:
            start, servers = self.index, self.servers
        problems = []
        for step in range(len(servers)):
            index = (start + step) % len(servers)
            server = servers[index]
            try:
                session = adapter.open_connection(for_store, server)
            except DatabaseUnavailable as e:
                problems.append('line %d: %s' % (server.number, e))
                continue
            if writable:
                try:
                    read_only = adapter.replication.is_read_only_server(
                        session)
                except DatabaseUnavailable as e:
                    session.close()
                    problems.append('line %d: %s' % (server.number, e))
                    continue
                if read_only:
                    session.close()
                    problems.append('line %d: the %s is read-only (a '
                                    'standby or replica)' % (
                                        server.number,
                                        adapter.describe(server)))
                    continue
            with self.lock:
                if servers is self.servers and index != self.index:
                    log.warning('using %s instead of %s', server.describe(),
                                servers[self.index].describe())
                    self._move(index)
                session.generation = self.generation
            session.server = server
            return session
        raise DatabaseDisconnected(
            'no server listed in %s (%s) could be used: %s'
            % (self.path, self.option, '; '.join(problems)))


class _Seen:
    """What this process has seen of one database: the newest tid
    (polled or committed) and the read-write server it was seen on (None:
    the only one there is); and what a replica must also have replayed
    (the replication's write_position) after this process changed the
    database without a tid (None: nothing)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tid = 0
        self.server = None
        self.position = None


#: _Seen by database (adapter.location() and replica-conf), for every
#: storage of this process: one opened after another has committed reads
#: nothing older than that commit.
_SEEN = {}
_SEEN_LOCK = threading.Lock()


def forget(location):
    """This process emptied the database at *location* (an adapter's
    location()): what its storages saw of it no longer holds."""
    with _SEEN_LOCK:
        shared = [seen for key, seen in _SEEN.items() if key[0] == location]
    for seen in shared:
        with seen.lock:
            seen.tid = 0
            seen.server = None


def _shared(name):
    """An attribute of Replicas kept in its _Seen."""
    return property(lambda self: getattr(self.seen, name),
                    lambda self, value: setattr(self.seen, name, value))


class Replicas:
    """The server lists of one adapter, and what this process has seen
    of its database (a _Seen shared with the other storages of it)."""

    known_tid = _shared('tid')
    known_server = _shared('server')
    position = _shared('position')

    def __init__(self, adapter, options):
        self.adapter = adapter
        self.timeout = options.replica_timeout
        self.max_lag = options.replica_max_lag
        self.revert_when_stale = options.revert_when_stale
        self.rw = (ServerList(adapter, options.replica_conf, 'replica-conf')
                   if options.replica_conf else None)
        self.ro = (ServerList(adapter, options.ro_replica_conf,
                              'ro-replica-conf')
                   if options.ro_replica_conf else None)
        key = (adapter.location(), options.replica_conf
               and os.path.abspath(options.replica_conf))
        with _SEEN_LOCK:
            self.seen = _SEEN.setdefault(key, _Seen())
        self.lock = self.seen.lock
        #: Since when (monotonic) replicas have been behind; None when not.
        self.lagging_since = None

    @classmethod
    def configure(cls, adapter, options):
        """Replicas for *options*, or None when no server file is set."""
        if not (options.replica_conf or options.ro_replica_conf):
            return None
        if adapter.replication is None:
            option = ('replica-conf' if options.replica_conf
                      else 'ro-replica-conf')
            raise ConfigurationError(
                '%s: the %s has no replicas to choose from (replicas are '
                'for PostgreSQL and MySQL)' % (option, adapter.database_name))
        return cls(adapter, options)

    # Connections

    def current(self):
        return self.rw.current if self.rw is not None else None

    def connect(self, for_store):
        """A session on the read-write server."""
        if self.rw is None:
            return self.adapter.open_connection(for_store)
        self.rw.refresh(self.timeout)
        return self.rw.connect(for_store, writable=True)

    def connect_replica(self):
        """A session on a read-only replica, or None when none answers
        (the read-write server then answers loads)."""
        self.ro.refresh(self.timeout)
        try:
            return self.ro.connect(False, writable=False)
        except DatabaseUnavailable as e:
            log.warning('%s; loads go to the read-write server', e)
            return None

    def outdated(self, session):
        """Whether *session* should reconnect at this boundary: its list
        has moved on (failover, return to the first, a changed file)."""
        server = session.server
        if server is None:
            return False
        servers = self.rw if server.option == 'replica-conf' else self.ro
        servers.refresh(self.timeout)
        return session.generation != servers.generation

    # The newest tid seen

    def mark_position(self, session):
        if self.ro is not None:
            self.position = self.adapter.replication.write_position(
                session)

    def ask(self, session, prepare, last_tid_sql):
        """``(newest tid, position)`` on the replica *session* after
        *prepare(session)*; the position (see mark_position) is None once
        the replica has replayed it, and until then the tid is 0. It is
        asked first: a snapshot begun after it has replayed it sees what
        it holds."""
        position = self.position
        if position is not None:
            if not self.adapter.replication.replayed(session, position):
                # (It may not even hold the tables yet.)
                return 0, position
            if self.position is position:
                self.position = None
            position = None
        prepare(session)
        return session.scalar(last_tid_sql) or 0, position

    def saw(self, tid):
        """*tid* was committed or polled on a replica of the current
        read-write server."""
        with self.lock:
            if tid > self.known_tid:
                self.known_tid = tid
                self.known_server = self.current()

    def checked(self, tid, session):
        """*tid*, the newest on the read-write *session*: a tid older
        than one seen on another server is stale (see the module)."""
        with self.lock:
            known, where = self.known_tid, self.known_server
            if (tid >= known or self.rw is None or where is None
                    or where.line == session.server.line):
                # Newer; or older on the server it was seen on, where only
                # the database itself can have gone back (emptied, restored).
                self.known_tid, self.known_server = tid, session.server
                return tid
        message = (
            '%s is stale: its newest transaction is %016x, but %016x was '
            'seen on %s; the transactions after %016x may have been lost '
            'in a failover (a standby promoted before it had them)'
            % (session.server.describe(), tid, known,
               where.describe(), tid))
        if not self.revert_when_stale:
            raise StaleDatabase(
                message + '; retrying until it catches up (revert_when_stale '
                'is false)')
        log.error('%s; going back to its view and dropping what was cached '
                  '(revert_when_stale is true)', message)
        with self.lock:
            self.known_tid, self.known_server = tid, session.server
        return tid

    def note_lag(self, server, tid, needed):
        if self.lagging_since is None:
            self.lagging_since = time.monotonic()
            log.warning(
                '%s is behind: it has replayed up to transaction %016x, this '
                'process has seen %016x; loads go to the read-write server '
                'until it catches up', server.describe(), tid,
                needed)

    def note_caught_up(self, server):
        if self.lagging_since is not None:
            log.warning('%s has caught up after %.1f s; loads go to it again',
                        server.describe(),
                        time.monotonic() - self.lagging_since)
            self.lagging_since = None


class ReplicaStoreSession(StoreSession):
    """Reconnects at a boundary when its server list has moved on."""

    def at_boundary(self, func, *args):
        if self.adapter.replicas.outdated(self.session):
            self.session.close()
            self._open()
        return super().at_boundary(func, *args)


class ReplicaLoadSession(LoadSession):
    """Loads from a replica that is recent enough, else from the
    read-write server (see the module)."""

    def __init__(self, adapter):
        self.replicas = adapter.replicas
        #: The replica session (None: no replica answered) and, opened
        #: when a replica lags, one on the read-write server.
        self.replica = self.primary = None
        #: When (monotonic) to try the replicas again, none answering.
        self.retry_at = 0.0
        super().__init__(adapter)

    def _open(self):
        self._connect_replica()
        self.session = self.replica or self._primary()

    def _connect_replica(self):
        if (self.replica is None and self.replicas.ro is not None
                and time.monotonic() >= self.retry_at):
            self.replica = self.replicas.connect_replica()
            if self.replica is None:
                self.retry_at = time.monotonic() + RETRY_REPLICA
            else:
                self.replica.kind = self.current_kind

    def _primary(self):
        if self.primary is None or self.primary.closed:
            self.primary = self.replicas.connect(for_store=False)
            self.primary.kind = self.current_kind
        return self.primary

    def held(self):
        return [session for session in {self.replica, self.primary,
                                        self.session}
                if session is not None]

    def at_boundary(self, func, *args):
        replicas = self.replicas
        for session in (self.replica, self.primary):
            if session is not None and replicas.outdated(session):
                self._drop(session)
        if self.session is None or self.session.closed:
            self._open()
        try:
            return func(*args)
        except DatabaseDisconnected as e:
            self._drop(self.session)
            self._open()
            self.reconnected(e)
            return func(*args)

    def _drop(self, session):
        session.close()
        if session is self.replica:
            self.replica = None
        if session is self.primary:
            self.primary = None
        if session is self.session:
            self.session = None

    def close(self):
        for session in (self.replica, self.primary):
            if session is not None:
                session.close()

    # Between a lost connection and a new one (no server answered yet)
    # there is no session: the next poll or read opens one.

    def end_snapshot(self, now=True):
        if self.session is not None:
            super().end_snapshot(now)

    def commits_announced(self):
        if self.session is None:
            return True
        return super().commits_announced()

    def _restart(self):
        begin = self.adapter.load_begin_sql
        return self._newest(lambda session: session.restart(begin))

    def _poll(self):
        return self._newest(lambda session: session.end_read(now=False))

    def _newest(self, prepare):
        """The newest tid, after *prepare(session)*, on the replica when
        it has replayed what this process has seen, else on the
        read-write server; that session answers what follows."""
        replicas = self.replicas
        last_tid_sql = self.mover.last_tid_sql
        self._connect_replica()
        replica = self.replica
        if replica is not None:
            if self.session is not replica:
                # Read from the read-write server last time: try again.
                self.session.end_read()
                self.session = replica
            needed = replicas.known_tid
            tid, position = replicas.ask(replica, prepare, last_tid_sql)
            fresh = tid >= needed and position is None
            if not fresh and replicas.lagging_since is None:
                deadline = time.monotonic() + replicas.max_lag
                pause = 0.001
                while not fresh and time.monotonic() < deadline:
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
                    tid, position = replicas.ask(replica, prepare,
                                                 last_tid_sql)
                    fresh = tid >= needed and position is None
            if fresh:
                replicas.note_caught_up(replica.server)
                replicas.saw(tid)
                replica.verified = tid
                return tid
            replicas.note_lag(replica.server, tid, needed)
            replica.end_read()
            self.session = self._primary()
        prepare(self.session)
        tid = self.session.scalar(last_tid_sql) or 0
        return replicas.checked(tid, self.session)

    def _read(self, func, *args):
        session = self.session
        if session is not None and session.in_transaction:
            return func(session, *args)

        def begin_and_read():
            session = self.session
            if session is self.replica and (
                    session.verified < self.replicas.known_tid
                    or self.replicas.position is not None):
                # A new connection, or this process committed since the
                # replica was last seen to be recent enough.
                self._restart()
            else:
                session.begin(self.adapter.load_begin_sql)
            return func(self.session, *args)
        return self.at_boundary(begin_and_read)

    def poll_changes(self, after_tid):
        newest, changes = super().poll_changes(after_tid)
        if self.session is self.replica:
            self.replicas.saw(newest)
        else:
            self.replicas.checked(newest, self.session)
        return newest, changes

