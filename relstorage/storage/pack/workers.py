"""Reading the references out of pages of states, here and in worker
processes.

The pre-pack unpickles every state current at the pack time, and
unpickling holds Python's GIL: on a large database it is most of the
pack. With more than one CPU, the pages go to worker processes while
this process reads the next pages and writes references to the
database. A worker is a Python running relstorage.pickledrefs's serve()
alone (nothing of the packing program runs again in it), given this
process's ``sys.path``. A worker that cannot start or that fails leaves
its pages to this process, with a warning; the pack goes on. So does
one that stops answering: a page it has not answered within
PAGE_TIMEOUT seconds gets it stopped (killed).

The ``pack-workers`` option, or ``zodbpack --workers N``
(pack_with_result's *workers*) for one run, sets how many workers (0:
none, every page is read here); by default as many as the CPUs this
process may use, at most MOST, and none with a single CPU. They start
only once the pre-pack has read START_AFTER states to unpickle, so a
small database never starts one, nor does a pack that finds most
references kept by the last one (see keptrefs). (On two CPUs beside
PostgreSQL, 9,000,000 states took 61 s with two workers, 80 s with one
sharing the pages with this process, and 90 s in this process alone.)
"""
import logging
import os
import queue
import subprocess
import sys
import threading
import time

from ...children import child_env
from ...pickledrefs import READY
from ...pickledrefs import page_references
from ...pickledrefs import receive
from ...pickledrefs import send

log = logging.getLogger(__name__)

#: States to unpickle the pre-pack reads before it starts workers (20
#: full pages: on a database whose references were mostly kept by the
#: last pack, pages hold few states to unpickle, read here).
START_AFTER = 20000
#: Most workers started by default.
MOST = 4
#: Seconds a worker may take to start before it is given up.
START_TIMEOUT = 60
#: Seconds a worker may take over one page (about 1,000 states: some
#: milliseconds) before it is stopped and its pages read here.
PAGE_TIMEOUT = 120
#: What a worker runs (-P: the working directory is not searched first).
_SERVE = ('import sys; from relstorage.pickledrefs import serve; '
          'serve(sys.stdin.buffer, sys.stdout.buffer)')


def default_count():
    """How many workers when pack-workers is not set: the CPUs this
    process may use (at most MOST; none with one CPU)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return min(cpus, MOST) if cpus > 1 else 0


class _Worker(threading.Thread):
    """One worker process and the thread here that feeds it, one page at
    a time, from the shared queue of pages."""

    def __init__(self, pages, done, closing, number):
        super().__init__(daemon=True,
                         name='relstorage-prepack-worker-%d' % number)
        self.pages = pages
        self.done = done
        self.closing = closing
        self.process = None
        #: When the page under way was sent (None: no page under way).
        self.busy_since = None
        #: Stopped for taking longer than PAGE_TIMEOUT over a page.
        self.hung = False

    def run(self):
        try:
            self.process = subprocess.Popen(
                [sys.executable, '-P', '-c', _SERVE],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                env=child_env())
            timer = threading.Timer(START_TIMEOUT, self.process.kill)
            timer.start()
            try:
                ready = receive(self.process.stdout)
            finally:
                timer.cancel()
            if ready != READY:
                raise EOFError('it said %r' % (ready,))
        except Exception as e:  # noqa: BLE001 -- reported, pages go back
            self.fail(e, None)
            return
        while True:
            page = self.pages.get()
            if page is None:
                return
            self.busy_since = time.monotonic()
            try:
                send(self.process.stdin, page)
                answer = receive(self.process.stdout)
            except Exception as e:  # noqa: BLE001 -- reported
                self.busy_since = None
                if self.hung:
                    e = TimeoutError('it did not answer within %s s; '
                                     'stopped' % PAGE_TIMEOUT)
                self.fail(e, page)
                return
            self.busy_since = None
            self.done.put((page, answer))

    def watch(self, now):
        """Kill the process if it has spent PAGE_TIMEOUT on a page (the
        thread's read then fails, and its pages come back here)."""
        since = self.busy_since
        if since is not None and now - since > PAGE_TIMEOUT:
            self.hung = True
            self.kill()

    def kill(self):
        try:
            self.process.kill()
        except OSError:  # gone already
            pass

    def fail(self, error, page):
        """Give *page*, and every page after it, back to the packing
        process unread."""
        if self.closing.is_set():
            return
        log.warning('a pre-pack worker process failed (%s: %s); the '
                    'packing process reads its pages itself',
                    type(error).__name__, error)
        if page is None:
            page = self.pages.get()
        while page is not None:
            self.done.put((page, None))
            page = self.pages.get()

    def stop(self):
        """End the process: at the end of its input, or killed."""
        process = self.process
        if process is None:
            return
        if self.busy_since is not None:
            # Its page is dropped; and closing the pipe would wait for a
            # write it may never take.
            self.kill()
        try:
            process.stdin.close()  # waits for a write under way
        except OSError:
            pass
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Workers:
    """Reads the references of pages of states: here (with *local*, which
    answers as page_references() does) until START_AFTER states have been
    read, then in *count* worker processes (None: default_count()),
    here again only for a worker that failed or stopped answering."""

    def __init__(self, count=None, local=page_references):
        self.count = default_count() if count is None else count
        self.local = local
        self.workers = []
        self.pages = queue.Queue(maxsize=max(self.count, 1))
        self.done = queue.Queue()
        self.closing = threading.Event()
        self.out = 0  # pages given to workers and not yet back
        self.started = 0  # worker processes started
        self.by_workers = 0  # pages workers read

    def start(self):
        for number in range(self.count):
            worker = _Worker(self.pages, self.done, self.closing, number)
            worker.start()
            self.workers.append(worker)
        self.started = self.count
        threading.Thread(target=self._watch, daemon=True,
                         name='relstorage-prepack-watchdog').start()

    def _watch(self):
        workers = list(self.workers)
        while not self.closing.wait(min(PAGE_TIMEOUT / 4, 5)):
            now = time.monotonic()
            for worker in workers:
                worker.watch(now)

    def read(self, pages):
        """``(page, found, bad, cross)`` for each page of *pages* (in
        any order), as page_references() gives them."""
        seen = 0
        for page in pages:
            if not page:  # all its references kept (see keptrefs)
                yield (page,) + self.local(page)
                continue
            seen += len(page)
            if seen >= START_AFTER and self.count and not self.started:
                self.start()
            if self.workers:
                yield from self.back(block=False)
                while True:
                    try:
                        self.pages.put(page, timeout=0.01)
                        break
                    except queue.Full:  # every worker is busy
                        yield from self.back(block=False)
                self.out += 1
                continue
            yield (page,) + self.local(page)
        yield from self.back(block=True)

    def read_in_order(self, pages):
        """read(), each page given back in the order *pages* gave it
        (those the workers finish early are held back until then)."""
        numbers = {}

        def numbered():
            for number, page in enumerate(pages):
                numbers[id(page)] = number
                yield page

        held = {}
        following = 0
        for result in self.read(numbered()):
            held[numbers.pop(id(result[0]))] = result
            while following in held:
                yield held.pop(following)
                following += 1

    def back(self, block):
        """The pages workers have finished (all of them if *block*)."""
        while self.out:
            try:
                page, answer = self.done.get(block=block)
            except queue.Empty:
                return
            self.out -= 1
            if answer is None:  # the worker failed
                answer = self.local(page)
            else:
                self.by_workers += 1
            yield (page,) + tuple(answer)

    def close(self):
        """Stop the workers; pages not yet read are dropped."""
        self.closing.set()
        while True:
            try:
                self.pages.get_nowait()
            except queue.Empty:
                break
        for _ in self.workers:
            try:
                self.pages.put_nowait(None)
            except queue.Full:  # a worker took another page meanwhile
                pass
        for worker in self.workers:
            worker.stop()
        for worker in self.workers:
            worker.join()
            if worker.process is not None:
                worker.process.stdout.close()
        self.workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

