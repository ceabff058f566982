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


def check(venv):
    """The other side's relstorage version and location; refuses when it
    is this package."""
    python = os.path.join(venv, 'bin', 'python')
    out = _run([python, '-c', 'import json, relstorage, importlib.metadata '
                'as m; print(json.dumps([m.version("RelStorage"), '
                'relstorage.__file__]))'], 'import relstorage in %s' % venv)
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
    site = _run([os.path.join(venv, 'bin', 'python'), '-c',
                 'import sysconfig; print(sysconfig.get_path("purelib"))'],
                'find site-packages in %s' % venv).strip()
    with open(os.path.join(site, 'speedtest_rs4_mariadb.py'), 'w') as f:
        f.write('# Written by relstorage_speedtest.othervenv.\n%s\n\n'
                'adjust_for_mariadb()\n'
                % inspect.getsource(adjust_for_mariadb))
    with open(os.path.join(site, 'speedtest_rs4_mariadb.pth'), 'w') as f:
        f.write("import os; os.environ.get(%r) and "
                "__import__('speedtest_rs4_mariadb')\n" % MARIADB_SHIM_VAR)
