"""zc.buildout, as buildout.cfg promises: buildout run on a copy of this
checkout (its own buildout.cfg, unchanged) gives scripts that work,
including those that start a child Python (``bin/relstorage-demo``, and
an external blob cache check), which must get the parent's path: a
buildout script puts relstorage on ``sys.path`` itself, and a plain
``python -m`` child would not find it."""
import os
import shutil
import textwrap

from relstorage.testing.checkout import copy_checkout
from relstorage.testing.checkout import make_venv
from relstorage.testing.checkout import run as _run
from relstorage.testing.checkout import user_environment

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


def _buildout(env):
    """The buildout command of a virtualenv of its own."""
    buildout = os.path.join(VENV, 'bin', 'buildout')
    if not os.path.exists(buildout):
        shutil.rmtree(VENV, ignore_errors=True)
        pip = os.path.join(make_venv(VENV, env), 'pip')
        _run([pip, 'install', '-q', 'zc.buildout'], CACHE, 600, env)
    return buildout


def test_buildout_scripts_work(tmp_path):
    checkout = tmp_path / 'checkout'
    copy_checkout(checkout)
    os.makedirs(EGGS, exist_ok=True)
    env = user_environment()
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
