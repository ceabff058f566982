"""``relstorage-metrics`` beside clients that stall: a real server
process, real sockets. A silent client must hold up neither a scrape nor
the end of the process; one that stays silent is dropped; connections
beyond the bound are refused at once."""
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager

import prometheus_client  # noqa: F401 -- the server needs it: fail, not skip
import pytest
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import wait_for

#: Failure bound of every wait: a hang fails the test, nothing is timed.
HANG = 10


@contextmanager
def metrics_server(tmp_path, *options):
    """A relstorage-metrics process serving a small SQLite database;
    yields ``(process, url)``. The caller may end it; otherwise it is
    terminated here."""
    data = tmp_path / 'data'
    data.mkdir()
    db = ZODB.DB(DatabaseFactory.in_child('sqlite', True,
                                          str(data)).storage())
    with db.transaction() as conn:
        conn.root()['x'] = PersistentMapping()
    db.close()
    config = tmp_path / 'site.conf'
    config.write_text('%%import relstorage\n<relstorage stalled>\n'
                      '  <sqlite3>\n    data-dir %s\n  </sqlite3>\n'
                      '</relstorage>\n' % data)
    env = child_env()
    env.pop('PROMETHEUS_MULTIPROC_DIR', None)
    server = subprocess.Popen(
        [sys.executable, '-m', 'relstorage.metricsserver', '--port', '0',
         '--interval', '60'] + list(options) + [str(config)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        while line and not line.startswith('serving '):
            line = server.stdout.readline()
        assert line, server.stderr.read()
        yield server, line.split()[1]
    finally:
        if server.poll() is None:
            server.kill()
        server.communicate(timeout=60)


def connect(url):
    parts = urllib.parse.urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port),
                                    timeout=HANG)
    return sock


def stalled_clients(url):
    """One client connected that sends nothing, one that sent half a
    request (its request line and no end of headers)."""
    silent = connect(url)
    half = connect(url)
    half.sendall(b'GET /metrics HTTP/1.1\r\nHost: example\r\n')
    return [silent, half]


def scrape(url):
    with urllib.request.urlopen(url, timeout=HANG) as response:
        return response.status, response.read().decode('utf-8')


def test_a_scrape_is_served_beside_stalled_clients(tmp_path):
    with metrics_server(tmp_path) as (server, url):
        clients = stalled_clients(url)
        try:
            status, text = scrape(url)
            assert status == 200
            assert 'relstorage_database_objects{storage="stalled"} 2.0' \
                in text
            # Again, with them still there.
            assert scrape(url)[0] == 200
        finally:
            for client in clients:
                client.close()


def test_sigterm_ends_the_server_while_clients_stall(tmp_path):
    with metrics_server(tmp_path) as (server, url):
        clients = stalled_clients(url)
        try:
            assert scrape(url)[0] == 200  # the clients are being served
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=HANG)
            except subprocess.TimeoutExpired:
                pytest.fail('relstorage-metrics still running %d s after '
                            'SIGTERM, with a silent client connected'
                            % HANG)
            assert server.returncode == 0, server.stderr.read()
        finally:
            for client in clients:
                client.close()


def test_a_silent_client_is_dropped(tmp_path):
    with metrics_server(tmp_path, '--client-timeout', '0.2') as (server,
                                                                   url):
        for client in stalled_clients(url):
            with client:
                # The server closes it (an end of file), well before the
                # test's own bound.
                try:
                    assert client.recv(1) == b''
                except socket.timeout:
                    pytest.fail('a client silent for %d s was not dropped '
                                '(--client-timeout 0.2)' % HANG)
        assert scrape(url)[0] == 200


def test_connections_beyond_the_bound_are_refused_at_once(tmp_path):
    with metrics_server(tmp_path, '--max-connections', '2') as (server,
                                                                  url):
        clients = stalled_clients(url)
        # Connections are accepted in the order they came: the two
        # stalled ones hold both places when the scrape arrives.
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(url)
        assert refused.value.code == 503
        clients.pop().close()

        def served():
            try:
                return scrape(url)[0] == 200
            except urllib.error.HTTPError as e:
                assert e.code == 503
                return False
        # The closed client's place is given back when its thread has
        # seen the end of the connection.
        assert wait_for(served, HANG)
        for client in clients:
            client.close()


class Trickling:
    """*count* clients, each sending its request one byte at a time, a
    byte every *every* seconds, from one thread, until the server drops
    them or :meth:`stop`; none ever finishes its request."""

    REQUEST = (b'GET /metrics HTTP/1.1\r\nHost: example\r\n'
               + b'X-Slow: ' + b'a' * 4096)

    def __init__(self, url, count, every=0.5):
        import threading
        self.clients = [connect(url) for _ in range(count)]
        self.every = every
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.trickle, daemon=True)
        self.thread.start()

    def trickle(self):
        for byte in self.REQUEST:  # bounded: one pass over the request
            for client in list(self.clients):
                try:
                    client.sendall(bytes([byte]))
                except OSError:  # dropped by the server
                    self.clients.remove(client)
                    client.close()
            if not self.clients or self.stopped.wait(self.every):
                return

    def stop(self):
        self.stopped.set()
        self.thread.join(HANG)
        for client in self.clients:
            client.close()


def test_clients_trickling_a_byte_at_a_time_do_not_hold_every_place(
        tmp_path):
    # Each read is far shorter than --client-timeout, so only a deadline
    # for the whole request (--request-timeout, its default) drops them.
    with metrics_server(tmp_path) as (server, url):
        slow = Trickling(url, 17)  # every place (16), and one more
        try:
            def served():
                try:
                    return scrape(url)[0] == 200
                except urllib.error.HTTPError as e:
                    assert e.code == 503
                    time.sleep(0.05)
                    return False
            assert wait_for(served, 2 * HANG), \
                'every scrape refused while clients trickle bytes'
        finally:
            slow.stop()
