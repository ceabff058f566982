"""The pre-pack's reading and writing threads: the pages of states come
from the database one page ahead (read_pages), and the references found
go back to it in lots (ReferenceWriter), while the packing process (and
its workers) reads the references of the pages between.
"""
import logging
import queue
import threading

log = logging.getLogger(__name__)

#: States read per pre-pack query.
PAGE = 1000
#: References written to the database at a time by the pre-pack.
REFS_WRITTEN = 20000


def read_pages(session, pack_tid, deleted=None, checked=False):
    """The states current at *pack_tid*, a page at a time in oid order
    (as IPackReads.states_at gives them, *checked* or not), read on
    *session* by a thread
    of its own one page ahead: the database finds the next page while
    this process reads the references of the last one."""
    pages = queue.Queue(maxsize=1)
    stopping = threading.Event()

    def read():
        after = -1  # the root is oid 0
        try:
            while not stopping.is_set():
                page = session.states_at(pack_tid, after, PAGE, deleted,
                                         checked)
                pages.put(page)
                if not page:
                    return
                after = page[-1][0]
        except BaseException as e:  # noqa: BLE001 -- raised below
            pages.put(e)

    reader = threading.Thread(target=read, daemon=True,
                              name='relstorage-prepack-reader')
    reader.start()
    try:
        while True:
            page = pages.get()
            if isinstance(page, BaseException):
                raise page
            if not page:
                return
            yield page
    finally:
        stopping.set()
        while reader.is_alive():  # let a waiting put() end
            try:
                pages.get(timeout=0.05)
            except queue.Empty:
                pass
        reader.join()


class ReferenceWriter(threading.Thread):
    """Adds the pre-pack's references to pack_ref, on *writer*, and those
    kept for the next pack to state_refs, on a session of its own (a
    pack keeper from *open_keeper*, once there is any to keep), in a
    thread of its own, so that the database takes one lot in while the
    next pages are read. A context manager: on leaving, the thread has ended (and its
    error, if any, is raised unless another is on its way)."""

    def __init__(self, writer, open_keeper):
        super().__init__(daemon=True, name='relstorage-prepack-writer')
        self.writer = writer
        self.open_keeper = open_keeper
        self.keeper = None
        self.lots = queue.Queue(maxsize=1)
        self.error = None
        #: Kept references waiting for a lot of REFS_WRITTEN: rows and
        #: the oids whose kept references they replace.
        self.keeping = []
        self.stale = []

    def run(self):
        while True:
            lot = self.lots.get()
            if lot is None:
                return
            if self.error is None:
                write, args = lot
                try:
                    write(*args)
                except BaseException as e:  # noqa: BLE001 -- raised there
                    self.error = e

    def _put(self, write, *args):
        if self.error is not None:
            raise self.error
        self.lots.put((write, args))

    def add(self, pairs):
        self._put(self.writer.add_references, pairs)

    def keep(self, rows, stale, flush=False):
        self.keeping.extend(rows)
        self.stale.extend(stale)
        if (self.keeping or self.stale) and (
                flush or len(self.keeping) >= REFS_WRITTEN):
            self._put(self._keep, self.keeping, self.stale)
            self.keeping = []
            self.stale = []

    def _keep(self, rows, stale):
        if self.keeper is False:
            return
        try:
            if self.keeper is None:
                self.keeper = self.open_keeper()
            self.keeper.keep_references(rows, stale)
        except Exception as e:  # noqa: BLE001 -- reported, the pack goes on
            # Kept references only spare later packs some work: without
            # them this one is as right (the states are read again).
            log.warning('keeping the references the pre-pack read failed '
                        '(%s: %s); the pack goes on, and the next one '
                        'reads those states again', type(e).__name__, e)
            if self.keeper is not None:
                self.keeper.close()
            self.keeper = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, kind, value, traceback):
        self.lots.put(None)
        self.join()
        if self.keeper:
            self.keeper.close()
        if kind is None and self.error is not None:
            raise self.error
