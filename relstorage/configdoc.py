"""The configuration reference: every key of ``<relstorage>`` and of each
adapter section, with its type, default and meaning.

The keys and their meanings are read from ``component.xml`` (the schema
ZConfig parses with), the types and defaults of the ``<relstorage>`` keys
from ``relstorage.options`` (the only defaults there are), so the
reference the documentation prints (``docs/_ext/configref.py``) says
what the code does. A key accepted from RelStorage 4 and ignored carries
its reason from ``options.IGNORED``. ``undocumented()`` names every key
without a meaning; a test keeps it empty.
"""
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from relstorage.config import _ADAPTER_KEY_TYPES
from relstorage.config import _TEXT_TYPES
from relstorage.options import IGNORED
from relstorage.options import IGNORED_SQLITE_KEYS
from relstorage.options import NOT_YET_SUPPORTED
from relstorage.options import OPTIONS
from relstorage.options import UNUSED

COMPONENT = os.path.join(os.path.dirname(__file__), 'component.xml')

#: The sections, in the order the reference lists them.
SECTIONS = ('relstorage', 'postgresql', 'mysql', 'oracle', 'sqlite3',
            'pragmas')

#: How each Options kind is described (its ZConfig spelling when plainer).
_KIND_NAMES = {
    'bool': 'boolean',
    'int': 'integer',
    'bytes': 'byte-size (16kb, 1gb)',
    'float': 'number',
    'number': 'number',
    'str': 'string',
    'strings': 'strings, separated by spaces',
}


@dataclass(frozen=True)
class Key:
    """One key of one section."""
    section: str
    name: str
    type: str
    default: str
    meaning: str


def _text(element):
    """The description of *element*, on one line ('' when it has none)."""
    found = element.find('description')
    if found is None or not found.text:
        return ''
    return ' '.join(found.text.split())


def _default(spec):
    if spec.default is None:
        return 'unset'
    if isinstance(spec.default, bool):
        return 'true' if spec.default else 'false'
    return str(spec.default)


def _option_key(name, spec, meaning):
    kind = _KIND_NAMES.get(spec.kind)
    if spec.kind == 'choice':
        kind = 'one of ' + ', '.join(spec.choices)
    reason = UNUSED.get(spec.name)
    if reason:
        meaning += ' Has no effect here (a warning says so): %s.' % reason
    if spec.name in NOT_YET_SUPPORTED:
        meaning += (' Not supported yet: any value but the default refuses '
                    'to open, naming the option.')
    return Key('relstorage', name, kind, _default(spec), meaning)


def _ignored_key(section, name, datatype):
    reason = IGNORED.get(name) or IGNORED_SQLITE_KEYS.get(name)
    if not reason:
        return None
    return Key(section, name, datatype,
               'unset', 'Accepted from RelStorage 4 configurations and '
               'ignored, with a warning: %s.' % reason)


def _plain_type(datatype):
    """ZConfig's name of the datatype component.xml gives a key."""
    if datatype.startswith('.checked.'):
        attr = datatype[len('.checked.'):]
        if attr in _ADAPTER_KEY_TYPES:
            return _ADAPTER_KEY_TYPES[attr]
        kind = _SPECS[attr].kind
        return _TEXT_TYPES.get(kind) or _KIND_NAMES[kind]
    return datatype


_SPECS = {spec.attr: spec for spec in OPTIONS}


def _section_keys(sectiontype):
    section = sectiontype.get('name')
    keys = []
    for element in sectiontype.findall('key'):
        name = element.get('name')
        if name == '+':
            keys.append(Key(section, 'NAME VALUE', 'any number of lines',
                            'none', _text(sectiontype)))
            continue
        meaning = _text(element)
        spec = _SPECS.get(name.replace('-', '_'))
        datatype = _plain_type(element.get('datatype', 'string'))
        if section == 'relstorage' and spec is not None and meaning:
            keys.append(_option_key(name, spec, meaning))
            continue
        ignored = None if meaning else _ignored_key(section, name, datatype)
        if ignored is not None:
            keys.append(ignored)
            continue
        if name in IGNORED_SQLITE_KEYS:
            meaning += (' Otherwise it is ignored, with a warning: %s.'
                        % IGNORED_SQLITE_KEYS[name])
        default = 'auto' if name == 'driver' else 'unset'
        keys.append(Key(section, name, datatype, default, meaning))
    return keys


def _parse():
    return ET.parse(COMPONENT).getroot()


def keys():
    """Every key of every section, in SECTIONS order, then as
    component.xml lists them."""
    by_section = {t.get('name'): _section_keys(t)
                  for t in _parse().findall('sectiontype')}
    unknown = set(by_section) - set(SECTIONS)
    if unknown:
        raise ValueError('sections missing from configdoc.SECTIONS: %s'
                         % sorted(unknown))
    return [key for name in SECTIONS for key in by_section[name]]


def undocumented():
    """``section/key`` of every key without a meaning or a type."""
    return ['%s/%s' % (k.section, k.name) for k in keys()
            if not k.meaning.strip() or not k.type]
