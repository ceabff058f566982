"""What an installed copy holds: every directory of modules is a package
that setup.py's find_packages() finds (one without ``__init__.py``
imports from a checkout, as a namespace package, and is silently left
out of a wheel)."""
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]


def test_every_directory_of_modules_is_installed():
    if not (ROOT / 'setup.py').exists():
        return  # running from an installed copy: it is what it is
    found = set(find_packages(str(ROOT), include=[
        'relstorage', 'relstorage.*',
        'relstorage_speedtest', 'relstorage_speedtest.*']))
    directories = {
        path.parent.relative_to(ROOT).as_posix().replace('/', '.')
        for top in ('relstorage', 'relstorage_speedtest')
        for path in (ROOT / top).rglob('*.py')}
    assert 'relstorage.adapters.postgresql' in directories
    assert directories - found == set()
