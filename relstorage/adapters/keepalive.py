"""Bounds on waiting for a database server that has gone silent.

Most network failures in production close nothing: a route is dropped, a
switch dies, a host is paused. A connection then waits as long as the
kernel's TCP defaults allow (about 15 minutes with data in flight, hours
when idle). With the ``network-timeout`` option the adapters turn on TCP
keepalives and TCP_USER_TIMEOUT for every connection, on the client's end
and, where the server lets a session ask, on the server's end too (so
that a server session whose client vanished mid-commit ends, and its
locks go, within the same bound).
"""
import os
import socket


class Keepalive:
    """The TCP settings that give up on a silent peer within *timeout*
    seconds: probes after ``idle`` seconds without traffic, ``count`` of
    them ``interval`` seconds apart (idle + interval * count stays under
    the timeout), and data unacknowledged for ``user_timeout_ms``."""

    count = 3

    def __init__(self, timeout):
        self.timeout = timeout
        self.idle = max(1, int(timeout / 3))
        self.interval = max(1, int(timeout / 6))
        self.user_timeout_ms = int(timeout * 1000)

    @classmethod
    def for_options(cls, options):
        """The settings for *options*, or None when network-timeout is 0
        (the operating system's defaults)."""
        timeout = options.network_timeout
        return cls(timeout) if timeout else None

    @property
    def connect_timeout(self):
        """Whole seconds, at least 2 (libpq's minimum)."""
        return max(2, int(self.timeout))

    def libpq_keywords(self):
        """libpq connection keywords (see PostgreSQL's "Parameter Key
        Words")."""
        return {'keepalives': 1,
                'keepalives_idle': self.idle,
                'keepalives_interval': self.interval,
                'keepalives_count': self.count,
                'tcp_user_timeout': self.user_timeout_ms,
                'connect_timeout': self.connect_timeout}

    def apply(self, fd):
        """Set them on the connected socket *fd*; a Unix socket, which
        cannot go silent this way, is left alone."""
        sock = socket.socket(fileno=os.dup(fd))
        try:
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE,
                            self.idle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL,
                            self.interval)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT,
                            self.count)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                            self.user_timeout_ms)
        finally:
            sock.close()
