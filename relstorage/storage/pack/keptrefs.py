"""The references a pack keeps for the next one.

Unpickling every state current at the pack time is most of a pre-pack's
work, yet from one nightly pack to the next most objects do not change.
So each pre-pack keeps what it read: the oids each object refers to, with
the tid of the revision they were read from (the state_refs table, see
relstorage.adapters.schema). The pages of the next pre-pack bring, with
each state, what was kept for its object; where that was read from the
very revision the page holds, the state is not unpickled again. The
others are (by the worker processes, see workers), and what they refer
to is kept in place of what was kept from an older revision.

Kept references are used only with ZODB's own reference finder and when
packing one database on its own (packing several together needs each
object's references into the other databases too, which are not kept).

Kept references that were wrong would have the pack remove live objects,
so none is trusted unverified: the bytes kept are the oids (8 bytes each,
big-endian, in increasing order) and the first 16 bytes of the SHA-256
digest of the state they were read from followed by those oids. Bytes
damaged in the table, or a state changed in place (by hand, keeping its
tid), fail the check: that state is unpickled again and its references
kept anew. (A check against damage and mistakes, not against someone who
can write the tables: they can remove anything anyway.) PostgreSQL and
MySQL make the check themselves (``sha256()``, ``SHA2()``), so that the
states of the objects whose kept references serve never travel: such a
row comes with an empty state (which no real state is) when the pages
are read checked (see IPackReads.states_at), on PostgreSQL without its
tids and with its kept bytes only when they hold an oid; this process
checks the others.
"""
import hashlib
import struct

#: The digest's length, at the end of the kept bytes.
DIGEST = 16
_sha256 = hashlib.sha256
#: Unpacks n oids, by n (the formats of small counts made once).
_OIDS = [struct.Struct('>%dQ' % n) for n in range(64)]


def _oids(count):
    return _OIDS[count] if count < len(_OIDS) else struct.Struct(
        '>%dQ' % count)


def _digest(state, body):
    """What the kept bytes *body* (the oids) end with, read from
    *state*."""
    digest = _sha256(state)
    digest.update(body)
    return digest.digest()[:DIGEST]


def encode(refs, state):
    """The bytes kept for *refs* (oids, in increasing order; None or
    empty for none) read from *state*."""
    if not refs:
        # Most objects: the digest of the state alone (one call, not
        # three: a first pack keeps the bytes of every object).
        return _sha256(state).digest()[:DIGEST]
    body = _oids(len(refs)).pack(*refs)
    return body + _digest(state, body)


def decode(kept, state, checked=False):
    """The oids kept in *kept* for *state*, or None unless they are whole
    oids read from that very state (see the module's docstring). With
    *checked*, an empty *state* means the database found them so."""
    size = len(kept) - DIGEST
    verified = checked and state == b''
    if size < 0 or size & 7:
        if verified:
            raise ValueError('kept references of %d bytes passed the '
                             "database's check" % len(kept))
        return None
    view = memoryview(kept)
    if not verified and (not state
                         or _digest(state, view[:size]) != view[size:]):
        return None
    return list(_oids(size >> 3).unpack_from(view)) if size else []


class KeptReferences:
    """Splits the pre-pack's pages (rows as Packer.states_at gives them)
    into the states to unpickle and the references kept, and puts them
    together again once the states are read. With *use* false, every
    state is unpickled and nothing is kept."""

    def __init__(self, use, checked=False):
        self.use = use
        #: Whether the pages are read checked (see decode).
        self.checked = checked
        #: id(page to read) -> (that page, the oids of the whole page,
        #: [(oid, refs)] kept, {oid: (tid, state)} of the states read to
        #: keep, the oids whose kept references are replaced)
        self.split = {}
        #: States unpickled (deletions are not), and states whose kept
        #: references served.
        self.read = self.reused = 0

    def to_read(self, pages):
        """For each page of rows from *pages*: the ``[(oid, state)]`` to
        unpickle (a list, perhaps empty, given to merged() once read)."""
        use, checked = self.use, self.checked
        for rows in pages:
            page = []
            kept_found = []
            tids = {}
            stale = []
            for oid, state, tid, kept_tid, kept in rows:
                if tid is None:
                    # A row the database checked, sent lean (see
                    # IPackReads.states_at): no tids, and the kept bytes
                    # only when they hold any oid.
                    if not (checked and state == b'' and kept_tid is None):
                        raise ValueError(
                            'a pre-pack row of object 0x%x came without '
                            'its tid unchecked' % oid)
                    if kept is not None:
                        refs = decode(kept, state, checked)
                        if refs:
                            kept_found.append((oid, refs))
                    continue
                if use and kept_tid is not None:
                    if kept_tid == tid:
                        refs = decode(kept, state, checked)
                        if refs is not None:
                            if refs:
                                kept_found.append((oid, refs))
                            continue
                    stale.append(oid)
                page.append((oid, state))
                if use and state:
                    tids[oid] = (tid, state)
            self.read += sum(1 for _, state in page if state)
            self.reused += len(rows) - len(page)
            self.split[id(page)] = (page, [row[0] for row in rows],
                                    kept_found, tids, stale)
            yield page

    def merged(self, page, found):
        """``(oids, found, keep, stale)`` of the whole page *page* was
        taken from, *found* (its states' references, in oid order, as
        page_references() gives them) joined with those kept: every oid
        of the page, in order; ``(oid, [oids it refers to])`` for each
        that refers to any, in oid order; the ``(oid, tid, bytes)`` to
        keep, and the oids whose kept references they replace."""
        page, oids, kept_found, tids, stale = self.split.pop(id(page))
        if kept_found:
            found = sorted(found + kept_found)
        if not tids:
            return oids, found, (), stale
        refs = dict(found).get
        keep = [(oid, tid, encode(refs(oid), state))
                for oid, (tid, state) in tids.items()]
        return oids, found, keep, stale
