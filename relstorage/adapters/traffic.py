"""What an adapter's sessions sent the database: round trips (messages
the driver sent and waited for the answer of) and statements (a message
may carry several), by the kind of work they were sent for.

Each session counts what it sends in plain integers, under the lock it
holds for every statement anyway; an adapter's Traffic adds up those of
its open sessions and keeps the sums of those closed, so that its
figures never go back; the process's figures (process_totals) add up
those of every adapter, open or closed. Read by the metrics
(``relstorage_round_trips``, ``relstorage_statements``) and by
``RelStorage.traffic()``.
"""
import threading

#: The kinds of work, as a session's ``kind`` names them: loading object
#: states (and anything else a snapshot reads: history, iteration), polling
#: for other processes' commits, the vote (locking rows, reading what
#: conflicts, uploading states and blobs), the commit proper (the tid,
#: moving the rows into place, COMMIT), the pack, and everything else
#: (making the schema ready, allocating oids, tools).
KINDS = ('load', 'poll', 'store', 'commit', 'pack', 'other')


def new_counts():
    """``{kind: [round trips, statements]}``, all 0."""
    return {kind: [0, 0] for kind in KINDS}


def added(into, counts):
    """*into* with *counts* added (both as new_counts())."""
    for kind, (trips, statements) in counts.items():
        total = into[kind]
        total[0] += trips
        total[1] += statements
    return into


def as_figures(counts):
    """``{kind: {'round_trips': n, 'statements': n}}`` of *counts*."""
    return {kind: {'round_trips': trips, 'statements': statements}
            for kind, (trips, statements) in counts.items()}


_process_lock = threading.Lock()
#: The Traffic of every adapter not closed yet, and the sums of those
#: closed.
_live = set()
_retired = new_counts()


def process_totals():
    """``{kind: [round trips, statements]}`` of every adapter of this
    process, open or closed."""
    with _process_lock:
        live = list(_live)
        totals = added(new_counts(), _retired)
    for traffic in live:
        added(totals, traffic.totals())
    return totals


class Traffic:
    """The counts of every session of one adapter."""

    def __init__(self):
        self._lock = threading.Lock()
        #: id -> the counts of a session still open.
        self._open = {}
        self._closed = new_counts()
        with _process_lock:
            _live.add(self)

    def retire(self):
        """The adapter closed: its figures stay in the process's."""
        with _process_lock:
            if self in _live:
                _live.discard(self)
                added(_retired, self.totals())

    def opened(self):
        """The counts a new session keeps (see Session.sent)."""
        counts = new_counts()
        with self._lock:
            self._open[id(counts)] = counts
        return counts

    def closed(self, counts):
        """A session's *counts*, which no longer change."""
        with self._lock:
            if self._open.pop(id(counts), None) is not None:
                added(self._closed, counts)

    def figures(self):
        """totals() as ``{kind: {'round_trips': n, 'statements': n}}``."""
        return as_figures(self.totals())

    def totals(self):
        """``{kind: [round trips, statements]}`` of every session, open
        or closed."""
        with self._lock:
            totals = added(new_counts(), self._closed)
            for counts in self._open.values():
                added(totals, counts)
        return totals
