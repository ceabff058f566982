"""``relstorage-metrics``: serve the Prometheus metrics of the storages of
a config file over HTTP, for a site whose application does not serve
them itself, or for scripts and a cron-driven pack.

    relstorage-metrics [--port N] [--addr HOST] [--interval SECONDS]
                       [--max-connections N] [--client-timeout SECONDS]
                       [--request-timeout SECONDS] config.conf

Each ``<relstorage>`` section of the file is opened read-only with
``metrics true`` and served at ``http://HOST:N/metrics`` until the
command is interrupted (SIGINT or SIGTERM):

* every ``--interval`` seconds (15) an instance of each storage polls, so
  ``relstorage_poll_invalidations`` counts the objects every other
  process changes and ``relstorage_poll_seconds`` times the poll; the
  shared cache and blob cache (its ``blob-dir``) series are there too;
* the database's own figures (``relstorage_database_*``: objects,
  revisions, transactions, state bytes, size on disk, the times of the
  last commit and the last pack), read through one snapshot at most once
  per interval, estimated where zodbinfo would mark them so (counts
  from the server's statistics, state bytes from a sample of the rows);
* with PROMETHEUS_MULTIPROC_DIR set, every metric the processes sharing
  that directory wrote there: run the application's workers, or a
  nightly zodbpack, with the same variable and ``metrics true``, and
  their commits, conflicts or pack progress are served here, added up.

Each connection is served in a thread of its own, at most
``--max-connections`` (16) at once; a client whose request is not whole
``--request-timeout`` seconds (5) after it connected, however it trickles
its bytes, is dropped, as is one that sends nothing for
``--client-timeout`` seconds (10) or reads nothing of the answer for as
long; none is waited for at shutdown.
"""
import importlib.util
import io
import logging
import signal
from socketserver import ThreadingMixIn
import sys
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler
from wsgiref.simple_server import WSGIServer
from wsgiref.simple_server import make_server

import ZConfig

from .exceptions import UsageError
from .tools import EXIT_FAILED
from .tools import EXIT_USAGE
from .tools import setup_logging
from .tools import tool_parser

log = logging.getLogger('relstorage-metrics')


#: relstorage_database_* gauges: the figure of zodbinfo, and the help.
FIGURES = (
    ('objects', 'objects', 'Objects in the database (an estimate where '
     'the server keeps statistics).'),
    ('revisions', 'revisions', 'Object revisions kept (history-preserving '
     'databases).'),
    ('transactions', 'transactions', 'Transactions in the database.'),
    ('current_bytes', 'current_state_bytes',
     'Bytes of the current object states.'),
    ('historical_bytes', 'historical_state_bytes',
     'Bytes of the older object revisions.'),
    ('blob_bytes', 'blob_bytes', 'Bytes of blob data in the database.'),
    ('database_bytes', 'size_bytes', 'Bytes the database takes on disk.'),
    ('last_commit', 'last_commit_timestamp_seconds',
     'Unix time of the newest transaction.'),
    ('last_pack_time', 'last_pack_timestamp_seconds',
     'Unix time the last pack ended.'),
)


class DatabaseFigures:
    """The ``relstorage_database_*`` gauges of the opened storages, read
    at a scrape, at most once per *interval* seconds each."""

    def __init__(self, storages, interval):
        self.storages = storages
        self.interval = interval
        self.lock = threading.Lock()
        self.read = {}

    def figures(self, storage):
        from ZODB.TimeStamp import TimeStamp
        from ZODB.utils import p64
        adapter = storage.adapter
        session = adapter.open_load_session()
        try:
            session.restart()
            found = session.figures()
        finally:
            session.close()
        if found.get('last_tid'):
            found['last_commit'] = TimeStamp(
                p64(found['last_tid'])).timeTime()
        return found

    def describe(self):
        return self._families({})

    def collect(self):
        now = time.monotonic()
        values = {}
        with self.lock:
            for storage in self.storages:
                name = storage.label()
                when, found = self.read.get(name, (None, None))
                if when is None or now - when >= self.interval:
                    try:
                        found = self.figures(storage)
                    except Exception as e:  # noqa: BLE001 -- said, the
                        # other series are still served
                        log.warning('%s: reading the database figures '
                                    'failed: %s', name, e)
                        found = None
                    self.read[name] = (now, found)
                if found is not None:
                    values[name] = found
        return self._families(values)

    @staticmethod
    def _families(values):
        from prometheus_client.core import GaugeMetricFamily
        families = []
        for key, suffix, doc in FIGURES:
            family = GaugeMetricFamily('relstorage_database_' + suffix, doc,
                                       labels=['storage'])
            for name, found in sorted(values.items()):
                if found.get(key) is not None:
                    family.add_metric([name], found[key])
            families.append(family)
        return families


#: Seconds a client may keep a connection without sending a byte of its
#: request (or reading one of the answer) before it is dropped
#: (--client-timeout).
CLIENT_TIMEOUT = 10.0
#: Seconds a client has, from its connection, to send its whole request
#: (request line, headers and what it reads of a body); then it is
#: dropped, however steadily it trickles bytes (--request-timeout).
REQUEST_TIMEOUT = 5.0
#: Connections served at once (--max-connections); one more is answered
#: "503 Service Unavailable" and closed at once.
MAX_CONNECTIONS = 16
#: What a connection beyond the bound is told.
_BUSY = (b'HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain'
         b'\r\nConnection: close\r\nContent-Length: 32\r\n\r\n'
         b'too many connections; try again\n')


class _RequestReader(io.RawIOBase):
    """The connection's bytes, read until *deadline* (time.monotonic())
    at most: each read waits for the time left, no longer than
    *idle* seconds, so one request cannot be stretched beyond the
    deadline by a byte sent every few seconds. The socket keeps its
    *idle* timeout for everything else (writing the answer)."""

    def __init__(self, sock, deadline, idle):
        super().__init__()
        self.sock = sock
        self.deadline = deadline
        self.idle = idle

    def readable(self):
        return True

    def readinto(self, buffer):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError('the request was not whole in time')
        self.sock.settimeout(min(left, self.idle))
        try:
            return self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(self.idle)


class _QuietHandler(WSGIRequestHandler):
    def setup(self):
        # StreamRequestHandler gives the socket this timeout: a client
        # that stalls mid-request is dropped rather than kept forever.
        self.timeout = self.server.client_timeout
        super().setup()
        # ... and the whole request must come within its deadline.
        self.rfile = io.BufferedReader(_RequestReader(
            self.connection,
            time.monotonic() + self.server.request_timeout,
            self.server.client_timeout))

    def log_message(self, format, *args):
        pass


class _Server(ThreadingMixIn, WSGIServer):
    """Each connection in a thread of its own, at most *max_connections*
    at once, none waited for at shutdown (a silent client must not hold
    up a scrape, nor the end of the process)."""

    daemon_threads = True
    block_on_close = False
    client_timeout = CLIENT_TIMEOUT
    request_timeout = REQUEST_TIMEOUT
    slots = None

    def limit(self, max_connections, client_timeout, request_timeout):
        self.slots = threading.BoundedSemaphore(max_connections)
        self.client_timeout = client_timeout
        self.request_timeout = request_timeout

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address):
        # A client that went silent (timed out) or away: its loss alone.
        log.debug('connection from %s ended: %s', client_address,
                  sys.exc_info()[1])


def serve(registry, addr, port, max_connections=MAX_CONNECTIONS,
          client_timeout=CLIENT_TIMEOUT, request_timeout=REQUEST_TIMEOUT):
    """Serve *registry* at ``http://addr:port/metrics`` from a daemon
    thread, each connection in a thread of its own; return the server
    (``server_port`` is the port, when *port* was 0)."""
    from prometheus_client import make_wsgi_app
    httpd = make_server(addr, port, make_wsgi_app(registry),
                        server_class=_Server, handler_class=_QuietHandler)
    httpd.limit(max_connections, client_timeout, request_timeout)
    threading.Thread(target=httpd.serve_forever, name='relstorage-metrics',
                     daemon=True).start()
    return httpd


def open_storages(path):
    """``[(name, storage)]``: each ``<relstorage>`` section of the file,
    opened read-only with metrics on."""
    from .config import open_configured
    from .config import options_from_section
    from .zodbinfo import relstorage_sections
    opened = []
    try:
        for name, section in relstorage_sections(path):
            options = options_from_section(section).copy(read_only=True,
                                                         metrics=True)
            opened.append((name, open_configured(section.adapter_factory(),
                                                 options)))
    except BaseException:
        for _, storage in opened:
            storage.close()
        raise
    return opened


def registry_for(storages, interval):
    """The registry to serve: the default one, or in multiprocess mode
    what the directory holds; with the database figures."""
    from prometheus_client import REGISTRY
    from prometheus_client import CollectorRegistry

    from .metrics.recorder import MULTIPROCESS
    from .metrics.recorder import MultiProcessCollector
    if MULTIPROCESS:
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    registry.register(DatabaseFigures(storages, interval))
    return registry


def run(storages, interval, stop):
    """Poll with one instance of each storage every *interval* seconds
    until *stop* is set."""
    from .metrics.recorder import flush
    instances = [storage.new_instance() for storage in storages]
    try:
        while True:
            for instance in instances:
                try:
                    instance.poll_invalidations()
                    instance.afterCompletion()
                except Exception as e:  # noqa: BLE001 -- said; next time
                    log.warning('%s: polling failed: %s',
                                instance.label(), e)
            flush()
            if stop.wait(interval):
                return
    finally:
        for instance in instances:
            instance.release()


def main(argv=None, out=None):
    out = out or sys.stdout
    parser = tool_parser('relstorage-metrics', __doc__,
                         config_help='file of <relstorage> sections',
                         databases=False)
    parser.add_argument('--port', type=int, default=9300,
                        help='TCP port to serve on (default 9300; 0: any '
                             'free port, printed at start)')
    parser.add_argument('--addr', default='127.0.0.1',
                        help='address to listen on (default 127.0.0.1; '
                             '0.0.0.0 for every interface)')
    parser.add_argument('--interval', type=float, default=15.0,
                        help='seconds between two polls, and the longest '
                             'the database figures are kept (default 15)')
    parser.add_argument('--max-connections', type=int,
                        default=MAX_CONNECTIONS, metavar='N',
                        help='connections served at once; more are '
                             'answered 503 (default %(default)s)')
    parser.add_argument('--client-timeout', type=float,
                        default=CLIENT_TIMEOUT, metavar='SECONDS',
                        help='drop a client that sends nothing for this '
                             'long before its request is whole '
                             '(default %(default)s)')
    parser.add_argument('--request-timeout', type=float,
                        default=REQUEST_TIMEOUT, metavar='SECONDS',
                        help='drop a client whose request is not whole '
                             'this long after it connected, however it '
                             'trickles it (default %(default)s)')
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error('--interval must be positive')
    if args.max_connections < 1:
        parser.error('--max-connections must be at least 1')
    if not 0 < args.client_timeout < float('inf'):
        parser.error('--client-timeout must be a positive number of '
                     'seconds')
    if not 0 < args.request_timeout < float('inf'):
        parser.error('--request-timeout must be a positive number of '
                     'seconds')
    setup_logging()
    if importlib.util.find_spec('prometheus_client') is None:
        print('relstorage-metrics: prometheus_client is not installed '
              "(relstorage's metrics extra)", file=sys.stderr)
        return EXIT_FAILED
    try:
        opened = open_storages(args.config)
    except (ZConfig.ConfigurationError, UsageError, OSError) as e:
        print('relstorage-metrics: %s' % e, file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 -- reported, then exit 1
        print('relstorage-metrics: %s: %s' % (type(e).__name__, e),
              file=sys.stderr)
        return EXIT_FAILED
    if not opened:
        print('relstorage-metrics: %s holds no <relstorage> section'
              % args.config, file=sys.stderr)
        return EXIT_USAGE
    storages = [storage for _, storage in opened]
    stop = threading.Event()
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:  # SIGTERM ends the loop as SIGINT does
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        httpd = serve(registry_for(storages, args.interval), args.addr,
                      args.port, args.max_connections, args.client_timeout,
                      args.request_timeout)
        for name, storage in opened:
            print('%s: %s' % (name, storage.describe()), file=out)
        print('serving http://%s:%d/metrics' % (args.addr, httpd.server_port),
              file=out, flush=True)
        try:
            run(storages, args.interval, stop)
        except KeyboardInterrupt:
            pass
        httpd.shutdown()
        httpd.server_close()
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        for storage in storages:
            storage.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
