"""The README's first command runs this demo; it must keep working."""
import os
import subprocess
import sys


def test_demo_two_processes_see_each_other(tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path),
               PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, '-m', 'relstorage.demo', '--rounds', '2'],
        env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "Demo succeeded" in out.stdout
    assert "alice finally sees all of bob's 2 commits" in out.stdout
    assert "bob   finally sees all of alice's 2 commits" in out.stdout
    # Beside its zope.conf, laid out as a Zope instance.
    instance = tmp_path / 'relstorage' / 'demo'
    assert (instance / 'etc' / 'zope.conf').exists()
    data_dir = instance / 'var' / 'relstorage' / 'demo'
    assert (data_dir / 'relstorage.sqlite3').exists()
    assert 'The database lives in %s\n' % data_dir in out.stdout
