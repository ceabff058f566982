"""Reading libpq connection strings without ever showing a password."""


def parse_dsn(dsn):
    """``{keyword: value}`` of a libpq key=value connection string."""
    try:
        from psycopg2.extensions import parse_dsn as libpq_parse
    except ImportError:  # pragma: no cover
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
    """``dbname=app host=127.0.0.1 port=5432 user=app`` (no password)."""
    params = parse_dsn(dsn or '')
    shown = []
    for key in ('dbname', 'host', 'port', 'user'):
        if key in params:
            shown.append('%s=%s' % (key, params[key]))
    if 'host' not in params:
        shown.append('host=<libpq default>')
    return ' '.join(shown)
