"""Keeping passwords out of what the storage says.

What names a server in a message is the adapter's ``describe(server)``,
which never holds a password. Text that comes from elsewhere (a driver's
error, which may quote the connection string it could not parse) goes
through :func:`scrub` with the secrets of the parameters it was made
from, before it is put into a message or a log.
"""
import re
from urllib.parse import unquote

#: What replaces a secret, or a quoted fragment that overlaps one.
HIDDEN = '***'

#: A quoted fragment of a driver's message ("..." or '...').
_QUOTED = re.compile(r'"[^"\n]*"|\'[^\'\n]*\'')

#: Fragments of a secret shorter than this are not looked for on their
#: own (the whole secret always is): they would blank out ordinary words.
_SHORTEST_PART = 3


def _parts(secrets):
    """Each secret, and each of its words, longest first."""
    parts = set()
    for secret in secrets:
        parts.add(secret)
        parts.update(word for word in re.split(r'[\s\'"]+', secret)
                     if len(word) >= _SHORTEST_PART)
    return sorted(parts, key=len, reverse=True)


def scrub(text, secrets):
    """*text* (a driver's message, say) without any of *secrets*: each
    quoted fragment that holds a secret, a word of one or is part of one
    becomes ``"***"``, and what is left of them elsewhere ``***``."""
    text = str(text)
    secrets = [str(secret) for secret in secrets if secret]
    parts = _parts(secrets)
    if not parts:
        return text

    def quoted(match):
        inner = match.group(0)[1:-1]
        if inner and (any(part in inner for part in parts)
                      or (len(inner) >= _SHORTEST_PART
                          and any(inner in secret for secret in secrets))):
            quote = match.group(0)[0]
            return quote + HIDDEN + quote
        return match.group(0)
    text = _QUOTED.sub(quoted, text)
    for part in parts:
        text = text.replace(part, HIDDEN)
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
