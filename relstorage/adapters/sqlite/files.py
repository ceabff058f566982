"""The files of an SQLite data directory, opened one way.

Every file the storage keeps there (the database, the oid file, their
``-wal`` and ``-shm``, the lock files) holds or guards the site's data, so
it is created for its owner alone: the directory 0700, the files 0600
(SQLite gives a ``-wal``, ``-shm`` or ``-journal`` file the mode of its
database file, so creating the database file 0600 covers those). One that
already exists and is open to group or others is used, with a warning
naming it.

Setting a pragma can meet another process doing the same to the same
file: turning a new database to WAL needs the file to itself, and SQLite
answers "locked" at once, without its busy handler. So each pragma is
tried again, in short pauses, for at most the timeout given; the error
that ends it names the file.
"""
import logging
import os
import sqlite3
import stat
import threading
import urllib.parse

from ...exceptions import DatabaseUnavailable
from ..sql import SQL
from . import errors
from .checkpoint import retry

log = logging.getLogger(__name__)

MAIN_FILE = 'relstorage.sqlite3'
OID_FILE = 'oids.sqlite3'
#: Where RelStorage 4 keeps its tables, in the same data-dir.
RS4_FILE = 'main.sqlite3'


def open_read_only(path):
    """A read-only connection to the SQLite file at *path* (never creates
    it)."""
    return sqlite3.connect('file:%s?mode=ro' % urllib.parse.quote(path),
                           uri=True)


#: Permission bits that let group or others read or write.
EXPOSED = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH

_warned = set()
_warned_lock = threading.Lock()


def warn_if_exposed(path, st=None):
    """Log a warning (once per path and process) when *path* can be read
    or written by group or others."""
    if st is None:
        try:
            st = os.stat(path)
        except OSError:
            return
    if st.st_mode & EXPOSED:
        with _warned_lock:
            if path in _warned:
                return
            _warned.add(path)
        log.warning(
            '%s %s is open to other users (mode %s): it holds the site\'s '
            'data; chmod %s it', 'directory' if stat.S_ISDIR(st.st_mode)
            else 'file', path, oct(stat.S_IMODE(st.st_mode)),
            '700' if stat.S_ISDIR(st.st_mode) else '600')


def make_data_dir(path):
    """Create the data directory *path* 0700 when it is missing; warn
    when an existing one is open to others."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        os.makedirs(path, mode=0o700, exist_ok=True)
        return
    warn_if_exposed(path, st)


def create_private(path):
    """Create the file *path* 0600 when it is missing (a lock file, or an
    empty file SQLite takes as a new database); warn when an existing
    one is open to others. Returns nothing; the file stays as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        warn_if_exposed(path)
    else:
        os.close(fd)


def open_lock_file(path):
    """A descriptor of the lock file *path*, created 0600 if missing."""
    create_private(path)
    return os.open(path, os.O_RDWR)


#: Sets a pragma (a pragma takes no parameters: its value is in the text).
PRAGMA = SQL('PRAGMA {name} = {value}')


class _Busy(Exception):
    """Another connection held the file (tried again until the timeout)."""


def _pragma(conn, name, value):
    try:
        conn.execute(PRAGMA.format(name=name, value=str(value)))
    except sqlite3.OperationalError as e:
        if errors.kind(e) == errors.BUSY:
            raise _Busy(e) from None
        raise


#: Pragmas that write the file: a read-only connection leaves them as the
#: file has them.
WRITING_PRAGMAS = ('journal_mode', 'page_size', 'auto_vacuum')


def connect_read_only(path, timeout, pragmas=()):
    """A connection that only reads the SQLite file *path* (which must
    exist), the *pragmas* that would write it left out. SQLite reads a
    file in WAL mode through its -wal and -shm files, which it creates
    when they are missing: a user who may not write the directory can
    read only while they exist (while a process that writes the
    database has it open); otherwise DatabaseUnavailable says so at
    once."""
    pragmas = [(name, value) for name, value in pragmas
               if name not in WRITING_PRAGMAS]
    try:
        conn = _open(path, timeout, pragmas, read_only=True)
        conn.execute('PRAGMA journal_mode').fetchone()
    except (DatabaseUnavailable, sqlite3.Error) as e:
        directory = os.path.dirname(path)
        if os.access(directory, os.W_OK) or os.path.exists(path + '-shm'):
            if isinstance(e, DatabaseUnavailable):
                raise
            raise DatabaseUnavailable('cannot read the SQLite file %s: %s'
                                      % (path, e)) from None
        raise DatabaseUnavailable(
            'cannot read the SQLite file %s: this user may not write its '
            'directory, and SQLite reads a database in WAL mode through '
            'its -wal and -shm files, which do not exist while no process '
            'has the database open for writing (read it while the site '
            'runs, or as a user who may write %s)'
            % (path, directory)) from None
    return conn


def connect(path, timeout, pragmas=()):
    """A connection to the SQLite file *path*, created 0600 when missing,
    with each ``(name, value)`` of *pragmas* set (values are checked by
    the caller: a PRAGMA takes no bound parameters).

    Another process's hold on the file is waited out for at most
    *timeout* seconds; that and any other failure raise
    DatabaseUnavailable naming the file."""
    return _open(path, timeout, pragmas)


def _open(path, timeout, pragmas, read_only=False):
    step = 'open it'
    conn = None
    try:
        if read_only:
            conn = sqlite3.connect(
                'file:%s?mode=ro' % urllib.parse.quote(path), uri=True,
                timeout=timeout, isolation_level=None,
                check_same_thread=False)
        else:
            create_private(path)
            conn = sqlite3.connect(path, timeout=timeout,
                                   isolation_level=None,
                                   check_same_thread=False)
        for name, value in pragmas:
            step = 'set the pragma %s to %s' % (name, value)
            retry(lambda: _pragma(conn, name, value), _Busy,
                  timeout, 0.001, 0.05)
    except _Busy as e:
        conn.close()
        raise DatabaseUnavailable(
            'cannot %s on the SQLite file %s: other processes kept it '
            'locked for longer than %ss (%s)'
            % (step, path, timeout, e.args[0])) from None
    except (OSError, sqlite3.Error) as e:
        if conn is not None:
            conn.close()
        raise DatabaseUnavailable(
            'cannot %s on the SQLite file %s: %s' % (step, path, e)) from None
    return conn
