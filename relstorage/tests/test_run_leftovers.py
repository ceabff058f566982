"""What the test command leaves in the temporary directory: nothing.
scripts/test.sh points TMPDIR at a directory of the run's own and
removes it when it ends, whether the run ends, fails or is stopped; the
SQLite data directories of the test support are removed when the process
that made them exits, even by a test that did not clean up."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_TMP = ROOT / 'scripts' / 'run_tmp.sh'

#: A stand-in for the test command: the run's temporary directory, and
#: in it what a run makes (pytest's basetemp, a mkdtemp() directory of a
#: child process); then the end given as $1 (``wait``: a command that
#: runs until stopped, as pytest would, which says when it runs).
RUN = textwrap.dedent('''\
    set -euo pipefail
    source "%s"
    run_tmp_begin
    echo "$TMPDIR"
    mkdir -p "$TMPDIR/pytest-of-$(id -un)/pytest-0/test_x0"
    "%s" -c 'import tempfile; print(tempfile.mkdtemp(prefix="rs4-blobs-"))'
    case "$1" in
        fail) false ;;
        wait) "%s" -c 'import time
    print("ready", flush=True)
    time.sleep(60)' ;;
        *) exit 0 ;;
    esac
''') % (RUN_TMP, sys.executable, sys.executable)


def _start(tmp_path, end):
    return subprocess.Popen(
        ['bash', '-c', RUN, 'run', end], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        env=dict(os.environ, TMPDIR=str(tmp_path)))


def _made(out, tmp_path):
    run_dir, made = out.splitlines()[:2]
    assert Path(run_dir).parent == tmp_path
    assert Path(made).parent == Path(run_dir)
    return run_dir


def test_the_run_directory_is_removed_at_the_end(tmp_path):
    for end in ('done', 'fail'):
        proc = _start(tmp_path, end)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == (0 if end == 'done' else 1)
        _made(out, tmp_path)
        assert list(tmp_path.iterdir()) == []


def test_the_run_directory_is_removed_when_stopped(tmp_path):
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = _start(tmp_path, 'wait')
        lines = [proc.stdout.readline() for _ in range(3)]
        assert lines[2] == 'ready\n'
        _made(''.join(lines), tmp_path)
        # As ^C (or a kill of the group) reaches the command and what it
        # runs.
        os.killpg(proc.pid, sig)
        proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig
        assert list(tmp_path.iterdir()) == []


def test_sqlite_data_directories_are_removed_at_exit(tmp_path):
    """A factory nobody cleaned up: its directories go at exit; the one a
    child process was given by its parent stays (the parent's)."""
    given = tmp_path / 'given'
    given.mkdir()
    code = textwrap.dedent('''\
        import sys
        from relstorage.testing.dbs import DatabaseFactory
        made = DatabaseFactory('sqlite', True)
        print(made.data_dir())
        print(made.data_dir('dst'))
        child = DatabaseFactory.in_child('sqlite', True, sys.argv[1])
        assert child.data_dir() == sys.argv[1]
        cleaned = DatabaseFactory('sqlite', False)
        print(cleaned.data_dir())
        cleaned.cleanup()
    ''')
    out = subprocess.run(
        [sys.executable, '-c', code, str(given)], capture_output=True,
        text=True, timeout=120, check=True,
        env=dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT)))
    paths = out.stdout.split()
    assert len(paths) == 3
    assert all(Path(p).parent == tmp_path for p in paths)
    assert sorted(tmp_path.iterdir()) == [given]
