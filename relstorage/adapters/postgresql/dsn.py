"""Reading libpq connection strings without ever showing a password."""
import getpass
import os
import re

from ..redact import scrub
from ..redact import uri_secrets

#: libpq keywords whose values are secrets.
SECRET_KEYWORDS = ('password', 'sslpassword')
#: libpq's TLS keywords, taken in a postgres:// URI's query as they are.
TLS_KEYWORDS = ('sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'sslcrl',
                'sslcrldir', 'sslpassword', 'sslsni', 'sslcompression',
                'sslcertmode', 'sslnegotiation', 'ssl_min_protocol_version',
                'ssl_max_protocol_version', 'requiressl')
#: RelStorage 4's postgres:// query arguments -> libpq keywords.
RELSTORAGE4_KEYWORDS = {'ssl_mode': 'sslmode',
                        'connect_timeout': 'connect_timeout'}
#: Where a secret keyword's value begins in a key=value string.
_SECRET_VALUE = re.compile(
    r'(?:^|\s)(?:%s)\s*=\s*' % '|'.join(SECRET_KEYWORDS), re.IGNORECASE)
#: The next ``keyword=`` after an unquoted value.
_NEXT_KEYWORD = re.compile(r'\s+\w+\s*=')
#: A quoted value: up to the closing quote that no backslash escapes.
_QUOTED_VALUE = re.compile(r"'((?:[^'\\]|\\.)*)'?", re.DOTALL)


def parse_dsn(dsn):
    """``{keyword: value}`` of a libpq key=value connection string."""
    try:
        from psycopg2.extensions import parse_dsn as libpq_parse
    except ImportError:  # pragma: no cover -- psycopg 3 only
        try:
            from psycopg.conninfo import conninfo_to_dict as libpq_parse
        except ImportError:
            libpq_parse = None
    if libpq_parse is not None:
        try:
            return libpq_parse(dsn)
        except Exception:  # noqa: BLE001 -- fall back to a plain split
            pass
    result = {}
    for part in dsn.split():
        key, _, value = part.partition('=')
        result[key] = value.strip("'")
    return result


def describe_dsn(dsn):
    """``dbname=app host=127.0.0.1 port=5432 user=app`` (no password),
    and the ``sslmode`` where *dsn* sets one. What *dsn* leaves out is
    shown as libpq fills it in, and said where each value came from:
    ``(not in the DSN: port from PGPORT; host is libpq's default)``; a
    value the DSN gives is not remarked on."""
    params = parse_dsn(dsn or '')
    sources = {}
    host, port, dbname = dsn_location(dsn, sources)
    shown = ['dbname=%s' % dbname, 'host=%s' % host, 'port=%s' % port]
    shown.extend('%s=%s' % (key, params[key]) for key in ('user', 'sslmode')
                 if key in params)
    said = ['%s from %s' % (key, source) for key, source in sources.items()
            if source not in ('dsn', None)]
    defaulted = [key for key, source in sources.items() if source is None]
    if defaulted:
        said.append('%s %s' % (', '.join(defaulted), "is libpq's default"
                               if len(defaulted) == 1
                               else "are libpq's defaults"))
    if said:
        shown.append('(not in the DSN: %s%s)' % ('; '.join(said), (
            '; service=%s may set them' % params['service'])
            if params.get('service') else ''))
    return ' '.join(shown)


def dsn_location(dsn, sources=None):
    """``(host, port, dbname)`` that *dsn* connects to, with libpq's
    defaults (PGHOST, PGPORT, PGDATABASE, PGUSER, the login name) for
    what it leaves out. *sources*, a dict, is told where each of
    ``dbname``, ``host`` and ``port`` came from: ``'dsn'``, the
    environment variable's name, or None for libpq's own default."""
    params = parse_dsn(dsn or '')
    # Read only to describe the target as libpq will (see test_layers):
    # the connection itself is left to libpq, which reads them anyway.
    env = os.environ
    if sources is None:
        sources = {}

    def get(key, var, default, said=None):
        if params.get(key):
            sources[said or key] = 'dsn'
            return params[key]
        if env.get(var):
            sources[said or key] = var
            return env[var]
        sources[said or key] = None
        return default
    user = params.get('user') or env.get('PGUSER') or getpass.getuser()
    dbname = get('dbname', 'PGDATABASE', user)
    host = get('host', 'PGHOST', None) or get(
        'hostaddr', 'PGHOSTADDR', '<local socket>', said='host')
    port = str(get('port', 'PGPORT', '5432'))
    return host, port, dbname


def make_dsn(params):
    """A libpq connection string of ``{keyword: value}``, each value
    quoted."""
    def quote(value):
        return "'%s'" % str(value).replace('\\', '\\\\').replace("'", "\\'")
    return ' '.join('%s=%s' % (key, quote(value))
                    for key, value in params.items())


def dsn_secrets(dsn):
    """The passwords in the libpq connection string (or URI) *dsn*, also
    when libpq cannot parse it: a quoted value as written and unescaped;
    an unquoted one up to the next ``keyword=``, spaces and all (libpq
    would take its first word and complain about the rest, quoting it)."""
    text = str(dsn or '')
    params = parse_dsn(text)
    found = {str(params[key]) for key in SECRET_KEYWORDS if params.get(key)}
    if '://' in text.split('=', 1)[0]:
        found.update(uri_secrets(text))
        return found
    for match in _SECRET_VALUE.finditer(text):
        rest = text[match.end():]
        if rest.startswith("'"):
            value = _QUOTED_VALUE.match(rest).group(1)
            found.update((value, re.sub(r'\\(.)', r'\1', value)))
        else:
            following = _NEXT_KEYWORD.search(rest)
            found.add((rest[:following.start()] if following
                       else rest).strip())
    return {secret for secret in found if secret}


def scrub_dsn(text, *dsns):
    """*text* (libpq's message about a connection string, say) without
    the passwords of *dsns*."""
    secrets = set()
    for dsn in dsns:
        secrets.update(dsn_secrets(dsn))
    return scrub(text, secrets)
