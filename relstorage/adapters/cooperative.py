"""Cooperative database waits under gevent.

An adapter cooperates when its ``driver`` option names one of
RelStorage's gevent drivers (``gevent psycopg2``, ``gevent MySQLdb``,
``gevent sqlite3``: the word ``gevent`` before a driver name) or when
gevent's monkey-patching of the ``socket`` module is in effect as the
adapter is made. Cooperating, a database wait lets other greenlets run:

- psycopg2 through the wait callback installed here (the connection is
  polled, and its socket waited on with gevent);
- psycopg (3) through its own selector-based waits, which yield once the
  ``selectors`` module is patched;
- PyMySQL on patched sockets (``auto`` prefers it then); mysqlclient
  waits in C and blocks every greenlet (a warning says so);
- SQLite by a sleep(0) every ``gevent_yield_interval`` steps of a
  statement.

Without gevent in use nothing here is called: no callback is installed
and no statement pays a check.
"""
import sys

from ..exceptions import ConfigurationError

#: The word that makes a driver name RelStorage's gevent driver.
WORD = 'gevent'


def split_driver_name(name):
    """``(asked, rest)``: whether the ``driver`` option *name* asks for
    cooperation (``gevent psycopg2``), and the driver name without that
    word (``auto`` when nothing follows it)."""
    text = str(name or 'auto').strip()
    if text.lower().startswith(WORD):
        return True, text[len(WORD):].strip() or 'auto'
    return False, text


def monkey_patched():
    """Whether gevent patched the socket module (gevent is not imported
    by asking)."""
    monkey = sys.modules.get('gevent.monkey')
    return monkey is not None and monkey.is_module_patched('socket')


def cooperating(asked):
    """Whether an adapter cooperates: *asked* by its driver name, or
    gevent's monkey-patching is in effect. Asking without gevent
    installed is a ConfigurationError."""
    if asked:
        try:
            import gevent  # noqa: F401
        except ImportError:
            raise ConfigurationError(
                'driver: the gevent drivers need gevent (pip install '
                'relstorage[gevent])') from None
        return True
    return monkey_patched()


def install_psycopg2_wait():
    """Make every psycopg2 connection of the process wait through
    gevent (psycopg2's wait callback is process-wide). A callback of
    another library is left in place: it cooperates already."""
    import psycopg2.extensions as extensions
    if extensions.get_wait_callback() is None:
        extensions.set_wait_callback(_psycopg2_wait_function(extensions))


def _psycopg2_wait_function(extensions):
    from gevent.socket import wait_read
    from gevent.socket import wait_write
    ok, read, write = (extensions.POLL_OK, extensions.POLL_READ,
                       extensions.POLL_WRITE)

    def wait(conn):
        """Poll *conn* until its operation is done, waiting on its
        socket in between. (Should the waiting greenlet be killed,
        psycopg2 closes the connection: the server then rolls back and
        releases its locks.)"""
        while True:
            state = conn.poll()
            if state == ok:
                return
            if state == read:
                wait_read(conn.fileno())
            elif state == write:
                wait_write(conn.fileno())
            else:
                raise extensions.OperationalError(
                    'unexpected poll state %r' % state)
    return wait


def use_psycopg_selector_wait():
    """psycopg (3) picks, when imported, a C wait that never yields
    unless gevent had patched ``select`` by then; imported earlier, it is
    switched to its selector wait, which yields on patched selectors."""
    import psycopg.waiting as waiting
    if getattr(waiting, 'wait_c', None) is waiting.wait:
        waiting.wait = waiting.wait_selector


def sqlite_yielder():
    """A progress handler for sqlite3's ``set_progress_handler(handler,
    n)`` that lets other greenlets run (every *n* VM steps)."""
    from gevent import sleep

    def handler():
        sleep(0)
        return 0
    return handler
