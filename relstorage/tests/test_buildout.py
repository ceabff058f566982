"""zc.buildout, as buildout.cfg promises: buildout run on a copy of this
checkout (its own buildout.cfg, unchanged) gives scripts that work,
including those that start a child Python (``bin/relstorage-demo``, and
an external blob cache check), which must get the parent's path: a
buildout script puts relstorage on ``sys.path`` itself, and a plain
``python -m`` child would not find it."""
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).parents[2]
#: Kept between runs on this machine, so that buildout downloads and
#: builds each egg once (not in the checkout, not committed): the eggs,
#: and a virtualenv holding zc.buildout and nothing of this project
#: (buildout run from the test run's own venv would give its scripts that
#: venv's site-packages, where relstorage is installed, and hide what a
#: user's buildout meets).
CACHE = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'relstorage-buildout')
EGGS = os.path.join(CACHE, 'eggs')
VENV = os.path.join(CACHE, 'venv')

BLOB_CHECK = textwrap.dedent('''
    import os, sys, ZODB
    from ZODB.blob import Blob
    from relstorage.config import storage_from_string
    from relstorage.blobs.cachesize import cache_files
    here = sys.argv[1]
    storage = storage_from_string("""
    <relstorage>
      blob-dir %s/cache
      blob-cache-size 100000
      blob-cache-size-check 50
      blob-cache-size-check-external true
      <sqlite3>
        data-dir %s/db
      </sqlite3>
    </relstorage>
    """ % (here, here))
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        for i in range(10):
            conn.root()['b%d' % i] = Blob(b'x' * 30000)
    storage._blobs.checker.wait()
    used = sum(s for _, s, _ in cache_files(here + '/cache'))
    db.close()
    print('blob cache bytes', used)
    sys.exit(0 if used <= 100000 else 1)
''')


def _copy_checkout(dest):
    listed = subprocess.run(
        ['git', '-C', str(ROOT), 'ls-files', '-co', '--exclude-standard'],
        capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip('not a git checkout: %s' % listed.stderr.strip())
    for name in listed.stdout.splitlines():
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _run(argv, cwd, timeout, env=None):
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, (argv, done.stdout[-3000:],
                                  done.stderr[-3000:])
    return done.stdout


def _buildout(env):
    """The buildout command of a virtualenv of its own."""
    buildout = os.path.join(VENV, 'bin', 'buildout')
    if not os.path.exists(buildout):
        shutil.rmtree(VENV, ignore_errors=True)
        base = getattr(sys, '_base_executable', sys.executable)
        _run([base, '-m', 'venv', VENV], CACHE, 300, env)
        _run([os.path.join(VENV, 'bin', 'pip'), 'install', '-q',
              'zc.buildout'], CACHE, 600, env)
    return buildout


def test_buildout_scripts_work(tmp_path):
    checkout = tmp_path / 'checkout'
    _copy_checkout(checkout)
    os.makedirs(EGGS, exist_ok=True)
    # The environment of a user's shell, not of this test run: no
    # PYTHONPATH pointing at this checkout.
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    buildout = _buildout(env)
    _run([buildout, '-q', 'buildout:eggs-directory=%s' % EGGS],
         checkout, 1200, env)
    bin_dir = checkout / 'bin'
    assert 'usage: zodbpack' in _run([str(bin_dir / 'zodbpack'), '--help'],
                                     checkout, 60, env)
    demo = _run([str(bin_dir / 'relstorage-demo')], tmp_path, 300,
                dict(env, XDG_DATA_HOME=str(tmp_path / 'data')))
    assert 'Demo succeeded' in demo
    script = tmp_path / 'blobcheck.py'
    script.write_text(BLOB_CHECK)
    out = _run([str(bin_dir / 'python'), str(script), str(tmp_path)],
               tmp_path, 300, env)
    assert 'blob cache bytes' in out
