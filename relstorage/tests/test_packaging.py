"""What an installed copy holds: every directory of modules is a package
that the ``packages.find`` of pyproject.toml finds (one without
``__init__.py`` imports from a checkout, as a namespace package, and is
silently left out of a wheel)."""
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
#: The top-level packages the wheel installs: names of this project.
TOP_LEVEL = ('relstorage', 'relstorage_speedtest')


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
