"""RelStorage 4.3 from PyPI in a virtualenv of its own, for the tests that
compare with it (kept between runs in ``$TMPDIR/relstorage-rs4``, never in
the checkout): made on first use, reused while its marker says it holds
the same requirement."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

from .dbs import in_ci

CACHE = os.path.join(tempfile.gettempdir(), 'relstorage-rs4')
VENV = os.path.join(CACHE, 'venv')
RS4 = 'RelStorage[postgresql,mysql]==4.3.0'
_venv_lock = threading.Lock()


def rs4_python():
    """The Python of a virtualenv holding RelStorage 4.3 and nothing of
    this project (a test that cannot have it fails in CI, else skips)."""
    python = os.path.join(VENV, 'bin', 'python')
    with _venv_lock:
        marker = os.path.join(VENV, '.rs4-installed')
        if not os.path.exists(marker) or open(marker).read() != RS4:
            shutil.rmtree(VENV, ignore_errors=True)
            os.makedirs(CACHE, exist_ok=True)
            base = getattr(sys, '_base_executable', sys.executable)
            subprocess.run([base, '-m', 'venv', VENV], check=True,
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

