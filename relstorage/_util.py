"""Small helpers shared by the storage and the adapters (and so owned by
neither)."""
import itertools


def chunks(seq, size=500):
    """Lists of at most *size* of the items of *seq*, in order. A
    collection is copied first (its owner may change it meanwhile); an
    iterator is taken a list at a time, never whole."""
    items = iter(list(seq) if hasattr(seq, '__len__') else seq)
    while True:
        part = list(itertools.islice(items, size))
        if not part:
            return
        yield part
