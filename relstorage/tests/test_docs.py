"""The documentation: ``docs/`` builds with Sphinx with warnings as errors
(``-W``, nitpicky), a warning really fails the build, the configuration
reference lists every key of every section with a meaning, and the
README, which is also the package's long description, points at pages
that exist."""
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from readme_renderer import rst

from relstorage import configdoc
from relstorage.options import OPTIONS
from relstorage.testing.checkout import checkout_files

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / 'docs'
#: The pages the documentation promises (issue list of a site's needs).
PAGES = ('index', 'installation', 'configuration', 'reference',
         'postgresql', 'mysql', 'oracle', 'sqlite', 'moving', 'operations',
         'metrics', 'replicas', 'gevent', 'architecture', 'testing',
         'benchmarks', 'benchmarks-archive', 'changes')


def sphinx_build(source, out):
    """Build *source* into *out* as the test command does; the
    completed process (output and status)."""
    return subprocess.run(
        [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-n', '-q',
         '-b', 'html', str(source), str(out)],
        capture_output=True, text=True, timeout=600)


def _docs_checkout():
    checkout_files(new=False)  # skips outside a checkout
    assert (DOCS / 'conf.py').exists()


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    """The HTML directory of a build of docs/ (which must succeed)."""
    _docs_checkout()
    out = tmp_path_factory.mktemp('docs') / 'html'
    done = sphinx_build(DOCS, out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert done.stderr.strip() == '', done.stderr[-5000:]
    return out


def test_every_page_is_built(built):
    for page in PAGES:
        assert (built / (page + '.html')).exists(), page


def test_a_warning_fails_the_build(tmp_path):
    _docs_checkout()
    source = tmp_path / 'docs'
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns('_build'))
    index = source / 'index.rst'
    index.write_text(index.read_text()
                     + '\nSee :doc:`no-such-page`.\n')
    done = sphinx_build(source, tmp_path / 'html')
    assert done.returncode != 0
    assert 'no-such-page' in done.stderr


def test_every_configuration_key_has_a_meaning():
    assert configdoc.undocumented() == []


def test_the_reference_covers_every_option_and_section():
    keys = configdoc.keys()
    named = {k.name.replace('-', '_') for k in keys
             if k.section == 'relstorage'}
    assert {spec.attr for spec in OPTIONS} <= named
    assert {k.section for k in keys} == set(configdoc.SECTIONS)
    for key in keys:
        assert key.type and key.default and len(key.meaning) > 10, key
    by_name = {(k.section, k.name): k for k in keys}
    assert by_name[('relstorage', 'keep-history')].default == 'true'
    assert by_name[('relstorage', 'cache-local-mb')].default == '100'
    assert 'ignored' in by_name[('relstorage', 'cache-local-storage')].meaning


def test_a_key_without_a_meaning_is_found(monkeypatch, tmp_path):
    """The check sees a key whose description was left out."""
    text = Path(configdoc.COMPONENT).read_text()
    cut = re.sub(r'(<key name="blob-dir"[^>]*>)\s*<description>.*?'
                 r'</description>', r'\1', text, count=1, flags=re.S)
    assert cut != text
    component = tmp_path / 'component.xml'
    component.write_text(cut)
    monkeypatch.setattr(configdoc, 'COMPONENT', str(component))
    assert configdoc.undocumented() == ['relstorage/blob-dir']


def test_the_built_reference_lists_every_key(built):
    text = (built / 'reference.html').read_text()
    for key in configdoc.keys():
        first = key.name.split()[0]
        assert '<span class="pre">%s</span>' % first in text, key.name


def _readme():
    return (ROOT / 'README.txt').read_text()


def test_readme_is_short_and_valid_rst():
    """The front door, and PyPI's page: what ``twine check`` renders."""
    text = _readme()
    assert len(text.splitlines()) <= 250
    warnings = io.StringIO()
    assert rst.render(text, stream=warnings) is not None, warnings.getvalue()
    assert warnings.getvalue() == ''


def test_readme_points_at_pages_that_exist():
    _docs_checkout()
    named = set(re.findall(r'docs/([\w-]+)\.rst', _readme()))
    assert {'installation', 'reference', 'testing'} <= named
    assert sorted(p for p in named if not (DOCS / (p + '.rst')).exists()) \
        == []


def test_readme_quick_start_commands_are_the_scripts():
    text = _readme()
    for command in ('bash scripts/demo.sh', 'bash scripts/test.sh'):
        assert command in text
        assert (ROOT / command.split()[1]).exists()


def test_defaults_written_in_descriptions_are_the_real_ones():
    """component.xml's prose may say "default N"; options.py decides.
    The two must agree, or the reference would contradict itself."""
    checked = 0
    for key in configdoc.keys():
        if key.section != 'relstorage' or key.default == 'unset':
            continue
        for said in re.findall(r'default (true|false|[\d.]+)\b', key.meaning):
            checked += 1
            if said in ('true', 'false'):
                assert said == key.default, key
            else:
                assert float(said.rstrip('.')) == float(key.default), key
    assert checked > 10


#: ``pip install`` of this package by its name (any options first, the
#: name quoted or not, with extras or not, across a line break): the
#: package index answers it with RelStorage 4, another release of a
#: distribution of that name, until this one is published.
INSTALL_BY_NAME = re.compile(
    r"""pip\s+install\s+(?:-\S+\s+)*['"]?relstorage\b""", re.I)


def _install_by_name(text):
    """The spans of *text* that tell pip to install relstorage by name."""
    return [m.group(0) for m in INSTALL_BY_NAME.finditer(text)]


def test_the_install_by_name_scan_sees_every_spelling():
    assert len(_install_by_name(
        "pip install relstorage\n"
        "``pip install 'relstorage[postgresql]'``\n"
        "pip install -U relstorage\n"
        "``pip\n  install relstorage[gevent]``\n"
        'pip install -q "RelStorage[mysql]"\n')) == 5
    assert _install_by_name(
        "pip install '.[postgresql]'\npip install .\n"
        "pip install 'dist/relstorage-5.0.0-py3-none-any.whl[mysql]'\n"
        "pip install relstorage_extra\n") == []


def test_nothing_tells_users_to_install_relstorage_from_the_index():
    """README, the pages of docs/ and the messages of the shipped code
    install this package from its checkout (or a wheel built from it),
    never by its name from the package index."""
    _docs_checkout()
    files = [ROOT / 'README.txt'] + sorted(DOCS.glob('*.rst'))
    for top in ('relstorage', 'relstorage_speedtest'):
        files += [path for path in sorted((ROOT / top).rglob('*'))
                  if path.suffix in ('.py', '.xml', '.txt')
                  and 'tests' not in path.relative_to(ROOT).parts]
    assert len(files) > 100
    found = {str(path.relative_to(ROOT)): _install_by_name(path.read_text())
             for path in files}
    assert {name: spans for name, spans in found.items() if spans} == {}
