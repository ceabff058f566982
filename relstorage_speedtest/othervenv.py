"""The competitor's side of a side-by-side benchmark: RelStorage 4.3 (or
what ``--other-spec`` names) in a virtualenv of its own, made on first
use and reused while its marker says it holds the same requirements.

Every command run from it starts in a directory of its own, with no
PYTHONPATH: ``python -m`` and a script alike put the working directory
first on ``sys.path``, and started inside this checkout the other side
would import this package instead. ``check`` asks the other side where
its ``relstorage`` comes from and refuses a run that would compare this
package with itself.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from relstorage.testing.cache import cache_root

#: What the other side installs by default.
RS4 = 'RelStorage[postgresql,mysql]==4.3.0'
#: What zodbshootout 0.8.0 needs beside it: pyperf 2.4 and later add a
#: --profile option that clashes with zodbshootout's own, and six is
#: imported but not declared.
SHOOTOUT = ('zodbshootout==0.8.0', 'pyperf==2.3.1', 'six')
#: Where the virtualenv is kept between runs: the user's cache
#: directory, beside the tests' (relstorage.testing.cache).
DEFAULT_DIR = os.path.join(cache_root(), 'rs4-bench')
#: zodb-pgjsonb, the PostgreSQL storage keeping each object's references
#: in a column, compared with on PostgreSQL: it needs Python 3.12 or
#: later, found as scripts/other_pythons.sh finds it.
PGJSONB = 'zodb-pgjsonb==1.19.0'
PGJSONB_PYTHONS = ('3.12', '3.13')
PGJSONB_DIR = os.path.join(cache_root(), 'pgjsonb-bench')


class OtherVenvError(RuntimeError):
    """The other side's virtualenv cannot be made or used."""


def neutral_env():
    """The environment for the other side: nothing pointing at this
    checkout."""
    return {k: v for k, v in os.environ.items()
            if k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'PYTHONHOME')}


def neutral_dir():
    """A working directory outside any checkout."""
    return tempfile.mkdtemp(prefix='speedtest-other-')


def _marker(venv):
    return os.path.join(venv, '.speedtest-installed')


def _read_marker(venv):
    """The lines of *venv*'s marker (its requirement first), or []."""
    try:
        with open(_marker(venv)) as f:
            return f.read().splitlines()
    except OSError:
        return []


def ready(venv=None, spec=RS4, extra=SHOOTOUT):
    """The virtualenv at *venv* (default ``DEFAULT_DIR``) if its marker
    says it holds *spec* and *extra* (and perhaps more), else None."""
    venv = os.path.abspath(venv or DEFAULT_DIR)
    held = _read_marker(venv)
    if held[:1] == [spec] and set(extra) <= set(held):
        return venv
    return None


def ensure(venv=None, spec=RS4, extra=SHOOTOUT, log=print, python=None):
    """The virtualenv at *venv* (default ``DEFAULT_DIR``) holding *spec*
    and *extra*: made with *python* (default: the Python this runs on),
    or installed into, when its marker lacks them. Returns its
    directory."""
    made = ready(venv, spec, extra)
    if made:
        return made
    venv = os.path.abspath(venv or DEFAULT_DIR)
    held = _read_marker(venv)
    # What an earlier install of the same requirement added stays listed.
    kept = held[1:] if held[:1] == [spec] else []
    wanted = [spec] + sorted(set(kept) | set(extra))
    executable = os.path.join(venv, 'bin', 'python')
    # An existing virtualenv (somebody's own, or made for other
    # requirements) is added to, never cleared.
    if not os.path.exists(executable):
        log('making %s with %s (once; later runs reuse it)'
            % (venv, ', '.join((spec,) + tuple(extra))))
        base = python or getattr(sys, '_base_executable', sys.executable)
        _run([base, '-m', 'venv', venv], 'make the virtualenv')
    _run([executable, '-m', 'pip', 'install', '-q', spec] + list(extra),
         'install %s' % spec)
    with open(_marker(venv), 'w') as f:
        f.write('\n'.join(wanted))
    return venv


def find_python(versions=PGJSONB_PYTHONS):
    """The first of *versions* (``3.X``) found: ``python3.X`` on PATH,
    else pyenv's newest 3.X; None when none is."""
    import glob
    import re
    pyenv = os.environ.get('PYENV_ROOT') or os.path.join(
        os.path.expanduser('~'), '.pyenv')
    for version in versions:
        candidates = [shutil.which('python' + version)] + sorted(
            glob.glob(os.path.join(pyenv, 'versions', version + '.*', 'bin',
                                   'python' + version)),
            key=lambda path: [int(n) for n in re.findall(r'\d+', path)],
            reverse=True)
        for candidate in candidates:
            if candidate and _is_version(candidate, version):
                return candidate
    return None


def _is_version(python, version):
    # (A pyenv shim on PATH answers only for the versions pyenv selects.)
    try:
        done = subprocess.run(
            [python, '-c', 'import sys; print("%d.%d" % sys.version_info'
             '[:2])'], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def ensure_pgjsonb(venv=None, spec=PGJSONB, log=print):
    """zodb-pgjsonb's virtualenv (default ``PGJSONB_DIR``), with
    zodbshootout beside it, made with Python 3.12 or later when
    missing."""
    venv = os.path.abspath(venv or PGJSONB_DIR)
    python = None
    if not ready(venv, spec):
        if not os.path.exists(os.path.join(venv, 'bin', 'python')):
            python = find_python()
            if python is None:
                raise OtherVenvError(
                    '%s needs Python %s or later: found no python%s on '
                    'PATH nor in pyenv' % (spec, PGJSONB_PYTHONS[0],
                                           '/'.join(PGJSONB_PYTHONS)))
    return ensure(venv, spec, SHOOTOUT, log, python)


def _run(argv, what):
    cwd = neutral_dir()
    try:
        done = subprocess.run(argv, capture_output=True, text=True,
                              timeout=1800, cwd=cwd, env=neutral_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        raise OtherVenvError('cannot %s: %s' % (what, e)) from None
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    if done.returncode:
        raise OtherVenvError('cannot %s: %s' % (
            what, (done.stderr or done.stdout)[-2000:]))
    return done.stdout


def check(venv, module='relstorage', distribution='RelStorage'):
    """The other side's *module* (relstorage) version and location;
    refuses when it is this package."""
    python = os.path.join(venv, 'bin', 'python')
    out = _run([python, '-c', 'import json, %s, importlib.metadata as m; '
                'print(json.dumps([m.version(%r), %s.__file__]))'
                % (module, distribution, module)],
               'import %s in %s' % (module, venv))
    version, path = json.loads(out.strip().splitlines()[-1])
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.abspath(path).startswith(ours + os.sep):
        raise OtherVenvError(
            'the other virtualenv imports this checkout (%s): run from '
            'outside it and without PYTHONPATH' % path)
    return {'version': version, 'path': path}


def command(venv, name):
    """The path of script *name* in *venv*."""
    path = os.path.join(venv, 'bin', name)
    if not os.path.exists(path):
        raise OtherVenvError('%s has no %s' % (venv, name))
    return path


#: Set in the environment of a command of the other side to have
#: RelStorage 4.3 take MariaDB for MySQL 5.7 (see ``mariadb_shim``).
MARIADB_SHIM_VAR = 'SPEEDTEST_RS4_ON_MARIADB'


def mariadb_shim(venv):
    """RelStorage 4.3 cannot create its schema on MariaDB 10.11 as it is
    (see ``adjust_for_mariadb`` in relstorage/testing/rs4_workload.py).
    Installs into *venv* a module making those adjustments, imported at
    start-up by every process of the other side in whose environment
    ``MARIADB_SHIM_VAR`` is set (pyperf's workers included, when told to
    inherit it), and by no other."""
    import inspect
    from relstorage.testing.rs4_workload import adjust_for_mariadb
    _startup_module(venv, 'speedtest_rs4_mariadb', '%s\n\nadjust_for_mariadb()'
                    % inspect.getsource(adjust_for_mariadb),
                    MARIADB_SHIM_VAR)


def _startup_module(venv, name, source, variable):
    """Write module *name* holding *source* into *venv*'s site-packages,
    imported at start-up by its processes whose environment sets
    *variable*."""
    site = _run([os.path.join(venv, 'bin', 'python'), '-c',
                 'import sysconfig; print(sysconfig.get_path("purelib"))'],
                'find site-packages in %s' % venv).strip()
    with open(os.path.join(site, name + '.py'), 'w') as f:
        f.write('# Written by relstorage_speedtest.othervenv.\n%s\n'
                % source)
    with open(os.path.join(site, name + '.pth'), 'w') as f:
        f.write("import os; os.environ.get(%r) and __import__(%r)\n"
                % (variable, name))


#: Set in the environment of zodb-pgjsonb's zodbshootout runs (see
#: ``pgjsonb_shim``).
PGJSONB_SHIM_VAR = 'SPEEDTEST_PGJSONB_SHOOTOUT'

#: What zodbshootout needs of a storage and zodb-pgjsonb lacks.
#: zodbshootout empties a database (``--zap``) through its storage's
#: ``zap_all``, else its ``cleanup``, called on a storage it may already
#: have closed; zodb-pgjsonb's ``cleanup`` uses the storage's own
#: connection, closed by then: this ``zap_all`` connects anew. Before a
#: cold read zodbshootout empties the storage's cache, ``_cache``, which
#: zodb-pgjsonb names otherwise (a cache shared by the process and one
#: per connection): this ``_cache`` empties them all.
PGJSONB_SHIM = """\
import weakref

from zodb_pgjsonb.storage import PGJsonbStorage

#: Children first (object_state refers to transaction_log).
TABLES = ('blob_state', 'blob_history', 'object_history', 'pack_state',
          'object_state', 'transaction_log')


def zap_all(self, **_ignored):
    import psycopg
    from ZODB.utils import z64
    with psycopg.connect(self._dsn, autocommit=True) as conn:
        present = {row[0] for row in conn.execute(
            'SELECT tablename FROM pg_tables '
            'WHERE schemaname = current_schema()')}
        for table in TABLES:
            if table in present:
                conn.execute('DELETE FROM %s' % table)
    self._cache.clear()
    self._ltid = self._oid = z64


_new_instance = PGJsonbStorage.new_instance


def new_instance(self):
    instance = _new_instance(self)
    self.__dict__.setdefault('_speedtest_instances',
                             weakref.WeakSet()).add(instance)
    return instance


class Caches:
    def __init__(self, storage):
        self.storage = storage

    def clear(self):
        self.storage.clear_caches()
        for instance in list(self.storage.__dict__.get(
                '_speedtest_instances', ())):
            instance._load_cache.clear()


PGJsonbStorage.zap_all = zap_all
PGJsonbStorage.new_instance = new_instance
PGJsonbStorage._cache = property(Caches)
"""


def pgjsonb_shim(venv):
    """Give zodb-pgjsonb in *venv* what zodbshootout needs (see
    ``PGJSONB_SHIM``), in processes whose environment sets
    ``PGJSONB_SHIM_VAR``."""
    _startup_module(venv, 'speedtest_pgjsonb_shootout', PGJSONB_SHIM,
                    PGJSONB_SHIM_VAR)
