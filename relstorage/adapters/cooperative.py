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
- PyMySQL on patched sockets;
- mysqlclient (MySQLdb) through a connection class made here: a
  statement is sent, its socket waited on with gevent, and its first
  result read once the server answered (commit and rollback too, sent as
  statements). A message of several statements has its later results
  read at once where they cannot wait for another session (a load
  session's consistent reads; the transaction verbs sent before a
  statement); the others, the connect and the driver's own autocommit
  and ping wait in one of gevent's threads,
  the greenlet waiting for the thread (the driver releases the GIL while
  it waits in C);
- SQLite by a sleep(0) every ``gevent_yield_interval`` steps of a
  statement.

Without gevent in use nothing here is called: no callback is installed
and no statement pays a check.
"""
import importlib
import sys
import weakref

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
                'driver: the gevent drivers need gevent (relstorage\'s '
                'gevent extra)') from None
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
    return SQLiteYielder(sleep)


class SQLiteYielder:
    """A progress handler that lets other greenlets run. An exception
    raised into its greenlet meanwhile (the greenlet killed) interrupts
    the statement, sqlite3 raising its own "interrupted" error (it cannot
    pass on a callback's exception): the exception is kept in
    ``stopped`` for the session to raise instead (``raise_stopped``)."""

    stopped = None

    def __init__(self, sleep):
        self.sleep = sleep

    def __call__(self):
        try:
            self.sleep(0)
        except BaseException as e:  # noqa: BLE001 -- raised again later
            self.stopped = e
            return 1
        return 0

    def raise_stopped(self):
        """Raise the exception that interrupted a statement, if any."""
        stopped, self.stopped = self.stopped, None
        if stopped is not None:
            raise stopped


def mysqldb_connector(module):
    """A function making mysqlclient connections (from the keywords of
    *module*'s ``connect``, the MySQLdb module) whose waits yield to
    other greenlets. A wait interrupted (the greenlet killed) or timed out
    (the connection's ``read_timeout``) closes the connection, whose
    session the server then ends: its transaction rolled back, its locks
    released."""
    cooperative_class = _mysqldb_connection_class(module)

    def connect(**params):
        conn = in_thread(close_made, module.connect, **params)
        # The driver's connection, made in a thread, given the waits
        # that yield (a subclass adding methods only).
        conn.__class__ = cooperative_class
        timeout = params.get('read_timeout')
        if timeout:
            conn.read_wait = timeout
            conn.timed_out = module.OperationalError(
                2013, 'Lost connection to server during query (no answer '
                'within read_timeout, %s s)' % timeout)
        return conn
    return connect


def _mysqldb_connection_class(module):
    from gevent.socket import wait_read
    connections = importlib.import_module(module.__name__ + '.connections')

    class CooperativeConnection(connections.Connection):
        #: Seconds a statement's answer is waited for (None: no bound),
        #: and the error raised after that.
        read_wait = timed_out = None

        def query(self, query):
            # The driver's C calls read the statement as they run.
            query = bytes(query) if isinstance(query, bytearray) else query
            self.send_query(query)
            try:
                wait_read(self.fileno(), self.read_wait, self.timed_out)
            except BaseException:
                self.close()
                raise
            self.read_query_result()

        #: Whether every statement sent is a consistent read (a load
        #: session's), whose answer waits for no other session: the
        #: results after a message's first are read at once.
        reads_only = False
        #: How many of the next results (after a message's first) are
        #: answers to statements that wait for nobody (transaction
        #: verbs), read at once.
        quick_results = 0

        def next_result(self):
            if not self.more_results() or self.reads_only:
                # Nothing to read (every execute asks first), or what
                # is read comes at once: no thread for that.
                return super().next_result()
            if self.quick_results > 0:
                self.quick_results -= 1
                return super().next_result()
            # Another session's lock may hold the answer back, held by
            # a greenlet that must run for it to come: wait in a thread.
            return self._in_thread(super().next_result)

        def autocommit(self, on):
            return self._in_thread(super().autocommit, on)

        # What the driver's own calls send, sent as statements, whose
        # answer is waited for as any other's.
        def commit(self):
            self.query(b'COMMIT')

        def rollback(self):
            self.query(b'ROLLBACK')

        def ping(self, *args):
            return self._in_thread(super().ping, *args)

        #: A call its greenlet stopped waiting for, still running in its
        #: thread; the connection is closed when it ends, and until then
        #: is not used (not even closed) by anyone else.
        abandoned = None

        def _in_thread(self, function, *args):
            if self.abandoned is not None:
                raise module.OperationalError(
                    2013, 'Lost connection to server: a call was '
                    'interrupted, and the connection is being closed')
            return in_thread(self._abandon, function, *args)

        def _abandon(self, call):
            self.abandoned = call
            call.rawlink(lambda _done: super(
                CooperativeConnection, self).close())

        def close(self):
            if self.abandoned is None:
                super().close()

    return CooperativeConnection


def in_thread(abandon, function, *args, **kwargs):
    """``function(*args, **kwargs)`` run in one of gevent's threads while
    the calling greenlet waits (other greenlets run meanwhile). Should
    the greenlet stop waiting before the call returns (killed), the call
    runs on in its thread, and ``abandon(call)`` is told at once (the
    call's AsyncResult: a connection it uses is closed once it ends, one
    it makes is closed once made)."""
    call = _thread_waits().spawn(function, *args, **kwargs)
    try:
        return call.get()
    except BaseException:
        if not call.ready():
            abandon(call)
        raise


def close_made(call):
    """``abandon`` for a call that makes a connection."""
    call.rawlink(lambda done: done.successful() and done.value.close())


#: gevent hub -> its ThreadWaits.
_WAITS = weakref.WeakKeyDictionary()


def _thread_waits():
    from gevent import get_hub
    hub = get_hub()
    waits = _WAITS.get(hub)
    if waits is None:
        waits = _WAITS[hub] = ThreadWaits()
    return waits


class ThreadWaits:
    """The threads of one gevent hub for calls that wait in C: as many as
    there are calls waiting. (Each call may wait for a lock another
    greenlet holds: were calls queued for a thread, a greenlet holding a
    lock could wait behind the ones waiting for it.) Threads idle for a
    minute end."""

    def __init__(self):
        from gevent.threadpool import ThreadPool
        self.pool = ThreadPool(4, idle_task_timeout=60)
        self.busy = 0

    def spawn(self, function, *args, **kwargs):
        """An AsyncResult of ``function(*args, **kwargs)``, run in a
        thread at once."""
        if self.busy >= self.pool.maxsize:
            self.pool.maxsize = self.busy + 1
        self.busy += 1
        call = self.pool.spawn(function, *args, **kwargs)
        call.rawlink(self._done)
        return call

    def _done(self, _call):
        self.busy -= 1
