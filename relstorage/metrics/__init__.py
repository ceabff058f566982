"""Prometheus metrics of a storage (``metrics true``).

The storage calls one object, its *recorder*, at the moments that matter:
a commit's phases, a conflict, a poll, a load that did not come from the
shared cache, a pack's progress. With ``metrics false`` (the default) that
object is :data:`NO_METRICS`, whose methods do nothing: prometheus_client
is not imported and nothing is registered. The busiest path, a load served
by the shared cache, never calls the recorder at all: the cache counts its
hits in plain integers anyway, and the metrics read them when scraped.

The metrics themselves, and how they reach prometheus_client's default
registry or its multiprocess directory, are in :mod:`.recorder`;
``relstorage-metrics`` (:mod:`.server`) serves them over HTTP.
"""


class _NoTiming:
    """The timing of a commit when nothing is recorded."""

    __slots__ = ()

    def vote_begins(self):
        pass

    def vote_ends(self):
        pass

    def lock_begins(self):
        pass

    def lock_ends(self):
        pass

    def finish_begins(self):
        pass

    def finish_ends(self):
        pass


NO_TIMING = _NoTiming()


class NoMetrics:
    """The recorder of a storage with ``metrics false``: every call is a
    no-op, chosen once when the storage opens."""

    enabled = False

    @staticmethod
    def clock():
        return 0.0

    def commit_timing(self):
        return NO_TIMING

    def conflict_resolved(self, oid, state):
        pass

    def conflict_raised(self, error, tpc):
        pass

    def read_conflict(self, error):
        pass

    def polled(self, started, oids):
        pass

    def loaded(self, source):
        pass

    def pack_examined(self, count):
        pass

    def pack_progress(self, objects, revisions, remaining):
        pass

    def pack_ended(self, seconds):
        pass

    def close(self):
        pass


NO_METRICS = NoMetrics()


def recorder_for(enabled, name, cache, adapter, blobs):
    """The recorder of a root storage that is opening: NO_METRICS unless
    *enabled* (the ``metrics`` option). *name* labels its series; its
    shared *cache*, *adapter* and blob helper *blobs* (or None) are read
    when the metrics are scraped."""
    if not enabled:
        return NO_METRICS
    try:
        from .recorder import Recorder
    except ImportError as e:
        from ..exceptions import ConfigurationError
        raise ConfigurationError(
            'metrics true needs prometheus_client (relstorage\'s metrics '
            'extra): %s' % e) from None
    return Recorder(name, cache, adapter, blobs)
