"""Which class a stored object is, read from its record without importing
anything.

A ZODB record is two pickles: the first names the class (a global, or a
``(class, args)`` tuple, or in old records ``((module, name), args)``),
the second holds the state. Only the first is read, opcode by opcode,
as data: no module is imported and nothing is called, so a tool can
survey a database without the application's code.
"""
import pickletools

#: Opcodes that push a string (a module or class name in a header).
_STRINGS = frozenset((
    'SHORT_BINUNICODE', 'BINUNICODE', 'BINUNICODE8', 'UNICODE', 'STRING',
    'BINSTRING', 'SHORT_BINSTRING'))
_PROTO = b'\x80'
_GLOBAL = b'c'

#: What an object whose class is a persistent reference is listed as.
PERSISTENT_CLASS = '<persistent class>'


#: Class names by the bytes that spell them in a GLOBAL opcode (a
#: database has few classes and many objects of each).
_seen = {}


def _text(value):
    return value.decode('utf-8') if isinstance(value, bytes) else value


def class_name(record):
    """``module.name`` of the class named by *record*'s first pickle;
    ValueError when that pickle cannot be read (damaged, or cut short)."""
    # Nearly every record: PROTO n, then GLOBAL 'module\nname\n'.
    if record[:1] == _PROTO and record[2:3] == _GLOBAL:
        end = record.find(b'\n', 3)
        stop = record.find(b'\n', end + 1) if end > 0 else -1
        if stop > 0:
            key = record[3:stop]
            name = _seen.get(key)
            if name is None:
                try:
                    name = '%s.%s' % (record[3:end].decode('utf-8'),
                                      record[end + 1:stop].decode('utf-8'))
                except UnicodeDecodeError as e:
                    raise ValueError('class name is not text: %s'
                                     % e) from None
                if len(_seen) < 10000:
                    _seen[key] = name
            return name
    strings = []
    try:
        for op, arg, _pos in pickletools.genops(record):
            name = op.name
            if name == 'GLOBAL':
                module, _, cls = arg.partition(' ')
                return '%s.%s' % (module, cls)
            if name == 'STACK_GLOBAL' and len(strings) >= 2:
                return '%s.%s' % (strings[-2], strings[-1])
            if name in ('BINPERSID', 'PERSID') and not strings:
                return PERSISTENT_CLASS
            if name in _STRINGS:
                strings.append(_text(arg))
            if name == 'STOP':
                break
    except Exception as e:  # noqa: BLE001 -- whatever bad bytes raise
        raise ValueError('the record header does not unpickle (%s: %s)'
                         % (type(e).__name__, e)) from None
    if len(strings) >= 2:   # ((module, name), args)
        return '%s.%s' % (strings[0], strings[1])
    raise ValueError('the record header names no class')


#: Bytes of each state read to find its class.
HEADER_BYTES = 256
#: States per query.
PAGE = 2000


def class_statistics(session):
    """``{class name: [objects, bytes]}`` over the current objects seen by
    the load *session* (a snapshot), reading a page of state headers at a
    time. A header too long for HEADER_BYTES is read whole; one that does
    not unpickle counts as ``<damaged>``."""
    found = {}
    after = -1
    while True:
        page = session.object_headers(after, PAGE, HEADER_BYTES)
        if not page:
            return found
        for oid, size, head in page:
            if head is None:
                continue  # deleted
            try:
                name = class_name(head)
            except ValueError:
                name = '<damaged>'
                if len(head) >= HEADER_BYTES:  # maybe only cut short
                    try:
                        state = session.load_many([oid]).get(
                            oid, (None,))[0]
                        name = class_name(state or b'')
                    except Exception:  # noqa: BLE001 -- damaged after all
                        pass
            entry = found.get(name)
            if entry is None:
                entry = found[name] = [0, 0]
            entry[0] += 1
            entry[1] += size
        after = page[-1][0]
