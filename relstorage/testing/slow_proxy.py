"""A TCP proxy that delays every message a client sends, standing in for
a database server that answers slowly.

Run in a process of its own (``start``), so that the process it slows
down, blocked or not, cannot hold it up: ``python -m
relstorage.testing.slow_proxy HOST PORT DELAY`` listens on a free port of
127.0.0.1, prints that port, and forwards to HOST:PORT, each chunk a
client sends DELAY seconds late (the server's answers go back at once).
Connections are delayed independently of each other.
"""
import asyncio
import subprocess
import sys


async def _forward(reader, writer, delay):
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            if delay:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _serve(host, port, delay):
    async def client(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(
                host, port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _forward(client_reader, server_writer, delay),
            _forward(server_reader, client_writer, 0))

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
        stdout=subprocess.PIPE, text=True)
    return process, int(process.stdout.readline())


def main(argv=None):
    host, port, delay = (argv or sys.argv[1:])[:3]
    asyncio.run(_serve(host, int(port), float(delay)))


if __name__ == '__main__':
    main()
