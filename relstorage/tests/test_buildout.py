"""zc.buildout, as buildout.cfg promises: buildout run on a copy of this
checkout (its own buildout.cfg, unchanged) gives scripts that work,
including those that start a child Python (``bin/relstorage-demo``, and
an external blob cache check), which must get the parent's path: a
buildout script puts relstorage on ``sys.path`` itself, and a plain
``python -m`` child would not find it."""
import os
import re
import shutil
import textwrap
import time

import pytest

from relstorage.testing.cache import cache_dir
from relstorage.testing.cache import locked
from relstorage.testing.checkout import copy_checkout
from relstorage.testing.checkout import make_venv
from relstorage.testing.checkout import run as _run
from relstorage.testing.checkout import user_environment

#: Kept between runs in the user's cache directory (not in the checkout,
#: not committed; see relstorage.testing.cache), so that buildout
#: downloads and builds each egg once: the eggs, and a virtualenv holding
#: zc.buildout and nothing of this project (buildout run from the test
#: run's own venv would give its scripts that venv's site-packages, where
#: relstorage is installed, and hide what a user's buildout meets).
CACHE_NAME = 'buildout'
#: How long a run reuses the eggs it finds without asking the index for
#: newer releases (``buildout:newest=false``): a week. Then one run asks
#: (``newest=true``, as a user's first buildout does) and the eggs its
#: scripts no longer use are removed.
FRESH_FOR = 7 * 24 * 3600

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


def _buildout(cache, env):
    """The buildout command of a virtualenv of its own."""
    venv = os.path.join(cache, 'venv')
    buildout = os.path.join(venv, 'bin', 'buildout')
    if not os.path.exists(buildout):
        shutil.rmtree(venv, ignore_errors=True)
        pip = os.path.join(make_venv(venv, env), 'pip')
        _run([pip, 'install', '-q', 'zc.buildout'], cache, 600, env)
    return buildout


def _stale(stamp):
    """Whether the eggs were last brought up to date over FRESH_FOR ago."""
    try:
        return time.time() - os.path.getmtime(stamp) > FRESH_FOR
    except OSError:
        return True


def _prune(eggs, bin_dir):
    """Remove the eggs none of *bin_dir*'s scripts puts on its path
    (older releases left by an earlier run); zc.recipe.egg, which
    buildout itself runs, stays."""
    used = set()
    for script in bin_dir.iterdir():
        used.update(re.findall(re.escape(eggs) + r'/([^/\'"]+)',
                               script.read_text()))
    if not used:  # scripts laid out otherwise: remove nothing
        return
    for name in os.listdir(eggs):
        if name not in used and not name.startswith('zc.recipe.egg-'):
            shutil.rmtree(os.path.join(eggs, name), ignore_errors=True)


def run_buildout(checkout, env):
    """Run buildout in *checkout* with the cached eggs (see FRESH_FOR)."""
    with locked(cache_dir(CACHE_NAME)) as cache:
        eggs = os.path.join(cache, 'eggs')
        stamp = os.path.join(cache, 'eggs-brought-up-to-date')
        newest = _stale(stamp)
        _run([_buildout(cache, env), '-q',
              'buildout:eggs-directory=%s' % eggs,
              'buildout:newest=%s' % ('true' if newest else 'false')],
             checkout, 1200, env)
        if newest:
            # buildout keeps its eggs one level down (eggs/v5).
            for sub in os.listdir(eggs):
                if os.path.isdir(os.path.join(eggs, sub)):
                    _prune(os.path.join(eggs, sub), checkout / 'bin')
            with open(stamp, 'w'):
                pass


# Longer than its steps' own bounds (a first run downloads every egg, 434 s
# on a busy machine): past the run's default timeout, pytest-timeout would
# stop the whole run instead of failing this test with its output.
@pytest.mark.timeout(2400)
def test_buildout_scripts_work(tmp_path):
    checkout = tmp_path / 'checkout'
    copy_checkout(checkout)
    env = user_environment()
    run_buildout(checkout, env)
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
