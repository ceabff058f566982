"""A user who may only read an SQLite database's directory (the site's
files belong to another user): ``read-only true``, zodbinfo and zodbcheck
read it while the site has it open, and say at once why they cannot
while it does not.

The reading processes run as root without any capability (setpriv), so
that the files' permissions hold for them as for any other user: the
data directory and its files belong to ``nobody``, readable by all."""
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import ZODB
import ZODB.config
from persistent.mapping import PersistentMapping

from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import in_ci

NOBODY = 65534
SETPRIV = shutil.which('setpriv')


def _as_reader(*argv):
    """*argv* run with no capability: the files' modes apply."""
    return subprocess.run(
        [SETPRIV, '--inh-caps=-all', '--bounding-set=-all', '--'] +
        [sys.executable] + list(argv), capture_output=True, text=True,
        env=child_env(), timeout=120, cwd='/')


@pytest.fixture
def site(tmp_path):
    if SETPRIV is None or os.geteuid() != 0:
        message = 'needs root and setpriv (util-linux) to drop privileges'
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    data = tmp_path / 'data'
    config = tmp_path / 'site.conf'
    config.write_text('%%import relstorage\n<relstorage>\n <sqlite3>\n'
                      '  data-dir %s\n </sqlite3>\n</relstorage>\n' % data)
    db = ZODB.DB(ZODB.config.storageFromFile(open(str(config))))
    with db.transaction() as conn:
        conn.root()['page'] = PersistentMapping(title='hello')
    db.close()
    for path in [data] + list(data.iterdir()):
        os.chown(str(path), NOBODY, NOBODY)
        os.chmod(str(path), 0o755 if path == data else 0o644)
    read_only = tmp_path / 'read-only.conf'
    read_only.write_text(config.read_text().replace(
        '<relstorage>', '<relstorage>\n read-only true'))
    return data, config, read_only


READ = textwrap.dedent('''\
    import sys, ZODB, ZODB.config
    db = ZODB.DB(ZODB.config.storageFromFile(open(sys.argv[1])))
    with db.transaction() as conn:
        print(conn.root()['page']['title'])
    db.close()
    ''')

#: The site: the database open (as a running site has it) until its
#: standard input closes.
SITE = textwrap.dedent('''\
    import sys, ZODB, ZODB.config
    db = ZODB.DB(ZODB.config.storageFromFile(open(sys.argv[1])))
    with db.transaction() as conn:
        conn.root()['page']['title'] = 'hello again'
    conn = db.open()
    conn.root()['page']['title']
    print('open', flush=True)
    sys.stdin.read()
    conn.close()
    db.close()
    ''')


def test_read_while_the_site_runs(site, tmp_path):
    data, config, read_only = site
    running = subprocess.Popen([sys.executable, '-c', SITE, str(config)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=child_env())
    try:
        assert running.stdout.readline().strip() == 'open'
        out = _as_reader('-c', READ, str(read_only))
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == 'hello again'
        for tool in ('relstorage.zodbinfo', 'relstorage.zodbcheck'):
            out = _as_reader('-m', tool, str(read_only))
            assert out.returncode == 0, out.stderr
            assert 'SQLite database in %s' % data in out.stdout
        out = _as_reader('-m', 'relstorage.zodbcheck', str(config))
        assert out.returncode == 0, out.stderr
    finally:
        running.stdin.close()
        assert running.wait(timeout=60) == 0


@pytest.mark.parametrize('argv', [
    ['-c', READ], ['-m', 'relstorage.zodbinfo'],
    ['-m', 'relstorage.zodbcheck']])
def test_said_at_once_while_the_site_is_stopped(site, argv):
    data, config, read_only = site
    before = sorted(os.listdir(str(data)))
    started = time.monotonic()
    out = _as_reader(*(argv + [str(read_only)]))
    assert time.monotonic() - started < 30
    assert out.returncode != 0
    assert 'may not write its directory' in out.stderr, out.stderr
    assert '-wal and -shm' in out.stderr
    assert sorted(os.listdir(str(data))) == before
