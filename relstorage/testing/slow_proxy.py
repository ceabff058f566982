"""A TCP proxy that delays every message a client sends, standing in for
a database server a network away (or one that answers slowly).

Run in a process of its own (``start``), so that the process it slows
down, blocked or not, cannot hold it up: ``python -m
relstorage.testing.slow_proxy HOST PORT DELAY`` listens on a free port of
127.0.0.1, prints that port, and forwards to HOST:PORT each chunk a
client sends DELAY seconds after it came (the server's answers go back at
once), as a network's latency delays it: chunks sent one after another
arrive one after another, each DELAY late, not each DELAY after the one
before. Connections are delayed independently of each other.

It also counts round trips: on each connection, the server's answer to
what the client sent since the server last spoke ends one. Each line
written to its standard input is answered by a line on its standard
output with the round trips of every connection so far and the
connections made (``SlowProxy.counts``).
"""
import asyncio
import subprocess
import sys
import threading

#: Round trips of every connection so far, and the connections made (the
#: event loop adds; the thread answering on stdin reads).
_round_trips = [0]
_connections = [0]


def _count(turn, client):
    """The side that spoke: a round trip is counted when its answer comes
    (before the client gets it), so a message that has none (a
    connection's last, saying goodbye) is no round trip. *turn[0]*:
    whether the client spoke last on this connection."""
    if turn[0] != client:
        turn[0] = client
        if not client:
            _round_trips[0] += 1


async def _forward(reader, writer, turn, client, delay=0.0):
    """What one side sends, to the other: at once, or each chunk *delay*
    seconds after it came (*client*: whether the side is the client)."""
    loop = asyncio.get_running_loop()
    due = asyncio.Queue()

    async def send():
        try:
            while True:
                when, data = await due.get()
                if data is None:
                    break
                wait = when - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
    sender = asyncio.ensure_future(send()) if delay else None
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            _count(turn, client)
            if sender is None:
                writer.write(data)
                await writer.drain()
            else:
                due.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    finally:
        if sender is None:
            writer.close()
        else:
            due.put_nowait((None, None))
            await sender


async def _serve(host, port, delay):
    async def client(client_reader, client_writer):
        _connections[0] += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(
                host, port)
        except OSError:
            client_writer.close()
            return
        turn = [False]
        await asyncio.gather(
            _forward(client_reader, server_writer, turn, True, delay),
            _forward(server_reader, client_writer, turn, False))

    server = await asyncio.start_server(client, '127.0.0.1', 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def start(host, port, delay):
    """``(process, port)``: a proxy process forwarding to *host*:*port*
    with *delay* seconds per client message; terminate the process when
    done."""
    process = subprocess.Popen(
        [sys.executable, '-m', __name__, str(host), str(port), str(delay)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return process, int(process.stdout.readline())


class SlowProxy:
    """A proxy process (see start) as a context manager, whose counts()
    asks it how many round trips it carried and connections it made."""

    def __init__(self, host, port, delay=0.0):
        self.process, self.port = start(host, port, delay)

    def counts(self):
        """``(round trips, connections)`` so far."""
        self.process.stdin.write('?\n')
        self.process.stdin.flush()
        trips, connections = self.process.stdout.readline().split()
        return int(trips), int(connections)

    def close(self):
        self.process.terminate()
        self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _answer_counts():
    for _ in sys.stdin:
        print(_round_trips[0], _connections[0], flush=True)


def main(argv=None):
    host, port, delay = (argv or sys.argv[1:])[:3]
    threading.Thread(target=_answer_counts, daemon=True).start()
    asyncio.run(_serve(host, int(port), float(delay)))


if __name__ == '__main__':
    main()
