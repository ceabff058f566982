"""Keeping passwords out of what the storage says.

What names a server in a message is the adapter's ``describe(server)``,
which never holds a password. Text that comes from elsewhere (a driver's
error, which may quote the connection string it could not parse) goes
through :func:`scrub` with the secrets of the parameters it was made
from, before it is put into a message or a log.

A secret is hidden where it stands as a value, never inside the
server's words: a short password (``a``, ``ist``) must leave
``database`` and ``exist`` as they are.
"""
import re
from urllib.parse import unquote

#: What replaces a secret, or a quoted fragment that holds one.
HIDDEN = '***'

#: The quoted fragments of a driver's message ("..." and '...', which
#: may be inside the other).
_QUOTED = (re.compile(r'"[^"\n]*"'), re.compile(r"'[^'\n]*'"))

#: ``password=VALUE`` (libpq's keywords, a URI's query, mysqlclient's
#: ``passwd``), the value quoted or not: hidden whatever it is. (Not
#: ``password: YES``, which is MySQL telling that one was given.)
_KEYWORD_VALUE = re.compile(
    r'(?i)(?<![\w-])((?:ssl)?password|passwd|pwd)(\s*=\s*)'
    r'(\'(?:\\.|[^\'\\])*\'?|"(?:\\.|[^"\\])*"?|[^\s\'"&;,)]+)')

#: The password of a URI's ``user:password@``: hidden whatever it is.
_URI_PASSWORD = re.compile(
    r'(\b[a-zA-Z][\w+.-]*://[^\s/?#@:\'"]*:)([^\s/?#@\'"]*)(@)')

#: Secrets (or their words) shorter than this are hidden only as values
#: (quoted, after ``password=``, in a URI): as words of their own they
#: would blank out the server's ("a", "at", "is").
_SHORTEST_WORD = 3


def _words(secrets):
    """Each secret, and each word of one, longest first."""
    words = set()
    for secret in secrets:
        words.add(secret)
        words.update(word for word in re.split(r'[\s\'"]+', secret) if word)
    return sorted(words, key=len, reverse=True)


#: What may stand before and after a word of its own: a space, a quote,
#: a bracket, a separator, the start or end, or a full stop that ends a
#: sentence; not ``.``, ``-`` or ``_`` inside a word (``127.0.0.1``,
#: ``relstoragetest_hp``), nor a letter or digit.
_BEFORE = r'(?<![^\s"\'(\[{<,;:=&@/])'
_AFTER = r'(?=$|[\s"\')\]}>,;:=&@/?]|\.(?:\s|$))'


def _standing_alone(word):
    """A pattern of *word* where it is not part of a longer word."""
    return re.compile('%s%s%s' % (
        _BEFORE if re.match(r'[\w.-]', word[0]) else '', re.escape(word),
        _AFTER if re.match(r'[\w.-]', word[-1]) else ''))


def _hide_value(match):
    value = match.group(3)
    quote = value[0] if value[0] in '\'"' else ''
    return match.group(1) + match.group(2) + quote + HIDDEN + (
        quote if quote and len(value) > 1 and value[-1] == quote else '')


def scrub(text, secrets):
    """*text* (a driver's message, say) without any of *secrets* as a
    value: the value of each ``password=`` and the password of each URI
    become ``***``, and so does each quoted fragment that is a secret
    or a word of one, and each secret (or word of one) standing as a
    word of its own. Inside the server's own words (``database``,
    ``exist``) nothing changes."""
    text = _KEYWORD_VALUE.sub(_hide_value, str(text))
    text = _URI_PASSWORD.sub(r'\1%s\3' % HIDDEN, text)
    secrets = [str(secret) for secret in secrets if secret]
    words = _words(secrets)
    if not words:
        return text
    alone = [_standing_alone(word) for word in words
             if len(word) >= _SHORTEST_WORD]

    def quoted(match):
        if match.group(0)[1:-1] in words:
            quote = match.group(0)[0]
            return quote + HIDDEN + quote
        return match.group(0)
    for fragments in _QUOTED:
        text = fragments.sub(quoted, text)
    for pattern in alone:
        text = pattern.sub(HIDDEN, text)
    return text


def uri_secrets(uri):
    """The password of a URI's ``user:password@`` and of its
    ``password=`` (and ``sslpassword=``) query arguments, as written and
    percent-decoded; an empty set when it has none."""
    found = set()
    scheme, sep, rest = str(uri or '').partition('://')
    if not sep:
        return found
    # The user information ends at the last '@' before the query.
    authority = re.split(r'[?#]', rest, maxsplit=1)[0]
    userinfo = authority.rsplit('@', 1)[0] if '@' in authority else ''
    if ':' in userinfo:
        found.add(userinfo.split(':', 1)[1])
    query = rest.partition('?')[2]
    for pair in re.split(r'[&;]', query):
        key, _, value = pair.partition('=')
        if key.strip().lower() in ('password', 'sslpassword'):
            found.add(value)
    return {form for secret in found for form in (secret, unquote(secret))
            if form}


def redact_uri(uri):
    """*uri* with the password of its ``user:password@`` and of its
    query arguments replaced by ``***``."""
    return scrub(uri, uri_secrets(uri))
