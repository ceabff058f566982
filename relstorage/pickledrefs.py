"""The oids a ZODB record refers to, read from its pickles; and the loop
of a pre-pack worker process (see relstorage.storage.pack.workers).

Imports nothing but the standard library and zodbpickle, so that a
worker process is a small one (about 11 MB, against 23 with the storage
imported).
"""
import pickle
import re
import struct
from bisect import bisect_right
from itertools import accumulate
from io import BytesIO

from zodbpickle.pickle import Unpickler

_OID = struct.Struct('>Q')
_HEADER = struct.Struct('>Q')
READY = b'relstorage-refworker-ready'


#: The persistent ids of strong references to another database of a
#: multi-database: ``['m', (database, oid, class)]`` and ``['n',
#: (database, oid)]`` (a weak one, ``['w', (oid, database)]``, keeps
#: nothing alive).
CROSS_DATABASE = ('m', 'n')


def _oid(ref):
    if isinstance(ref, str):
        ref = ref.encode('ascii')
    return _OID.unpack(ref)[0]


def _oids(persistent_ids, cross=None):
    """The oids of ordinary references among *persistent_ids*, as ZODB's
    referencesf takes them (weak and cross-database references are
    lists, and left out), as integers, each once, in order. The
    ``(database name, oid)`` of each cross-database reference is added to
    the set *cross*, if given."""
    found = set()
    for ref in persistent_ids:
        if isinstance(ref, tuple):
            ref = ref[0]
        elif isinstance(ref, list):
            if cross is not None and ref and ref[0] in CROSS_DATABASE:
                cross.add((ref[1][0], _oid(ref[1][1])))
            continue
        found.add(_oid(ref))
    return sorted(found)


def cross_references(state):
    """The ``(database name, oid)`` of each cross-database reference of
    the record *state*, each once, in order."""
    cross = set()
    _oids(_persistent_ids(state), cross)
    return sorted(cross)


#: The first string of a cross-database persistent id, 'm' or 'n', as
#: the pickle protocols ZODB writes spell it: a str in protocol 3 (and
#: 4 and up), bytes in Python 2's protocol 1. Where none is found, the
#: state refers to no other database; where one is, its pickles are read
#: to tell. (One pattern of a literal prefix each: one alternation
#: costs three times as much, on every state of every commit.)
_CROSS_HINTS = tuple(re.compile(prefix + rb'[mn]') for prefix in (
    rb'X\x01\x00\x00\x00', rb'\x8c\x01', rb'U\x01'))


#: What each of _CROSS_HINTS has in it: a length of 1 (little-endian, in
#: one byte or four) before 'm' or 'n'. One scan for it over many states
#: at once costs a quarter of the three scans of each; binary oids hold
#: it too, so each place it is found is looked at (see _LENGTH_OPCODES).
_ANY_HINT = re.compile(rb'\x01(?:\x00\x00\x00)?[mn]')
#: The opcode before the length that makes a place a hint of
#: _CROSS_HINTS: by the length's size.
_LENGTH_OPCODES = {2: b'\x8cU', 5: b'X'}
#: The bytes of states scanned at once (their copy joined for the scan).
_SCAN_BYTES = 1 << 20


def any_refers_elsewhere(states):
    """Whether any of the record *states* (None for a deletion) refers
    to another database (see refers_elsewhere()): the states a commit
    writes are scanned together for the hints of _CROSS_HINTS, and only
    a state holding one is read on its own."""
    lot = [state for state in states if state]
    ends = list(accumulate(map(len, lot)))
    first = 0
    while first < len(lot):
        # At most _SCAN_BYTES joined at once (one state, if larger).
        last = max(bisect_right(ends, (ends[first - 1] if first else 0)
                                + _SCAN_BYTES), first + 1)
        if _lot_refers_elsewhere(lot[first:last]):
            return True
        first = last
    return False


def _lot_refers_elsewhere(lot):
    joined = b''.join(lot)
    ends = None
    position = 0
    while True:
        found = _ANY_HINT.search(joined, position)
        if found is None:
            return False
        at = found.start()
        position = at + 1
        if at == 0 or joined[at - 1] not in _LENGTH_OPCODES[
                found.end() - at]:
            continue  # the bytes of an oid, say
        if ends is None:
            ends = list(accumulate(map(len, lot)))
        index = bisect_right(ends, at)
        if refers_elsewhere(lot[index]):
            return True
        position = ends[index]  # that state is read: on after it


def refers_elsewhere(state):
    """Whether the record *state* holds a cross-database reference (see
    cross_references()); true also when it does not unpickle."""
    if not state or not any(hint.search(state) for hint in _CROSS_HINTS):
        return False
    try:
        return bool(cross_references(state))
    except Exception:  # noqa: BLE001 -- unreadable: assume it does
        return True


def _unpickler(stream, persistent_ids):
    reader = Unpickler(stream)
    reader.persistent_load = persistent_ids.append
    return reader


def _persistent_ids(state):
    """The persistent ids of the record *state* (its class pickle, then
    its state pickle); an error if it does not unpickle."""
    persistent_ids = []
    reader = _unpickler(BytesIO(state), persistent_ids)
    reader.noload()
    reader.noload()
    return persistent_ids


def state_references(state):
    """The oids (integers, each once, in order) that the record *state*
    refers to, as ZODB's referencesf finds them; an error if it does not
    unpickle."""
    return _oids(_persistent_ids(state))


def page_references(page):
    """``(found, bad, cross)`` for *page*, a list of ``(oid, state)``:
    *found* lists ``(oid, [oids it refers to])`` for each state that
    refers to any object, in order (the oids as state_references() gives
    them); *bad* is None, or the oid of a state that does not unpickle
    (*found* then stops before it); *cross* lists ``(oid, [(database
    name, oid)])`` for each state that refers to objects of other
    databases (see cross_references()), in order.

    One unpickler reads the whole page (an unpickler per state costs
    twice as much); a state it cannot read, or that does not end where
    its length says, is read again on its own.
    """
    stream = BytesIO(b''.join([state for _, state in page if state]))
    found = []
    cross = []
    other = set()  # the cross-database references of one state
    persistent_ids = []
    reader = _unpickler(stream, persistent_ids)
    noload = reader.noload
    tell = stream.tell
    end = 0
    for oid, state in page:
        if not state:
            continue
        end += len(state)
        try:
            noload()
            noload()
            if tell() != end:
                raise ValueError('the pickles end elsewhere')
            refs = _oids(persistent_ids, other) if persistent_ids else None
        except Exception:  # noqa: BLE001 -- read again on its own
            try:
                refs = _oids(_persistent_ids(state), other)
            except Exception:  # noqa: BLE001 -- the caller names it
                return found, oid, cross
            stream.seek(end)
            reader = _unpickler(stream, persistent_ids)
            noload = reader.noload
        del persistent_ids[:]
        if refs:
            found.append((oid, refs))
        if other:
            cross.append((oid, sorted(other)))
            other.clear()
    return found, None, cross


def send(stream, obj):
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def receive(stream):
    """The next object sent on *stream*; EOFError at its end."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError('the stream ended')
    size, = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError('the stream ended inside a message')
    return pickle.loads(data)


def serve(requests, replies):
    """A worker's loop: page_references() of each page received."""
    send(replies, READY)
    while True:
        try:
            page = receive(requests)
        except EOFError:
            return
        send(replies, page_references(page))
