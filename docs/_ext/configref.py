"""``.. relstorage-keys:: SECTION``: the table of every key of one
configuration section (``relstorage``, ``postgresql``, ``mysql``,
``oracle``, ``sqlite3``, ``pragmas``) with its type, default and
meaning, made when the documentation is built from what the code reads
(``relstorage.configdoc``: component.xml and relstorage.options), so that
it cannot say something else. A key without a meaning is a build error.
"""
import re

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.errors import ExtensionError

from relstorage import configdoc

_SPECIAL = re.compile(r'([\\`*|_\[\]<>])')


def _escaped(text):
    """*text* with every character reStructuredText would read as markup
    escaped."""
    return _SPECIAL.sub(r'\\\1', text)


def table_lines(section):
    """The ``list-table`` of *section*'s keys, as lines of RST."""
    keys = [k for k in configdoc.keys() if k.section == section]
    if not keys:
        raise ExtensionError('relstorage-keys: no section %r' % section)
    missing = configdoc.undocumented()
    if missing:
        raise ExtensionError('keys without a meaning: %s' % ', '.join(missing))
    lines = ['.. list-table::', '   :header-rows: 1',
             '   :widths: 20 15 10 55', '',
             '   * - key', '     - type', '     - default', '     - meaning']
    for key in keys:
        lines += ['   * - ``%s``' % key.name,
                  '     - %s' % _escaped(key.type),
                  '     - %s' % _escaped(key.default),
                  '     - %s' % _escaped(key.meaning)]
    return lines


class RelStorageKeys(Directive):
    required_arguments = 1
    has_content = False

    def run(self):
        content = StringList(table_lines(self.arguments[0]),
                             source='relstorage.configdoc')
        container = nodes.container()
        self.state.nested_parse(content, self.content_offset, container)
        return container.children


def setup(app):
    app.add_directive('relstorage-keys', RelStorageKeys)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
