"""What a release holds, built as a packager builds it: the sdist and the
wheel of a copy of this checkout (``python -m build``, no build
isolation: the backend pyproject.toml names is in the test extra) pass
``twine check --strict``; the sdist carries every file of the checkout,
the wheel every file of its packages (the data files read at run time
included) and nothing under a name another distribution installs; and
the wheel, installed into a fresh virtualenv, opens a database through a
ZConfig file, commits and reads it back.

Also: every directory of modules is a package the ``packages.find`` of
pyproject.toml finds (one without ``__init__.py`` imports from a
checkout, as a namespace package, and is silently left out of a
wheel)."""
import json
import os
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools import find_packages

import relstorage
from relstorage.testing.checkout import checkout_files
from relstorage.testing.checkout import copy_checkout
from relstorage.testing.checkout import make_venv
from relstorage.testing.checkout import run
from relstorage.testing.checkout import user_environment

ROOT = Path(__file__).resolve().parents[2]
#: The top-level packages the wheel installs: names of this project.
TOP_LEVEL = ('relstorage', 'relstorage_speedtest')
#: Installed by other distributions (speedtest-cli: a module and a
#: command named ``speedtest``): the wheel must install neither.
TAKEN = {'speedtest', 'speedtest.py', 'speedtest_cli.py'}
TAKEN_COMMANDS = {'speedtest', 'speedtest-cli'}

OPEN_COMMIT_READ = textwrap.dedent('''
    import json, sys, ZODB.config, relstorage, transaction
    config = """
    %%import relstorage
    <zodb main>
      <relstorage>
        <sqlite3>
          data-dir %s
        </sqlite3>
      </relstorage>
    </zodb>
    """ % sys.argv[1]
    db = ZODB.config.databaseFromString(config)
    with db.transaction() as conn:
        conn.root()['greeting'] = 'written by the installed wheel'
    db.close()
    db = ZODB.config.databaseFromString(config)
    conn = db.open()
    read = conn.root()['greeting']
    conn.close()
    db.close()
    print(json.dumps({'read': read, 'module': relstorage.__file__,
                      'version': relstorage.__version__}))
''')


def pyproject():
    with open(ROOT / 'pyproject.toml', 'rb') as f:
        return tomllib.load(f)


def test_every_directory_of_modules_is_installed():
    if not (ROOT / 'pyproject.toml').exists():
        return  # running from an installed copy: it is what it is
    include = pyproject()['tool']['setuptools']['packages']['find'][
        'include']
    found = set(find_packages(str(ROOT), include=include))
    directories = {
        path.parent.relative_to(ROOT).as_posix().replace('/', '.')
        for top in TOP_LEVEL
        for path in (ROOT / top).rglob('*.py')}
    assert 'relstorage.adapters.postgresql' in directories
    assert directories - found == set()


@pytest.fixture(scope='module')
def dists(tmp_path_factory):
    """``(sdist, wheel)``: paths of the two, built from a copy of the
    checkout (a build writes into its source tree)."""
    work = tmp_path_factory.mktemp('release')
    copy_checkout(work / 'src')
    run([sys.executable, '-m', 'build', '--no-isolation', '--outdir',
         str(work / 'dist'), str(work / 'src')], work, 300)
    [sdist] = (work / 'dist').glob('*.tar.gz')
    [wheel] = (work / 'dist').glob('*.whl')
    return sdist, wheel


def wheel_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_twine_check_strict_passes(dists):
    out = run([sys.executable, '-m', 'twine', 'check', '--strict']
              + [str(d) for d in dists], None, 120)
    assert out.count('PASSED') == 2, out


def test_sdist_carries_every_file_of_the_checkout(dists):
    sdist, _ = dists
    with tarfile.open(sdist) as tar:
        names = {n.split('/', 1)[1] for n in tar.getnames() if '/' in n}
    for name in ('CHANGES.txt', 'README.txt', 'LICENSE.txt', 'buildout.cfg',
                 '.ci/run', 'scripts/test.sh', 'pyproject.toml',
                 'relstorage/tests/conformance_counts.json'):
        assert name in names
    assert set(checkout_files(new=False)) - names == set()


def test_wheel_holds_every_file_of_its_packages(dists):
    _, wheel = dists
    names = set(wheel_names(wheel))
    for name in ('relstorage/component.xml',
                 'relstorage/tests/conformance_counts.json',
                 'relstorage_speedtest/main.py'):
        assert name in names
    packaged = {name for name in checkout_files(new=False)
                if name.split('/', 1)[0] in TOP_LEVEL}
    assert packaged - names == set()
    info = {n.split('/', 1)[1] for n in names if '.dist-info/' in n}
    assert 'licenses/LICENSE.txt' in info


def test_wheel_installs_no_name_of_another_distribution(dists):
    _, wheel = dists
    tops = {n.split('/', 1)[0] for n in wheel_names(wheel)
            if '.dist-info/' not in n}
    assert tops == set(TOP_LEVEL)
    assert tops & TAKEN == set()
    with zipfile.ZipFile(wheel) as z:
        [entry_points] = [n for n in z.namelist()
                          if n.endswith('.dist-info/entry_points.txt')]
        text = z.read(entry_points).decode()
    commands = text.split('[console_scripts]')[1].split('[')[0]
    names = {line.split('=')[0].strip() for line in commands.splitlines()
             if '=' in line}
    assert 'relstorage-speedtest' in names
    assert names & TAKEN_COMMANDS == set()


def test_installed_wheel_opens_commits_and_reads(dists, tmp_path):
    _, wheel = dists
    env = user_environment()
    bin_dir = make_venv(tmp_path / 'venv', env)
    run([os.path.join(bin_dir, 'python'), '-m', 'pip', 'install', '-q',
         str(wheel)], tmp_path, 600, env)
    script = tmp_path / 'open_commit_read.py'
    script.write_text(OPEN_COMMIT_READ)
    out = run([os.path.join(bin_dir, 'python'), str(script),
               str(tmp_path / 'db')], tmp_path, 120, env)
    found = json.loads(out.strip().splitlines()[-1])
    assert found['read'] == 'written by the installed wheel'
    assert found['module'].startswith(str(tmp_path / 'venv'))
    # The version is set in one place, relstorage/__init__.py, and the
    # built metadata says the same.
    assert pyproject()['project']['dynamic'] == ['version']
    assert found['version'] == relstorage.__version__
    assert 'usage: relstorage-speedtest' in run(
        [os.path.join(bin_dir, 'relstorage-speedtest'), '--help'],
        tmp_path, 120, env)
    assert not os.path.exists(os.path.join(bin_dir, 'speedtest'))
