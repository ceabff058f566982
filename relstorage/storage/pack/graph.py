"""The reference graph of a whole database, in bounded memory.

The pre-pack and ``zodbcheck`` read every current state once, in oid
order, and must then know which objects the root reaches. Holding a dict
of lists would cost hundreds of bytes per object; here the graph is three
flat arrays of integers, of 32 bits while the values fit (oids below
2**32: any database of fewer than four billion objects whose oids came
from new_oid), else of 64: each object costs 9 bytes plus 4 per reference
it holds (about 25 MB for 1,000,000 objects of 4 references each; twice
that with 64 bits), and no state is kept once its references are read;
following the references adds at most 8 bytes per object (see
positions()).
"""
from array import array
from bisect import bisect_left


def _extend(values, more):
    """*values* (an array) extended by *more*: itself, or a copy of
    64-bit integers when one of *more* does not fit its type."""
    count = len(values)
    try:
        values.extend(more)
        return values
    except OverflowError:
        del values[count:]  # what went in before the one that did not fit
        wide = array('q', values)
        wide.extend(more)
        return wide


class ReferenceGraph:
    """Objects added in increasing oid order, each with the oids it
    refers to."""

    def __init__(self):
        self.oids = array('I')   # every object added, sorted
        self.ends = array('I')   # where each object's references end
        self.refs = array('I')

    def add_page(self, oids, found):
        """Add *oids* (a list, in increasing order, after those added so
        far), each referring to the oids *found* lists for it: ``(oid,
        [oids])`` pairs in the same order, for those that refer to any."""
        if oids and self.oids and oids[0] <= self.oids[-1]:
            raise ValueError('oid %d added after %d: the graph takes '
                             'objects in increasing oid order'
                             % (oids[0], self.oids[-1]))
        end = len(self.refs)
        refs = []
        ends = []
        pending = iter(found)
        nxt = next(pending, None)
        for oid in oids:
            if nxt is not None and nxt[0] == oid:
                refs.extend(nxt[1])
                end += len(nxt[1])
                nxt = next(pending, None)
            ends.append(end)
        self.refs = _extend(self.refs, refs)
        self.oids = _extend(self.oids, oids)
        self.ends = _extend(self.ends, ends)

    @property
    def nbytes(self):
        """About how much memory the graph takes at most, reach()'s
        table of positions included (its arrays' items)."""
        return (len(self.oids) * (self.oids.itemsize + self.ends.itemsize
                                  + 8)
                + len(self.refs) * self.refs.itemsize)

    def pairs(self):
        """Every ``(oid, oid it refers to)``, in order."""
        oids, refs, ends = self.oids, self.refs, self.ends
        start = 0
        for i, end in enumerate(ends):
            oid = oids[i]
            for j in range(start, end):
                yield oid, refs[j]
            start = end

    def __len__(self):
        return len(self.oids)

    def index(self, oid):
        """The position of *oid*, or -1 when it was not added."""
        oids = self.oids
        i = bisect_left(oids, oid)
        return i if i < len(oids) and oids[i] == oid else -1

    def positions(self):
        """When the oids are dense (the largest below twice their number,
        as in a database whose oids came from new_oid): a table of the
        position of each oid up to the largest (-1: not added), of at
        most 8 bytes per object. Else None."""
        oids = self.oids
        count = len(oids)
        if not count or oids[0] < 0 or oids[-1] >= 2 * count \
                or count >= 2 ** 31:
            return None
        where = array('i', [-1]) * (oids[-1] + 1)
        for i, oid in enumerate(oids):
            where[oid] = i
        return where

    def reach(self, roots, missing=None):
        """A bytearray, one byte per object, set for every object that
        *roots* reach (roots that were not added are ignored). For each
        reference of a reached object to an oid that was not added,
        ``missing(referring_oid, oid)`` is called, if given."""
        oids, refs, ends = self.oids, self.refs, self.ends
        where = self.positions()
        if where is None:
            index = self.index
        else:
            # Looked up in place below: a call per reference was a
            # third of the walk.
            size = len(where)

            def index(oid):
                return where[oid] if 0 <= oid < size else -1
        reached = bytearray(len(oids))
        # An array, not a list: a wide graph (a mapping of millions of
        # objects) puts that many positions on it at once.
        todo = array('q', [i for i in map(index, roots) if i >= 0])
        for i in todo:
            reached[i] = 1
        pop = todo.pop
        push = todo.append
        while todo:
            i = pop()
            start = ends[i - 1] if i else 0
            end = ends[i]
            if start == end:
                continue  # most objects refer to none
            for ref in refs[start:end]:
                if where is not None:
                    j = where[ref] if 0 <= ref < size else -1
                else:
                    j = index(ref)
                if j < 0:
                    if missing is not None:
                        missing(oids[i], ref)
                elif not reached[j]:
                    reached[j] = 1
                    push(j)
        return reached

    def unreached(self, reached):
        """The oids whose byte in *reached* is not set, in oid order."""
        i = reached.find(0)
        while i >= 0:
            yield self.oids[i]
            i = reached.find(0, i + 1)
