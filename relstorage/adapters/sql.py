"""The one way statements are composed from parts.

A statement's text is written once, with named slots in braces for what
differs between databases or uses: an identifier, a hint, a clause
(``SQL('SELECT {hint}zoid FROM {table} WHERE zoid = %s')``). Filling it
(``format``) gives plain text, built at import or when an adapter is
made wherever the parts are known then, and never per call on a hot
path. Every slot must be filled and no other name given, so a database
package filling a slot that the shared text no longer has fails at import
instead of silently matching nothing.

Values never go into the text: they stay ``%s`` parameters, which the
slots leave as they are. (One convention apart: a statement with an IN
list of values has ``IN %s`` in its text, which ``%`` fills with
``session.in_list``'s placeholders, one ``%s`` per value, per call.)
The helpers at the end turn parameters into the spelling a driver wants
(``?`` for sqlite3, ``$1`` for a server-side PREPARE).
"""
import functools
import re
import string

_FORMATTER = string.Formatter()

#: The SQL standard's identifier quote (PostgreSQL, SQLite, Oracle).
STANDARD_QUOTE = '"'


class Identifier:
    """A table (or other object) name, quoted by the database's mark when
    filled into a slot of a statement."""

    __slots__ = ('name',)

    def __init__(self, name):
        self.name = name

    def quoted(self, mark=STANDARD_QUOTE):
        """The name between *mark*s, a *mark* inside it doubled."""
        return mark + self.name.replace(mark, mark * 2) + mark

    def __repr__(self):
        return 'Identifier(%r)' % self.name


class SQL:
    """A statement with named ``{slots}``."""

    __slots__ = ('text', 'slots')

    def __init__(self, text):
        self.text = text
        self.slots = frozenset(
            name for _, name, _, _ in _FORMATTER.parse(text)
            if name is not None)

    def format(self, quote=STANDARD_QUOTE, **parts):
        """The text with each slot filled from *parts*: a str is SQL as
        given, an Identifier is quoted with *quote*, an SQL is its own
        text. Refused (ValueError) unless *parts* names exactly the
        slots."""
        if set(parts) != self.slots:
            raise ValueError('the slots of %r are %s, not %s' % (
                self.text, sorted(self.slots), sorted(parts)))
        return self.text.format(**{
            name: _text(part, quote) for name, part in parts.items()})

    def fill(self, quote=STANDARD_QUOTE, **parts):
        """The statement with the slots *parts* names filled, the others
        left for a later ``format`` (a part known only per call, say).
        Refused (ValueError) where *parts* names a slot it lacks."""
        unknown = set(parts) - self.slots
        if unknown:
            raise ValueError('the slots of %r are %s, not %s' % (
                self.text, sorted(self.slots), sorted(unknown)))
        filled = {name: _text(part, quote).replace('{', '{{')
                  .replace('}', '}}') for name, part in parts.items()}
        filled.update({name: '{%s}' % name
                       for name in self.slots - set(parts)})
        return SQL(self.text.format(**filled))

    def __repr__(self):
        return 'SQL(%r)' % self.text


class Rows:
    """A statement whose ``{rows}`` slot holds one *group* per row (the
    row's ``%s`` parameters: a VALUES list, OR-ed key ranges) joined by
    *separator*; its other slots are filled from *parts* when it is made.
    ``text(count)`` is the statement for *count* rows (the counts asked
    most often are kept)."""

    __slots__ = ('head', 'tail', 'group', 'separator', 'text')

    _MARK = '\x00'

    def __init__(self, sql, group, separator=', ', quote=STANDARD_QUOTE,
                 **parts):
        self.head, self.tail = sql.format(
            quote, rows=self._MARK, **parts).split(self._MARK)
        self.group, self.separator = group, separator
        self.text = functools.lru_cache(maxsize=64)(self._text)

    def _text(self, count):
        return (self.head + self.separator.join([self.group] * count)
                + self.tail)

    def __repr__(self):
        return 'Rows(%r)' % (self.head + '{rows}' + self.tail)


def script(*statements):
    """*statements* sent as one message, run in order (what a session
    reads back comes from the last)."""
    return '; '.join(statements)


#: Statements every database spells alike, for the tables of its schema.
EMPTY_TABLE = SQL('DELETE FROM {table}')
DROP_TABLE = SQL('DROP TABLE IF EXISTS {table}')


def _text(part, quote):
    if isinstance(part, Identifier):
        return part.quoted(quote)
    if isinstance(part, SQL):
        return part.text
    return part


def listed(names, quote=STANDARD_QUOTE):
    """``a, b, c``: the identifiers *names*, quoted, for a slot."""
    return ', '.join(Identifier(name).quoted(quote) for name in names)


# Parameters as drivers spell them

def qmark(stmt):
    """*stmt* with each ``%s`` parameter written ``?`` (sqlite3's
    paramstyle)."""
    return stmt.replace('%s', '?')


def numbered(stmt):
    """*stmt* with its ``%s`` parameters written ``$1``, ``$2``... (a
    PostgreSQL PREPARE)."""
    pieces = stmt.split('%s')
    return pieces[0] + ''.join('$%d%s' % (number, piece) for number, piece
                               in enumerate(pieces[1:], 1))


def without_parameters(script):
    """*script*, taking no parameters, as text for a driver that reads
    ``%`` as the start of one (each ``%`` doubled)."""
    return script.replace('%', '%%')


_ORACLE_PLACEHOLDER = re.compile(r'%s|%%|\bLIMIT (%s|\d+)')
#: The standard spelling of LIMIT (Oracle 12c and later).
FETCH_FIRST = SQL('FETCH FIRST {rows} ROWS ONLY')


@functools.lru_cache(maxsize=4096)
def named_binds(stmt):
    """*stmt* as Oracle reads it: each ``%s`` becomes a bind ``:p1``,
    ``:p2``... (positional ``:1`` binds are legal Oracle too, but named
    ones read the same to every tool), ``%%`` a ``%``, and ``LIMIT n``
    FETCH_FIRST. Values are still bound by position."""
    count = 0

    def replace(match):
        nonlocal count
        text = match.group(0)
        if text == '%%':
            return '%'
        limit = match.group(1)
        if text == '%s' or limit == '%s':
            count += 1
            bind = ':p%d' % count
            return bind if limit is None else FETCH_FIRST.format(rows=bind)
        return FETCH_FIRST.format(rows=limit)
    return _ORACLE_PLACEHOLDER.sub(replace, stmt)
