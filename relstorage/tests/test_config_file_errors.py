"""A config file every tool (and the demo) cannot use is one line on
stderr naming the file and the line: one that is not UTF-8 text, one
with a misspelt key; and a RelStorage 4 database, which the storage
refuses at open, is one line too (telling to run relstorage-upgrade),
never a traceback."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import ZODB
import ZODB.FileStorage

from relstorage.children import child_env
from relstorage.testing.dbs import require
from relstorage.tests.test_relstorage4_upgrade import Site

#: How each tool is run, and how it takes the file.
TOOLS = {
    'zodbconvert': ['relstorage.zodbconvert'],
    'zodbpack': ['relstorage.zodbpack', '-d', '0'],
    'zodbinfo': ['relstorage.zodbinfo'],
    'zodbcheck': ['relstorage.zodbcheck'],
    'relstorage-upgrade': ['relstorage.upgrade', '--dry-run'],
    'relstorage-metrics': ['relstorage.metricsserver', '--port', '0'],
    'relstorage-demo': ['relstorage.demo', '--config'],
}


def run(tool, path):
    return subprocess.run(
        [sys.executable, '-m'] + TOOLS[tool] + [str(path)],
        capture_output=True, env=child_env(), timeout=300)


def site_file(tool, tmp_path, section, name='site.conf'):
    """The file *tool* reads, with *section* (a ``<relstorage>``
    section's text) where the tool looks for it."""
    if tool == 'zodbconvert':
        source = tmp_path / 'source.fs'
        db = ZODB.DB(ZODB.FileStorage.FileStorage(str(source)))
        with db.transaction() as conn:
            conn.root()['x'] = 1
        db.close()
        section = section.replace('<relstorage>', '<relstorage destination>')
        section += '<filestorage source>\n  path %s\n</filestorage>\n' % (
            source)
    elif tool == 'relstorage-demo':
        section = '<zodb>\n%s</zodb>\n' % section
    path = tmp_path / name
    path.write_text('%import relstorage\n' + section)
    return path


def sqlite_section(data_dir, extra=''):
    return textwrap.dedent('''\
        <relstorage>
        %s  <sqlite3>
            data-dir %s
          </sqlite3>
        </relstorage>
        ''') % (extra, data_dir)


def line_of(path, text):
    """The number of the line of the file at *path* that holds *text*."""
    lines = path.read_bytes().split(b'\n')
    return [i for i, line in enumerate(lines, 1) if text in line][0]


def one_line(out, status):
    err = out.stderr.decode('utf-8')
    assert out.returncode == status, err
    assert 'Traceback' not in err
    assert err.strip().count('\n') == 0, err
    return err.strip()


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_a_file_that_is_not_utf8(tool, tmp_path):
    path = site_file(tool, tmp_path, sqlite_section(tmp_path / 'data'))
    # A comment as an editor set to Latin-1 saves it.
    path.write_bytes(path.read_bytes()
                     + '# the caf\xe9 site\n'.encode('latin-1'))
    offset = path.read_bytes().index(b'\xe9')
    err = one_line(run(tool, path), 2)
    assert err == ('%s: %s, line %d: not UTF-8 text: byte 0xe9 at offset %d'
                   % (tool, path, line_of(path, b'\xe9'), offset))
    assert not (tmp_path / 'data').exists()


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_an_included_file_that_is_not_utf8(tool, tmp_path):
    included = tmp_path / 'more.conf'
    included.write_bytes(b'# more\n# na\xefve\n')
    path = site_file(tool, tmp_path, sqlite_section(tmp_path / 'data')
                     + '%%include %s\n' % included)
    err = one_line(run(tool, path), 2)
    assert err == ('%s: %s, line 2: not UTF-8 text: byte 0xef at offset 11'
                   % (tool, included))


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_a_misspelt_key_names_its_file_and_line(tool, tmp_path):
    path = site_file(tool, tmp_path, sqlite_section(
        tmp_path / 'data', extra='  keep-histroy false\n'))
    err = one_line(run(tool, path), 2)
    assert err == ("%s: %s, line %d: 'keep-histroy' is not a known key name"
                   % (tool, path, line_of(path, b'keep-histroy')))
    assert not (tmp_path / 'data').exists()


@pytest.fixture(scope='module')
def relstorage4(tmp_path_factory):
    """The data directory of a RelStorage 4 SQLite database (made by
    RelStorage 4.3 itself)."""
    require('sqlite')
    where = tmp_path_factory.mktemp('rs4')
    site = Site('sqlite', True, where)
    site.build()
    # Only the user's (else each tool warns on a line of its own).
    os.chmod(site.where, 0o700)
    return pathlib.Path(site.where)


@pytest.mark.parametrize('tool', sorted(set(TOOLS) - {'relstorage-upgrade'}))
def test_a_relstorage4_database_is_one_line(tool, relstorage4, tmp_path):
    path = site_file(tool, tmp_path, sqlite_section(relstorage4))
    err = one_line(run(tool, path), 1)
    assert err.startswith(tool + ': ')
    assert 'holds a RelStorage 4 database' in err
    assert 'relstorage-upgrade CONFIG' in err


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_a_misspelt_section_names_its_file_and_line(tool, tmp_path):
    path = site_file(tool, tmp_path, sqlite_section(
        tmp_path / 'data').replace('sqlite3>', 'sqlite>'))
    err = one_line(run(tool, path), 2)
    assert err == ("%s: %s, line %d: unknown type name: 'sqlite'"
                   % (tool, path, line_of(path, b'<sqlite>')))
