"""Passwords from a command (``password-command``), run for each new
connection: managed databases hand out passwords that expire (RDS and
Aurora IAM tokens, Vault's dynamic credentials). The command's output is
a secret: it is never logged nor shown; an error names only the
command's program."""
import shlex
import subprocess

from ..exceptions import ConfigurationError
from ..exceptions import DatabaseUnavailable

#: Seconds a password command may take.
TIMEOUT = 30


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


def run_password_command(command, timeout=TIMEOUT):
    """The password *command* prints (its output, the line end removed);
    DatabaseUnavailable when it cannot be run, fails or prints none."""
    argv = command_argv(command)
    what = 'password-command %s' % argv[0]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)
    except OSError as e:
        raise DatabaseUnavailable('%s could not be run: %s'
                                  % (what, e.strerror or e)) from None
    except subprocess.TimeoutExpired:
        raise DatabaseUnavailable('%s printed no password within %s s'
                                  % (what, timeout)) from None
    if done.returncode:
        said = done.stderr.decode('utf-8', 'replace').strip().splitlines()
        raise DatabaseUnavailable('%s exited with status %d%s' % (
            what, done.returncode, ': ' + said[-1][:200] if said else ''))
    password = done.stdout.decode('utf-8', 'replace').rstrip('\r\n')
    if not password:
        raise DatabaseUnavailable('%s printed no password' % what)
    return password
