"""The console tools read the file a site already has: bare storage
sections, a ZODB config of ``<zodb>`` sections, or a Zope zope.conf of
``<zodb_db NAME>`` sections (with Zope's own keys and sections, and a
package Zope would import that is not installed here); ``--database``
picks databases; a file without a storage is one clear line."""
import os
import subprocess
import sys
import textwrap

import pytest
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.siteconfig import load_configured
from relstorage.testing.dbs import child_env

TOOLS = {
    'zodbpack': ['relstorage.zodbpack', '-v', '-d', '0'],
    'zodbinfo': ['relstorage.zodbinfo'],
    'zodbcheck': ['relstorage.zodbcheck'],
    'relstorage-upgrade': ['relstorage.upgrade', '--dry-run'],
}


def zope_conf(tmp_path, catalog_extra=''):
    """A zope.conf as a Zope 5/6 site has it, two of its databases on
    SQLite; tempstorage (its third) is not installed here."""
    path = tmp_path / 'zope.conf'
    path.write_text(textwrap.dedent('''\
        %%define INSTANCE %(tmp)s/instance
        %%define DATA %(tmp)s/var
        %%import tempstorage
        %%import relstorage
        instancehome $INSTANCE
        clienthome $DATA
        debug-mode off
        security-policy-implementation C
        products $INSTANCE/Products
        products $INSTANCE/MoreProducts
        <environment>
          CHAMELEON_CACHE $DATA/cache
        </environment>
        <dos_protection>
          form-memory-limit 1MB
        </dos_protection>
        <zodb_db main>
          mount-point /
          cache-size 50000
          <relstorage>
            keep-history false
            <sqlite3>
              data-dir $DATA/main
            </sqlite3>
          </relstorage>
        </zodb_db>
        <zodb_db temporary>
          <temporarystorage>
            name Temporary database (for sessions)
          </temporarystorage>
          mount-point /temp_folder
          container-class Products.TemporaryFolder.TemporaryContainer
        </zodb_db>
        <zodb_db catalog>
          mount-point /catalog
          connection-class Products.Whatever.Connection
          <relstorage>
            keep-history false
            %(catalog_extra)s
            <sqlite3>
              data-dir $DATA/catalog
            </sqlite3>
          </relstorage>
        </zodb_db>
        ''') % {'tmp': tmp_path, 'catalog_extra': catalog_extra})
    return str(path)


def run(tool, *args):
    return subprocess.run([sys.executable, '-m'] + TOOLS[tool] + list(args),
                          capture_output=True, text=True, env=child_env(),
                          timeout=300)


def fill(entries):
    """A root holding garbage-to-be in each configured database."""
    for entry in entries:
        db = ZODB.DB(entry.storage.open())
        try:
            with db.transaction() as conn:
                conn.root()['gone'] = PersistentMapping(db=entry.name)
            with db.transaction() as conn:
                del conn.root()['gone']
        finally:
            db.close()


@pytest.fixture
def site(tmp_path):
    path = zope_conf(tmp_path)
    fill([entry for entry in load_configured(path) if entry.storage])
    return path


def test_a_zope_conf_is_read_past_zopes_own_keys(tmp_path):
    path = zope_conf(tmp_path)
    entries = load_configured(path)
    assert [(e.name, e.database_name) for e in entries] == [
        ('main', 'main'), ('temporary', 'temporary'),
        ('catalog', 'catalog')]
    main, temporary, catalog = entries
    # %define reached the storage sections.
    assert main.storage.adapter_factory().data_dir(None) == str(
        tmp_path / 'var' / 'main')
    assert catalog.storage.adapter_factory().data_dir(None) == str(
        tmp_path / 'var' / 'catalog')
    assert temporary.storage is None
    assert 'temporarystorage' in temporary.missing
    assert 'tempstorage' in temporary.missing


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_every_tool_reads_a_zope_conf(site, tool):
    out = run(tool, site)
    assert out.returncode == 0, out.stderr
    for name in ('main', 'catalog'):
        assert '%s: ' % name in out.stdout or '%s (' % name in out.stdout, \
            out.stdout
    assert 'temporary' not in out.stdout


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_database_picks_some(site, tool):
    out = run(tool, '--database', 'catalog', site)
    assert out.returncode == 0, out.stderr
    assert 'catalog' in out.stdout and 'main' not in out.stdout, out.stdout
    out = run(tool, '--database', 'catalog,main', site)
    assert out.returncode == 0, out.stderr
    assert 'catalog' in out.stdout and 'main' in out.stdout


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_unknown_or_unreadable_database_is_one_line(site, tool):
    out = run(tool, '--database', 'nope', site)
    assert out.returncode == 2
    assert out.stderr.strip().count('\n') == 0, out.stderr
    assert 'no database named nope' in out.stderr
    assert 'main, temporary, catalog' in out.stderr
    out = run(tool, '--database', 'temporary', site)
    assert out.returncode == 2
    assert out.stderr.strip().count('\n') == 0, out.stderr
    assert 'tempstorage' in out.stderr and 'temporarystorage' in out.stderr


def test_zodbpack_packs_each_database_of_a_zope_conf(site):
    out = run('zodbpack', site)
    assert out.returncode == 0, out.stderr
    # main and catalog each lost their unlinked mapping.
    assert out.stdout.count('removed 1 revision, 1 object;') == 2, out.stdout


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_a_file_without_a_storage_is_one_clear_line(tmp_path, tool):
    path = tmp_path / 'nothing.conf'
    path.write_text('%import relstorage\n')
    out = run(tool, str(path))
    assert out.returncode == 2
    assert out.stdout == ''
    assert out.stderr.strip().count('\n') == 0, out.stderr
    assert 'holds no storage section' in out.stderr


@pytest.mark.parametrize('tool', sorted(TOOLS))
def test_a_zodb_config(tmp_path, tool):
    """The file ZODB.config.databaseFromFile opens: ``<zodb>`` sections,
    named or not."""
    path = tmp_path / 'zodb.conf'
    path.write_text(textwrap.dedent('''\
        %%import relstorage
        <zodb>
          <relstorage>
            <sqlite3>
              data-dir %(tmp)s/one
            </sqlite3>
          </relstorage>
        </zodb>
        <zodb two>
          <relstorage>
            <sqlite3>
              data-dir %(tmp)s/two
            </sqlite3>
          </relstorage>
        </zodb>
        ''') % {'tmp': tmp_path})
    entries = load_configured(str(path))
    assert [e.name for e in entries] == ['database 1', 'two']
    fill(entries)
    out = run(tool, str(path))
    assert out.returncode == 0, out.stderr
    assert 'database 1' in out.stdout and 'two' in out.stdout


def test_a_misspelt_storage_key_in_a_zope_conf_is_still_refused(tmp_path):
    path = zope_conf(tmp_path, catalog_extra='keep-histroy true')
    out = run('zodbinfo', path)
    assert out.returncode == 2
    assert 'keep-histroy' in out.stderr


def test_a_misspelt_key_of_a_bare_file_is_still_refused(tmp_path):
    path = tmp_path / 'bare.conf'
    path.write_text('%%import relstorage\ninstancehome /x\n<relstorage>\n'
                    ' <sqlite3>\n  data-dir %s\n </sqlite3>\n'
                    '</relstorage>\n' % tmp_path)
    out = run('zodbinfo', str(path))
    assert out.returncode == 2
    assert "'instancehome' is not a known key name" in out.stderr
    assert os.listdir(str(tmp_path)) == ['bare.conf']
