"""A least-recently-used mapping bounded by the bytes of the pickles it holds.

Values are ``(state, tid)`` pairs.  The size charged for one value is the
length of its state plus a fixed overhead, a rough stand-in for the dict
slot, the tuple and the key that come with every entry; without it a cache
full of tiny states would hold far more memory than its limit suggests.

The class does no locking of its own: :class:`~.storage_cache.StorageCache`
calls it under its lock, and reaches into :attr:`ByteLRU.data` directly on
the hit path so that a hit costs one dict lookup and one ``move_to_end``.
"""
from collections import OrderedDict

#: Bytes charged per entry on top of ``len(state)``.
ENTRY_OVERHEAD = 100


def entry_size(value):
    """The bytes charged for one ``(state, tid)`` value."""
    return len(value[0]) + ENTRY_OVERHEAD


class ByteLRU:
    """An ordered mapping, oldest first, kept under ``limit`` bytes.

    ``data`` is the underlying :class:`~collections.OrderedDict`; readers may
    use ``data.get`` and ``data.move_to_end`` themselves but must change it
    only through :meth:`put`, :meth:`pop` and :meth:`clear`, which keep
    :attr:`nbytes` true.
    """

    __slots__ = ('data', 'limit', 'nbytes', 'evictions')

    def __init__(self, limit):
        self.data = OrderedDict()
        self.limit = limit
        self.nbytes = 0
        self.evictions = 0

    def __len__(self):
        return len(self.data)

    def put(self, key, value):
        """Set ``key`` to ``value`` as the most recently used entry, then
        evict from the old end until the total is within the limit."""
        self.put_many(((key, value),))

    def put_many(self, items):
        """:meth:`put` each ``(key, value)`` of *items* in turn, evicting
        once, at the end: the newest entries that fit stay, which can be
        more than single puts leave (when an item shrinks one that came
        before it in *items*)."""
        # entry_size() written out: a call per item was a quarter of the
        # loop's time.
        data = self.data
        pop = data.pop
        nbytes = self.nbytes
        for key, value in items:
            old = pop(key, None)
            if old is not None:
                nbytes -= len(old[0]) + ENTRY_OVERHEAD
            data[key] = value
            nbytes += len(value[0]) + ENTRY_OVERHEAD
        limit = self.limit
        if nbytes > limit:
            evicted = 0
            popitem = data.popitem
            while nbytes > limit and data:
                _, gone = popitem(last=False)
                nbytes -= len(gone[0]) + ENTRY_OVERHEAD
                evicted += 1
            self.evictions += evicted
        self.nbytes = nbytes

    def pop(self, key):
        """Remove ``key`` if present; return its value or None."""
        old = self.data.pop(key, None)
        if old is not None:
            self.nbytes -= entry_size(old)
        return old

    def clear(self):
        self.data.clear()
        self.nbytes = 0
