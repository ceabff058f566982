"""The oids a ZODB record refers to, read from its pickles; and the loop
of a pre-pack worker process (see relstorage.storage.refworkers).

Imports nothing but the standard library and zodbpickle, so that a
worker process is a small one (about 11 MB, against 23 with the storage
imported).
"""
import pickle
import struct
from io import BytesIO

from zodbpickle.pickle import Unpickler

_OID = struct.Struct('>Q')
_HEADER = struct.Struct('>Q')
READY = b'relstorage-refworker-ready'


def _oids(persistent_ids):
    """The oids of ordinary references among *persistent_ids*, as ZODB's
    referencesf takes them (weak and cross-database references are
    lists, and left out), as integers, each once, in order."""
    found = set()
    for ref in persistent_ids:
        if isinstance(ref, tuple):
            ref = ref[0]
        elif isinstance(ref, list):
            continue
        if isinstance(ref, str):
            ref = ref.encode('ascii')
        found.add(_OID.unpack(ref)[0])
    return sorted(found)


def _unpickler(stream, persistent_ids):
    reader = Unpickler(stream)
    reader.persistent_load = persistent_ids.append
    return reader


def state_references(state):
    """The oids (integers, each once, in order) that the record *state*
    (its class pickle, then its state pickle) refers to, as ZODB's
    referencesf finds them; an error if it does not unpickle."""
    persistent_ids = []
    reader = _unpickler(BytesIO(state), persistent_ids)
    reader.noload()
    reader.noload()
    return _oids(persistent_ids)


def page_references(page):
    """``(found, bad)`` for *page*, a list of ``(oid, state)``: *found*
    lists ``(oid, [oids it refers to])`` for each state that refers to
    any object, in order (the oids as state_references() gives them);
    *bad* is None, or the oid of a state that does not unpickle (*found*
    then stops before it).

    One unpickler reads the whole page (an unpickler per state costs
    twice as much); a state it cannot read, or that does not end where
    its length says, is read again on its own.
    """
    stream = BytesIO(b''.join([state for _, state in page if state]))
    found = []
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
            refs = _oids(persistent_ids) if persistent_ids else None
        except Exception:  # noqa: BLE001 -- read again on its own
            try:
                refs = state_references(state)
            except Exception:  # noqa: BLE001 -- the caller names it
                return found, oid
            stream.seek(end)
            reader = _unpickler(stream, persistent_ids)
            noload = reader.noload
        del persistent_ids[:]
        if refs:
            found.append((oid, refs))
    return found, None


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
