"""Where the tests and the speed test keep what they download and build
between runs: under the user's cache directory
(``$XDG_CACHE_HOME/relstorage-tests``, ``~/.cache/relstorage-tests`` when
XDG_CACHE_HOME is unset), never in the checkout or at fixed paths of the
temporary directory. Deleting it is always safe: the next run makes
again what it needs.

What is kept there (docs/testing.rst lists it with its sizes):

``buildout/``  test_buildout: a virtualenv holding zc.buildout and the
               eggs buildout downloaded and built (psycopg2 and
               mysqlclient compiled), so that a later run neither
               downloads nor compiles.
``rs4/``       test_relstorage4_upgrade: a virtualenv holding RelStorage
               4.3 from PyPI, which builds the databases to upgrade.
``rs4-bench/`` the benchmarks' other side (``--other-venv``): RelStorage
               4.3 and zodbshootout, made only when a benchmark asks.
``rs4-gevent/`` the gevent mode's other side: RelStorage 4.3 and gevent.
``pgjsonb-bench/`` zodb-pgjsonb and zodbshootout on Python 3.12, for the
               shootout and pack benchmarks, made only when they ask.

Two test runs sharing the directory (from two checkouts, say) take
turns through a lock file in ``buildout/`` and in ``rs4/``.
"""
import contextlib
import fcntl
import os

#: The folder under the user's cache directory.
NAME = 'relstorage-tests'


def cache_root():
    """``$XDG_CACHE_HOME/relstorage-tests``; a relative or empty
    XDG_CACHE_HOME is ignored, as the XDG specification says, for
    ``~/.cache``."""
    base = os.environ.get('XDG_CACHE_HOME', '')
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, NAME)


def cache_dir(name):
    """The folder *name* of the cache, created when missing."""
    path = os.path.join(cache_root(), name)
    os.makedirs(path, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(path):
    """Hold the lock of the cache folder *path* (another process using
    the same folder waits here)."""
    with open(os.path.join(path, '.lock'), 'a') as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
