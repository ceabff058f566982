"""RelStorage 4.3 from PyPI in a virtualenv of its own, for the tests that
compare with it: kept between runs in the test cache (``rs4/`` of
``relstorage.testing.cache``, never in the checkout), made on first use,
reused while its marker says it holds the same requirement."""
import os
import shutil
import subprocess
import sys
import threading

import pytest

from .cache import cache_dir
from .cache import locked
from .dbs import in_ci

CACHE_NAME = 'rs4'
RS4 = 'RelStorage[postgresql,mysql]==4.3.0'
_venv_lock = threading.Lock()


def rs4_python():
    """The Python of a virtualenv holding RelStorage 4.3 and nothing of
    this project (a test that cannot have it fails in CI, else skips)."""
    with _venv_lock, locked(cache_dir(CACHE_NAME)) as cache:
        venv = os.path.join(cache, 'venv')
        python = os.path.join(venv, 'bin', 'python')
        marker = os.path.join(venv, '.rs4-installed')
        if not os.path.exists(marker) or open(marker).read() != RS4:
            shutil.rmtree(venv, ignore_errors=True)
            base = getattr(sys, '_base_executable', sys.executable)
            subprocess.run([base, '-m', 'venv', venv], check=True,
                           timeout=300)
            done = subprocess.run(
                [python, '-m', 'pip', 'install', '-q', RS4],
                capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                message = 'cannot install %s: %s' % (RS4, done.stderr[-2000:])
                if in_ci():
                    pytest.fail(message)
                pytest.skip(message)
            with open(marker, 'w') as f:
                f.write(RS4)
    return python
