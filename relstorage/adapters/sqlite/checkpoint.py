"""The WAL of an SQLite database copied back, and started again, by a
thread of each process rather than inside commits (see Checkpointer)."""
import fcntl
import logging
import os
import sqlite3
import threading
import time

log = logging.getLogger(__name__)

#: Locked by a checkpoint that restarts the WAL (see Checkpointer).
GATE_FILE = 'checkpoint.lock'


def retry(attempt, busy, wait, first_pause, max_pause):
    """Call *attempt* until it returns without raising *busy*, pausing
    between tries *first_pause* seconds, doubled each time up to
    *max_pause*; once *wait* seconds have passed since the first failure
    the error goes out. (A lock taken by trying again in short pauses,
    not in SQLite's busy handler, which sleeps up to 100 ms.)"""
    deadline = None
    pause = first_pause
    while True:
        try:
            return attempt()
        except busy:
            now = time.monotonic()
            if deadline is None:
                deadline = now + wait
            elif now >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, max_pause)


class Checkpointer:
    """Copies the WAL back into the database file in a thread of its own.

    SQLite's automatic checkpoint runs inside the COMMIT that takes the WAL
    past 1,000 pages: that commit waits for the copy and the fsync of the
    database file. Store sessions turn it off; instead, once the commits
    of this process have written about as much (their states and a little
    per row and per commit), this thread runs a passive checkpoint, which
    waits for nobody and blocks nobody: readers and the next writer go on
    meanwhile.

    A passive checkpoint copies the WAL back, but the WAL starts again
    from its beginning only when a writer begins after a checkpoint that
    copied all of it while no reader holds an older snapshot. With
    writers in several processes that moment may never come (a
    checkpoint runs while another process writes, and some transaction
    always reads), and the WAL grew by every commit, to hundreds of
    megabytes. So once it has grown past ``restart_at`` thresholds the
    thread runs a restarting checkpoint, which holds off writers while
    the readers of older snapshots finish (a transaction ends its
    snapshot at vote, before it waits to become the writer), so that the
    next writer starts the WAL again.

    That checkpoint waits for the writer lock in SQLite's busy handler,
    which sleeps between tries while writers that try again every
    millisecond keep taking the lock before it. So it first closes a
    gate, an exclusive lock on a file beside the database, which the
    writers of every process pass before they try to become the writer
    (a shared lock taken and dropped: two system calls). It waits at most
    ``restart_wait`` seconds for the writer and as long for readers; one
    that times out (a long reader) is tried again after a growing pause,
    so that a long reader does not keep writers waiting again and
    again."""

    #: Bytes written to the WAL between checkpoints (about SQLite's
    #: default of 1,000 pages).
    threshold = 4 * 1024 * 1024
    #: Bytes counted per commit and per row on top of the states.
    commit_bytes = 4096
    row_bytes = 64
    #: WAL size, in thresholds, past which a checkpoint restarts it.
    restart_at = 4
    #: Seconds a restarting checkpoint waits for the writer, and then
    #: for the readers of older snapshots.
    restart_wait = 0.25
    #: The longest pause after restarts that timed out, in seconds: a
    #: reader that lasts (a pack's pre-pack reads at one snapshot) holds
    #: writers off for restart_wait at most once a minute, or once per
    #: restart_at thresholds written, whichever is more often.
    max_backoff = 60.0
    #: Pause between tries for the gate, in seconds.
    gate_pause = 0.0005

    def __init__(self, path, timeout):
        self.path = path
        self.gate_path = os.path.join(os.path.dirname(path), GATE_FILE)
        self.timeout = timeout
        #: Checkpoints run (by the thread), and those that restarted the
        #: WAL, or tried to and could not.
        self.checkpoints = self.in_thread = 0
        self.restarts = self.restarts_failed = 0
        self._written = 0
        self._backoff = 0.0
        self._next_restart = 0.0
        #: The WAL size at which a restart is tried again, pause or not.
        self._retry_bytes = 0
        self._conn = None
        #: The gate's descriptors: the writers' and the thread's (two
        #: open files, so that their locks exclude each other).
        self._gates = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None
        self._closed = False
        self._pid = os.getpid()

    def _forked(self):
        """In a forked child: the parent's thread is not here, its lock
        may be held forever, and its connection and gate descriptors are
        not to be used (nor closed: kept aside)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._inherited = self._conn, self._gates
        self._conn = None
        self._gates = {}
        self._thread = None

    def _gate(self, who):
        """The gate file opened for *who*, or None where it cannot be
        (then nobody waits at it)."""
        fd = self._gates.get(who)
        if fd is None:
            try:
                fd = os.open(self.gate_path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:
                log.debug('cannot open %s', self.gate_path, exc_info=True)
                fd = -1
            kept = self._gates.setdefault(who, fd)
            if kept != fd and fd >= 0:
                os.close(fd)  # another thread opened it meanwhile
            fd = kept
        return fd if fd >= 0 else None

    def _through_gate(self, fd, mode, wait):
        """Take the gate's lock in *mode* within *wait* seconds."""
        try:
            retry(lambda: fcntl.flock(fd, mode | fcntl.LOCK_NB),
                  BlockingIOError, wait, self.gate_pause, self.gate_pause)
        except OSError:  # still locked at the deadline, or no lock here
            return False
        return True

    def wait_for_restart(self):
        """Called before a writer tries to become the writer: it waits
        while a restarting checkpoint (of any process) holds the gate,
        at most as long as that one can take."""
        if self._pid != os.getpid():
            self._forked()
        fd = self._gate('writers')
        if fd is not None and self._through_gate(
                fd, fcntl.LOCK_SH, 3 * self.restart_wait):
            fcntl.flock(fd, fcntl.LOCK_UN)

    def committed(self, nbytes):
        """A commit wrote about *nbytes* (states and rows) to the WAL."""
        if self._pid != os.getpid():
            self._forked()
        self._written += nbytes + self.commit_bytes
        if self._written < self.threshold or self._closed:
            return
        self._written = 0
        thread = self._thread
        if thread is None or not thread.is_alive():
            self._wake = threading.Event()
            thread = self._thread = threading.Thread(
                target=self._run, args=(self._wake,),
                name='relstorage-sqlite-checkpoint', daemon=True)
            thread.start()
        self._wake.set()

    def _checkpoint(self):
        with self._lock:
            if self._closed:
                return False
            try:
                if self._conn is None:
                    # The busy timeout bounds only a restarting
                    # checkpoint's waits: a passive one never waits.
                    self._conn = sqlite3.connect(
                        self.path, timeout=self.restart_wait,
                        isolation_level=None, check_same_thread=False)
                conn = self._conn
                wal = conn.execute(
                    'PRAGMA wal_checkpoint(PASSIVE)').fetchone()[1]
                self.checkpoints += 1
                wal_bytes = wal * conn.execute(
                    'PRAGMA page_size').fetchone()[0]
                if wal_bytes > self.restart_at * self.threshold and (
                        time.monotonic() >= self._next_restart
                        or wal_bytes >= self._retry_bytes):
                    self._restart(conn, wal_bytes)
            except sqlite3.Error:
                # The next one copies what this one could not.
                log.debug('checkpoint of %s failed', self.path,
                          exc_info=True)
                return False
            return True

    def _restart(self, conn, wal_bytes):
        fd = self._gate('thread')
        if fd is not None and not self._through_gate(
                fd, fcntl.LOCK_EX, self.restart_wait):
            # Another process's restarting checkpoint holds it.
            self.restarts_failed += 1
            return
        try:
            busy, wal, _ = conn.execute(
                'PRAGMA wal_checkpoint(RESTART)').fetchone()
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
        if not busy:
            self.restarts += 1
            self._backoff = 0.0
            self._retry_bytes = 0
            return
        self.restarts_failed += 1
        if wal < 0:
            # Another checkpoint was running (SQLite does not wait for
            # one): this one is tried again at the next wake.
            return
        # A reader kept its older snapshot past restart_wait -- or a
        # writer its lock, on a busy machine, which the pause would
        # wrongly wait out while commits fill the WAL: the next try
        # comes after the pause, or once the WAL has grown by as much
        # again, whichever is first (so that a long reader holds writers
        # off for restart_wait at most once per that much written).
        self._backoff = min(max(self._backoff * 2, self.restart_wait),
                            self.max_backoff)
        self._next_restart = time.monotonic() + self._backoff
        self._retry_bytes = wal_bytes + self.restart_at * self.threshold

    def _run(self, wake):
        while True:
            wake.wait()
            wake.clear()
            if self._closed:
                return
            if self._checkpoint():
                self.in_thread += 1

    def close(self):
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            for fd in self._gates.values():
                if fd >= 0:
                    os.close(fd)
            self._gates = {}
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._wake.set()
            thread.join(self.timeout)
