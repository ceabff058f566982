"""``password-command`` run for real: sh scripts written to a temporary
directory, and the errors they give (one line, naming the command's
program, never what it printed on either stream)."""
import os
import select
import signal
import textwrap

import pytest

from relstorage.adapters.credentials import run_password_command
from relstorage.config import storage_from_string
from relstorage.exceptions import DatabaseUnavailable
from relstorage.testing.dbs import pg_dsn

#: The bound a password command's output has (64 KiB).
MAX_OUTPUT = 64 << 10
SECRET = 'Sekr1t-from-the-vault'


def _script(tmp_path, body, name='fetch-password'):
    path = tmp_path / name
    path.write_text('#!/bin/sh\n' + textwrap.dedent(body))
    path.chmod(0o700)
    return str(path)


def _refused(command, **kw):
    with pytest.raises(DatabaseUnavailable) as exc:
        run_password_command(command, **kw)
    message = str(exc.value)
    assert '\n' not in message
    assert message.startswith('password-command ')
    assert SECRET not in message
    return message


def test_a_good_command_gives_its_first_line(tmp_path):
    command = _script(tmp_path, 'echo %s\n' % SECRET)
    assert run_password_command(command) == SECRET


def test_stderr_of_a_failing_command_is_not_shown(tmp_path):
    command = _script(tmp_path, '''\
        echo "fetched %s but the lease expired" >&2
        exit 3
        ''' % SECRET)
    message = _refused(command)
    assert message == 'password-command %s exited with status 3' % command
    assert 'lease' not in message


def test_output_is_bounded(tmp_path):
    # A megabyte of output: refused once 64 KiB are read.
    command = _script(tmp_path, '''\
        head -c 1048576 /dev/zero | tr '\\0' x
        ''')
    message = _refused(command)
    assert message == ('password-command %s printed more than %d KiB'
                       % (command, MAX_OUTPUT >> 10))
    # Just at the bound: accepted.
    exact = _script(tmp_path, "head -c %d /dev/zero | tr '\\0' y\n"
                    % MAX_OUTPUT, name='exact')
    assert run_password_command(exact) == 'y' * MAX_OUTPUT


def _ended(pid):
    """Whether process *pid* has ended (waits for it, bounded)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        # Readable once it has exited; the bound only keeps a failing
        # test from hanging.
        return bool(select.select([fd], [], [], 60)[0])
    finally:
        os.close(fd)


def test_timeout_kills_what_the_command_started(tmp_path):
    pidfile = tmp_path / 'child.pid'
    # A child that keeps none of the command's streams open, and lives on
    # when only the command itself is killed.
    command = _script(tmp_path, '''\
        sleep 300 </dev/null >/dev/null 2>&1 &
        echo $! > %s
        exec sleep 300
        ''' % pidfile)
    try:
        message = _refused(command, timeout=1)
        assert message == ('password-command %s printed no password '
                           'within 1 s' % command)
        child = int(pidfile.read_text())
        assert _ended(child)
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_command_that_closes_its_output_but_runs_on(tmp_path):
    command = _script(tmp_path, '''\
        echo %s
        exec >&-
        exec sleep 300
        ''' % SECRET)
    message = _refused(command, timeout=1)
    assert message == 'password-command %s did not exit within 1 s' % command


def test_a_nul_byte_is_a_clear_error(tmp_path):
    command = _script(tmp_path, "printf 'Sekr1t\\000-from-the-vault\\n'\n")
    message = _refused(command)
    assert message == ('password-command %s printed a NUL byte, which no '
                       'password can hold' % command)
    assert 'Sekr1t' not in message


def test_a_nul_byte_when_a_storage_connects(tmp_path):
    """Through the storage: the same error, not the driver's ValueError."""
    command = _script(tmp_path, "printf 'Sekr1t\\000'\n")
    text = textwrap.dedent('''\
        %%import relstorage
        <relstorage>
          <postgresql>
            dsn %s
            password-command %s
          </postgresql>
        </relstorage>
        ''') % (pg_dsn(True), command)
    with pytest.raises(DatabaseUnavailable) as exc:
        storage_from_string(text)
    assert 'printed a NUL byte' in str(exc.value)
    assert 'Sekr1t' not in str(exc.value)
