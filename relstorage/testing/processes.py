"""The process, port and directory handling of the private servers
(see ``private_servers``): free ports, pid files, the environment a
server runs in, and the exit handler that stops and deletes every server
this process started, or that a dead test process left behind.
"""
import atexit
import glob
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

#: The names of the private servers' directories under the temporary
#: directory start with this.
PREFIX = 'relstorage-private-'


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def tail(path, lines=30):
    """The last *lines* lines of the file *path* (a server's log)."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as e:
        return '(no log: %s)' % e
    text = data.decode('utf-8', 'replace').rstrip('\n').split('\n')
    return '\n'.join(text[-lines:])


def server_env(directory):
    """The environment a private server's programs run in, their
    temporary files in the server's own *directory*."""
    # Variables such as PGPORT, PGDATA or MYSQL_TCP_PORT must not steer a
    # private server anywhere; messages in English so that the log can be
    # searched ("Address already in use"). The run's TMPDIR (see
    # scripts/run_tmp.sh) may not be writable by the server's account:
    # mariadb-install-db, run as mysql, failed there.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('PG', 'MYSQL', 'MARIADB'))}
    env['LC_ALL'] = 'C'
    env['TMPDIR'] = directory
    return env


def alive(pid):
    """Whether process *pid* exists and is no zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's, but it exists
        return True
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return True


def read_pid(path):
    """The process id a pid file holds, or None."""
    try:
        with open(path) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def cmdline(pid):
    """Process *pid*'s command line ('' when it has gone)."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except OSError:
        return ''


#: Guards the registries of started servers (here, in private_servers
#: and in replica_pairs).
lock = threading.RLock()
#: Every server started by this process, for the exit handler.
_started = []
_exit_handler_registered = False


def sweep_leftovers():
    """Delete the private servers of test processes that died without
    their exit handler: killed, or ended with os._exit() as pytest-timeout
    does after a hung test.  A server is only signalled when its command
    line names its own directory, so nothing else is ever hit."""
    for parent in {'/tmp', tempfile.gettempdir()}:
        for path in glob.glob(os.path.join(parent, PREFIX + '*')):
            owner = read_pid(os.path.join(path, 'owner.pid'))
            if owner is None or owner == os.getpid() or alive(owner):
                continue
            for name, sig in (('data/postmaster.pid', signal.SIGQUIT),
                              ('mysqld.pid', signal.SIGKILL),
                              ('pgbouncer.pid', signal.SIGKILL)):
                pid = read_pid(os.path.join(path, name))
                if pid is None or not alive(pid) \
                        or path + '/' not in cmdline(pid):
                    continue
                try:
                    os.kill(pid, sig)
                    deadline = time.monotonic() + 10
                    while alive(pid) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            shutil.rmtree(path, ignore_errors=True)


def run_until_interrupted(message):
    """Print *message*, then wait for ^C or SIGTERM (a script that
    started servers for someone to try by hand)."""
    print(message)
    sys.stdout.flush()

    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def remember(server):
    """Have *server* removed at exit (and, the first time, register the
    exit handler and sweep what dead test processes left)."""
    global _exit_handler_registered
    with lock:
        if server not in _started:
            _started.append(server)
        if not _exit_handler_registered:
            atexit.register(remove_all)
            _exit_handler_registered = True
            try:
                sweep_leftovers()
            except Exception as e:  # noqa: BLE001 -- never stops a start
                sys.stderr.write('private_servers: sweeping leftovers '
                                 'failed: %s\n' % e)


def remove_all():
    """At exit: stop and delete every server this process started.  A
    forked child that exits through here leaves its parent's alone."""
    for server in reversed(_started):
        if server._owner != os.getpid():
            continue
        try:
            server.remove()
        except Exception as e:  # noqa: BLE001 -- go on with the others
            sys.stderr.write('private_servers: could not remove the %s server '
                             'in %s: %s\n' % (server.kind, server.dir, e))
