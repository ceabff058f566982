"""The reference graph of a whole database, in bounded memory.

The pre-pack and ``zodbcheck`` read every current state once, in oid
order, and must then know which objects the root reaches. Holding a dict
of lists would cost hundreds of bytes per object; here the graph is three
flat arrays of 64-bit integers: each object costs 17 bytes plus 8 per
reference it holds (about 50 MB for 1,000,000 objects of 4 references
each), and no state is kept once its references are read.
"""
from array import array
from bisect import bisect_left


class ReferenceGraph:
    """Objects added in increasing oid order, each with the oids it
    refers to."""

    def __init__(self):
        self.oids = array('q')   # every object added, sorted
        self.ends = array('q')   # where each object's references end
        self.refs = array('q')

    def add(self, oid, refs):
        self.oids.append(oid)
        self.refs.extend(refs)
        self.ends.append(len(self.refs))

    def __len__(self):
        return len(self.oids)

    def index(self, oid):
        """The position of *oid*, or -1 when it was not added."""
        oids = self.oids
        i = bisect_left(oids, oid)
        return i if i < len(oids) and oids[i] == oid else -1

    def reach(self, roots, missing=None):
        """A bytearray, one byte per object, set for every object that
        *roots* reach (roots that were not added are ignored). For each
        reference of a reached object to an oid that was not added,
        ``missing(referring_oid, oid)`` is called, if given."""
        oids, refs, ends = self.oids, self.refs, self.ends
        index = self.index
        reached = bytearray(len(oids))
        todo = [i for i in map(index, roots) if i >= 0]
        for i in todo:
            reached[i] = 1
        while todo:
            i = todo.pop()
            for ref in refs[ends[i - 1] if i else 0:ends[i]]:
                j = index(ref)
                if j < 0:
                    if missing is not None:
                        missing(oids[i], ref)
                elif not reached[j]:
                    reached[j] = 1
                    todo.append(j)
        return reached

    def unreached(self, reached):
        """The oids whose byte in *reached* is not set, in oid order."""
        i = reached.find(0)
        while i >= 0:
            yield self.oids[i]
            i = reached.find(0, i + 1)
