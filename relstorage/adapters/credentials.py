"""Passwords from a command (``password-command``), run for each new
connection: managed databases hand out passwords that expire (RDS and
Aurora IAM tokens, Vault's dynamic credentials). The command's output is
a secret: it is never logged nor shown. Its standard error may hold the
secret too (a command that echoes what it fetched), so it is discarded,
never read. An error names only the command's program and what went
wrong (status, time, size)."""
import os
import selectors
import shlex
import signal
import subprocess
import time

from ..exceptions import ConfigurationError
from ..exceptions import DatabaseUnavailable

#: Seconds a password command may take.
TIMEOUT = 30

#: Bytes a password command may print (IAM tokens are ~2 KiB).
MAX_OUTPUT = 64 << 10


def command_argv(command):
    """The argument list of *command* (split as a shell would, without a
    shell: write ``sh -c '...'`` for pipes)."""
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise ConfigurationError('password-command: %s' % e) from None
    if not argv:
        raise ConfigurationError('password-command: empty')
    return argv


def _kill_group(process):
    """End *process* and everything it started (its own session, so its
    own process group), and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # pragma: no cover -- all gone already
        pass
    process.wait()


def _read_bounded(process, deadline):
    """The bytes *process* prints before it closes its output; None when
    *deadline* passes first, and ``MAX_OUTPUT + 1`` bytes at most."""
    out = bytearray()
    fd = process.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while len(out) <= MAX_OUTPUT:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return None
            chunk = os.read(fd, MAX_OUTPUT + 1 - len(out))
            if not chunk:
                break
            out += chunk
    return bytes(out)


def _run(argv, what, timeout):
    """The output of *argv*, which exited with status 0."""
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        raise DatabaseUnavailable('%s could not be run: %s'
                                  % (what, e.strerror or e)) from None
    problem = None
    with process.stdout:
        deadline = time.monotonic() + timeout
        out = _read_bounded(process, deadline)
        if out is None:
            problem = 'printed no password within %s s' % timeout
        elif len(out) > MAX_OUTPUT:
            problem = 'printed more than %d KiB' % (MAX_OUTPUT >> 10)
        else:
            try:
                process.wait(max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                problem = 'did not exit within %s s' % timeout
        if problem is not None:
            _kill_group(process)
            raise DatabaseUnavailable('%s %s' % (what, problem))
    if process.returncode < 0:
        raise DatabaseUnavailable('%s was ended by signal %d'
                                  % (what, -process.returncode))
    if process.returncode:
        raise DatabaseUnavailable('%s exited with status %d'
                                  % (what, process.returncode))
    return out


def run_password_command(command, timeout=TIMEOUT):
    """The password *command* prints (its output, the line end removed);
    DatabaseUnavailable when it cannot be run, fails, takes longer than
    *timeout* seconds (then it and every process it started are
    killed), or prints none, too much or a NUL byte."""
    argv = command_argv(command)
    what = 'password-command %s' % argv[0]
    out = _run(argv, what, timeout)
    if b'\0' in out:
        raise DatabaseUnavailable('%s printed a NUL byte, which no '
                                  'password can hold' % what)
    password = out.decode('utf-8', 'replace').rstrip('\r\n')
    if not password:
        raise DatabaseUnavailable('%s printed no password' % what)
    return password
