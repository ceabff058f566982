"""Reading libpq connection strings without ever showing a password."""
import getpass
import os


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
    """``dbname=app host=127.0.0.1 port=5432 user=app`` (no password).
    What *dsn* leaves out is shown as libpq fills it in, and said so."""
    params = parse_dsn(dsn or '')
    host, port, dbname = dsn_location(dsn)
    shown = ['dbname=%s' % dbname, 'host=%s' % host, 'port=%s' % port]
    if 'user' in params:
        shown.append('user=%s' % params['user'])
    given = set(params)
    if 'hostaddr' in given:
        given.add('host')
    defaulted = [key for key in ('dbname', 'host', 'port')
                 if key not in given]
    if defaulted:
        shown.append('(%s: libpq defaults)' % ', '.join(defaulted))
    return ' '.join(shown)


def dsn_location(dsn):
    """``(host, port, dbname)`` that *dsn* connects to, with libpq's
    defaults (PGHOST, PGPORT, PGDATABASE, PGUSER, the login name) for
    what it leaves out."""
    params = parse_dsn(dsn or '')
    env = os.environ

    def get(key, var, default):
        return params.get(key) or env.get(var) or default
    user = get('user', 'PGUSER', None) or getpass.getuser()
    host = get('host', 'PGHOST', None) or get('hostaddr', 'PGHOSTADDR',
                                               '<local socket>')
    return (host, str(get('port', 'PGPORT', '5432')),
            get('dbname', 'PGDATABASE', user))


def make_dsn(params):
    """A libpq connection string of ``{keyword: value}``, each value
    quoted."""
    def quote(value):
        return "'%s'" % str(value).replace('\\', '\\\\').replace("'", "\\'")
    return ' '.join('%s=%s' % (key, quote(value))
                    for key, value in params.items())
