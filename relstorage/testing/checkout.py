"""For the tests that build or install from a copy of the source
checkout they run from (buildout, the sdist and the wheel): its files
(what git tracks, plus new files not ignored yet, so that a copy holds
what a commit of the working tree would), and running tools as a user's
shell would, in virtualenvs of their own."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def checkout_files(new=True):
    """The checkout's file names, relative to its root (posix form), the
    files not tracked yet (and not ignored) included unless *new* is
    false; skips the calling test outside a git checkout (an installed
    copy)."""
    listed = subprocess.run(
        ['git', '-C', str(ROOT), 'ls-files', '--exclude-standard', '-c']
        + (['-o'] if new else []),
        capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip('not a git checkout: %s' % listed.stderr.strip())
    return [name for name in listed.stdout.splitlines()
            if (ROOT / name).is_file()]


def copy_checkout(dest):
    """Copy the checkout's files into the directory *dest*."""
    for name in checkout_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)


def user_environment():
    """The environment of a user's shell, not of this test run: no
    PYTHONPATH pointing at the checkout, no active virtualenv."""
    return {k: v for k, v in os.environ.items()
            if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}


def run(argv, cwd, timeout, env=None):
    """*argv*'s standard output; fails the test, with the end of both
    outputs, when it exits with an error."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, (argv, done.stdout[-3000:],
                                  done.stderr[-3000:])
    return done.stdout


def make_venv(path, env, timeout=300):
    """A new virtualenv at *path*, made by the interpreter this test run's
    virtualenv was made from (nothing of this run's site-packages)."""
    base = getattr(sys, '_base_executable', sys.executable)
    run([base, '-m', 'venv', str(path)], None, timeout, env)
    return os.path.join(str(path), 'bin')
