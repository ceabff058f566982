"""No password in anything the storage says.

Every message and repr that can name a server is driven here, on every
database, with a password in each form a site can write it (libpq
key=value strings quoted, unquoted and with a space, libpq URIs, replica
lines, MySQL ``passwd``, Oracle ``user/password@``, zodburi URIs), and
the password must not appear in any log record (all loggers, DEBUG), in
any exception (its text, repr and chain of causes and contexts) or in a
console tool's output.

Error paths use ports nothing listens on; what needs a server that takes
the password uses the run's private servers (private_servers), where a
password of the test's own can be set.
"""
import logging
import subprocess
import traceback

import pytest
import ZODB
import ZODB.config
import zodburi
from persistent.mapping import PersistentMapping
from ZODB.POSException import ReadConflictError

from relstorage.adapters import replicas
from relstorage.children import python_command
from relstorage.exceptions import ConfigurationError
from relstorage.exceptions import DatabaseDisconnected
from relstorage.exceptions import DatabaseUnavailable
from relstorage.options import Options
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import child_env
from relstorage.testing.dbs import require_private_server
from relstorage.testing.processes import free_port as closed_port

pytestmark = pytest.mark.timeout(300)

#: The password, in two words: libpq cuts an unquoted password at a space
#: and quotes the rest in its error.
FIRST, SECOND = 'Hunter2', 'Zq7Secret'
SECRET = FIRST + SECOND
SPACED = FIRST + ' ' + SECOND
#: A MariaDB account of the private server that has SECRET as password.
MYSQL_USER = 'rs_pw_app'


def assert_hidden(*texts):
    for text in texts:
        found = [part for part in (FIRST, SECOND) if part in str(text)]
        assert not found, 'the password shows (%s) in: %s' % (found, text)


def assert_hidden_in(exc, seen=None):
    """The password is nowhere in *exc*, its traceback, or any exception
    it was raised from or while handling (shown or not)."""
    seen = set() if seen is None else seen
    seen.add(id(exc))
    assert_hidden(str(exc), repr(exc),
                  ''.join(traceback.format_exception(exc)))
    for linked in (exc.__cause__, exc.__context__):
        if linked is not None and id(linked) not in seen:
            assert_hidden_in(linked, seen)


@pytest.fixture(autouse=True)
def logs(caplog):
    """Every record of every logger, formatted with its traceback, is
    checked after the test."""
    caplog.set_level(logging.DEBUG)
    yield caplog
    formatter = logging.Formatter('%(name)s %(levelname)s %(message)s')
    for record in caplog.records:
        assert_hidden(formatter.format(record))


def said(caplog, words):
    """The log messages holding *words* (to show a message was driven)."""
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


server_of = require_private_server


def _open(section):
    return ZODB.config.storageFromString(
        '%import relstorage\n<relstorage>\n' + section + '\n</relstorage>')


def _commit(db, key, value):
    with db.transaction() as conn:
        conn.root()[key] = PersistentMapping(v=value)


# PostgreSQL connection strings

#: (dsn, what opening it gives, or may give); NNNNN is a closed port.
PG_DSNS = [
    ("host=127.0.0.1 port=NNNNN dbname=x user=app password=%s" % SECRET,
     DatabaseUnavailable),
    ("host=127.0.0.1 port=NNNNN dbname=x user=app password='%s'" % SPACED,
     DatabaseUnavailable),
    (r"host=127.0.0.1 port=NNNNN dbname=x password='it\'s %s' user=app"
     % SPACED, DatabaseUnavailable),
    # Unquoted with a space: libpq refuses it, quoting the second half.
    ("host=127.0.0.1 port=NNNNN dbname=x user=app password=%s" % SPACED,
     ConfigurationError),
    ("password=%s host=127.0.0.1 port=NNNNN dbname=x" % SPACED,
     ConfigurationError),
    ("host=127.0.0.1 port=NNNNN password = %s dbname=x" % SPACED,
     ConfigurationError),
    ("host=127.0.0.1 port=NNNNN sslpassword=%s password=%s" % (
        SECRET, SECRET), DatabaseUnavailable),
    ("postgresql://app:%s@127.0.0.1:NNNNN/x" % SECRET, DatabaseUnavailable),
    ("postgres://app:%s@127.0.0.1:NNNNN/x" % SPACED.replace(' ', '%20'),
     DatabaseUnavailable),
    # An unencoded space: newer libpq refuses the URI, quoting the
    # password; older takes it.
    ("postgresql://app:%s@127.0.0.1:NNNNN/x" % SPACED,
     (ConfigurationError, DatabaseUnavailable)),
    ("postgresql://app@127.0.0.1:NNNNN/x?password=%s" % SECRET,
     DatabaseUnavailable),
    ("postgresql://app@127.0.0.1:NNNNN/x?password=%s&no_such_keyword=1"
     % SECRET, ConfigurationError),
    ("postgresql://app:%s@[::1:NNNNN/x" % SECRET, ConfigurationError),
]


@pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])
@pytest.mark.parametrize('dsn,outcome', PG_DSNS)
def test_postgresql_dsn(driver, dsn, outcome):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    outcomes = outcome if isinstance(outcome, tuple) else (outcome,)
    port = closed_port()
    dsn = dsn.replace('NNNNN', str(port))
    try:
        adapter = PostgreSQLAdapter(dsn, driver=driver, options=Options())
    except ConfigurationError as e:
        assert ConfigurationError in outcomes, e
        assert_hidden_in(e)
        assert str(e).startswith('dsn: ')
        return
    assert DatabaseUnavailable in outcomes
    assert_hidden(adapter.describe(), repr(adapter), adapter.location())
    with pytest.raises(DatabaseUnavailable) as exc:
        adapter.prepare()
    assert_hidden_in(exc.value)
    assert 'port=%d' % port in str(exc.value)


# Replica lines (PostgreSQL)

def _pg_line(port, db, form):
    if form == 'uri':
        return 'postgresql://relstoragetest:%s@127.0.0.1:%d/%s' % (
            SPACED.replace(' ', '%20'), port, db)
    if form == 'quoted':
        return ("host=127.0.0.1 port=%d dbname=%s user=relstoragetest "
                "password='%s'" % (port, db, SPACED))
    return ('host=127.0.0.1 port=%d dbname=%s user=relstoragetest '
            'password=%s' % (port, db, SECRET))


def _pg_section(server, **options):
    lines = ''.join(' %s %s\n' % (key.replace('_', '-'), value)
                    for key, value in options.items())
    return ('%s <postgresql>\n  dsn host=127.0.0.1 port=%d dbname=x '
            'user=relstoragetest password=%s\n </postgresql>'
            % (lines, server.port, SECRET))


def test_postgresql_replica_lines(tmp_path, monkeypatch, logs):
    """Failover, a changed file, a stale server, an unusable list, a
    lagging replica, Server reprs: none shows a line's password."""
    server = server_of('postgresql')
    # The file is looked at on every transaction, not once a second.
    monkeypatch.setattr(replicas, 'CHECK_EVERY', 0)
    factory = DatabaseFactory('postgresql', True, server=server)
    for which in ('dst', 'main'):  # hp2 older than hp
        factory.storage(which, zap=True).close()
    down = closed_port()
    first = _pg_line(down, 'x', 'plain')
    second = _pg_line(server.port, 'relstoragetest_hp', 'quoted')
    third = _pg_line(server.port, 'relstoragetest_hp2', 'uri')
    rw = tmp_path / 'rw.conf'
    rw.write_text('# read-write servers\n%s\n%s\n%s\n' % (first, second,
                                                           third))
    storage = _open(_pg_section(server, replica_conf=rw))
    db = ZODB.DB(storage)
    try:
        _commit(db, 'a', 1)
        # The first line was passed over for the second, and the
        # warning says so by line number.
        failover = said(logs, 'instead of')
        assert failover, logs.records
        assert_hidden(*failover)
        assert 'replica-conf line 3' in failover[0]
        servers = storage._adapter.replicas.rw.servers
        assert [s.number for s in servers] == [2, 3, 4]
        assert_hidden(storage.describe(), repr(storage), storage.getName(),
                      *[repr(s) for s in servers])
        # Only the third is listed now: it never had the commit.
        rw.write_text('%s\n' % third)
        instance = storage.new_instance()
        try:
            with pytest.raises(ReadConflictError) as exc:
                instance.poll_invalidations()
        finally:
            instance.release()
        assert 'stale' in str(exc.value)
        assert_hidden_in(exc.value)
        assert said(logs, 'changed; reconnecting')
    finally:
        db.close()

    # No listed server answers.
    rw.write_text('%s\n%s\n' % (first, _pg_line(down, 'x', 'uri')))
    with pytest.raises(DatabaseDisconnected) as exc:
        _open(_pg_section(server, replica_conf=rw))
    assert 'line 1' in str(exc.value) and 'line 2' in str(exc.value)
    assert_hidden_in(exc.value)

    # Loads from replicas: the first does not answer, the second lags
    # (it is another database, which never catches up).
    rw.write_text(second + '\n')
    ro = tmp_path / 'ro.conf'
    ro.write_text('%s\n%s\n' % (_pg_line(down, 'x', 'quoted'), third))
    storage = _open(_pg_section(server, replica_conf=rw, ro_replica_conf=ro,
                                replica_max_lag=0.01))
    db = ZODB.DB(storage)
    try:
        _commit(db, 'b', 2)
        with db.transaction() as conn:
            assert conn.root()['b']['v'] == 2
        assert said(logs, 'is behind')
        assert_hidden(*[repr(s) for s in storage._adapter.replicas.ro.servers])
    finally:
        db.close()
    ro.write_text('%s\n' % _pg_line(down, 'x', 'uri'))
    storage = _open(_pg_section(server, replica_conf=rw, ro_replica_conf=ro))
    try:
        storage.lastTransaction()
        assert said(logs, 'loads go to the read-write server')
    finally:
        storage.close()
    factory.cleanup()


@pytest.mark.parametrize('line', [
    'host=127.0.0.1 port=1 password=%s' % SPACED,
    # libpq quotes all of a URI it cannot parse.
    'postgresql://app:%s@[::1/x' % SPACED.replace(' ', '%20'),
    'app:%s@db1' % SECRET,
    'app:%s@db1:5432' % SPACED,
])
@pytest.mark.parametrize('kind', ['postgresql', 'mysql'])
def test_a_bad_replica_line(tmp_path, kind, line):
    """A line that cannot be used is named by its number, not quoted."""
    if kind == 'mysql' and '=' in line:
        line = 'host=db1 passwd=%s' % SPACED
    path = tmp_path / 'servers.conf'
    path.write_text('db0\n' + line + '\n')
    adapter = ('<postgresql>\n dsn host=127.0.0.1 port=1\n</postgresql>'
               if kind == 'postgresql' else
               '<mysql>\n host 127.0.0.1\n port 1\n</mysql>')
    for option in ('replica-conf', 'ro-replica-conf'):
        with pytest.raises(ConfigurationError) as exc:
            _open(' %s %s\n%s' % (option, path, adapter))
        assert '%s: %s line 2' % (option, path) in str(exc.value)
        assert_hidden_in(exc.value)


# MySQL

@pytest.mark.parametrize('driver', ['MySQLdb', 'PyMySQL'])
@pytest.mark.parametrize('key', ['passwd', 'password'])
def test_mysql_password(driver, key):
    from relstorage.adapters.mysql import MySQLAdapter
    port = closed_port()
    with pytest.raises(DatabaseUnavailable) as exc:
        MySQLAdapter(driver=driver, options=Options(), host='127.0.0.1',
                     port=port, user='app', db='x', **{key: SECRET})
    assert_hidden_in(exc.value)
    assert 'port=%d' % port in str(exc.value)


def _mysql_account(server):
    import MySQLdb
    conn = MySQLdb.connect(host=server.host, port=server.port, user='root',
                           passwd='', connect_timeout=5)
    try:
        cur = conn.cursor()
        for host in ('%', 'localhost', '127.0.0.1'):
            cur.execute("CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED BY "
                        "'%s'" % (MYSQL_USER, host, SECRET))
            cur.execute("GRANT ALL PRIVILEGES ON `relstoragetest_hp`.* TO "
                        "'%s'@'%s'" % (MYSQL_USER, host))
    finally:
        conn.close()


def test_mysql_replica_lines(tmp_path, logs):
    server = server_of('mysql')
    _mysql_account(server)
    DatabaseFactory('mysql', True, server=server).storage(zap=True).close()
    down = closed_port()
    rw = tmp_path / 'rw.conf'
    rw.write_text('127.0.0.1:%d\n127.0.0.1:%d\n' % (down, server.port))
    section = (' replica-conf %s\n <mysql>\n  host 127.0.0.1\n  user %s\n'
               '  passwd %s\n  db relstoragetest_hp\n </mysql>'
               % (rw, MYSQL_USER, SECRET))
    storage = _open(section)
    db = ZODB.DB(storage)
    try:
        _commit(db, 'a', 1)
        assert said(logs, 'instead of')
        assert_hidden(storage.describe(), repr(storage), *[
            repr(s) for s in storage._adapter.replicas.rw.servers])
    finally:
        db.close()
    rw.write_text('127.0.0.1:%d\n' % down)
    with pytest.raises(DatabaseUnavailable) as exc:
        _open(section)
    assert_hidden_in(exc.value)
    assert str(down) in str(exc.value)


# Oracle (no server: as far as connecting goes)

@pytest.mark.parametrize('params', [
    dict(user='app', password=SECRET, dsn='127.0.0.1:NNNNN/ORCL'),
    # cx_Oracle's user/password as the user
    dict(user='app/%s' % SECRET, dsn='127.0.0.1:NNNNN/ORCL'),
    dict(dsn='app/%s@127.0.0.1:NNNNN/ORCL' % SECRET),
    dict(user='app', dsn='app/%s@//127.0.0.1:NNNNN/ORCL' % SPACED),
    dict(dsn='app/%s@(DESCRIPTION=(ADDRESS=(PROTOCOL=TCP)(HOST=127.0.0.1)'
             '(PORT=NNNNN))(CONNECT_DATA=(SERVICE_NAME=ORCL)))' % SECRET),
    dict(dsn='app/%s@NOSUCHALIAS' % SECRET),
])
def test_oracle_password(params):
    pytest.importorskip('oracledb')
    from relstorage.adapters.oracle import OracleAdapter
    port = closed_port()
    params = {key: value.replace('NNNNN', str(port))
              for key, value in params.items()}
    adapter = OracleAdapter(options=Options(), **params)
    assert_hidden(adapter.describe(), repr(adapter), adapter.location())
    assert 'user=app' in adapter.describe()
    with pytest.raises(DatabaseUnavailable) as exc:
        adapter.prepare()
    assert_hidden_in(exc.value)
    if 'NOSUCHALIAS' not in params['dsn']:
        assert 'port=%d' % port in str(exc.value)


# zodburi URIs

@pytest.mark.parametrize('uri', [
    'postgres://app:%s@127.0.0.1:NNNNN/x' % SECRET,
    'postgresql://app:%s@127.0.0.1:NNNNN/x' % SPACED.replace(' ', '%20'),
    'postgres://app:%s@127.0.0.1:notaport/x' % SECRET,
    'postgres://127.0.0.1:notaport/x?password=%s' % SECRET,
    'mysql://app:%s@127.0.0.1:NNNNN/x' % SECRET,
    'oracle://app:%s@127.0.0.1:NNNNN/ORCL' % SECRET,
    'sqlite://app:%s@somehost/x' % SECRET,
])
def test_zodburi(uri):
    uri = uri.replace('NNNNN', str(closed_port()))
    with pytest.raises(Exception) as exc:
        factory, _ = zodburi.resolve_uri(uri)
        factory()
    assert isinstance(exc.value, (ConfigurationError, DatabaseUnavailable))
    assert_hidden_in(exc.value)


# Console tools

def _tool_config(tmp_path):
    """A config of one section per way of writing a password, none of
    whose servers answers; and the sections' names."""
    down = closed_port()
    rw = tmp_path / 'rw.conf'
    rw.write_text('%s\n%s\n' % (_pg_line(down, 'x', 'quoted'),
                                _pg_line(down, 'x', 'uri')))
    sections = {
        'pg-spaced': '<postgresql>\n dsn host=127.0.0.1 port=%d dbname=x '
                     'user=app password=%s\n</postgresql>' % (down, SPACED),
        'pg-uri': '<postgresql>\n dsn postgresql://app:%s@127.0.0.1:%d/x\n'
                  '</postgresql>' % (SECRET, down),
        'pg-replicas': 'replica-conf %s\n<postgresql>\n dsn dbname=x '
                       'user=app\n</postgresql>' % rw,
        'mysql': '<mysql>\n host 127.0.0.1\n port %d\n user app\n passwd %s'
                 '\n db x\n</mysql>' % (down, SECRET),
        'oracle': '<oracle>\n dsn app/%s@127.0.0.1:%d/ORCL\n</oracle>'
                  % (SECRET, down),
    }
    return sections


def _run(module, *args):
    proc = subprocess.run(python_command(module, *args), env=child_env(),
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert_hidden(proc.stdout, proc.stderr)
    assert proc.returncode != 0, proc
    return proc.stdout + proc.stderr


@pytest.mark.parametrize('module', [
    'relstorage.zodbinfo', 'relstorage.zodbcheck', 'relstorage.zodbpack',
    'relstorage.upgrade', 'relstorage.metricsserver'])
def test_console_tool(tmp_path, module):
    sections = _tool_config(tmp_path)
    path = tmp_path / 'site.conf'
    path.write_text('%import relstorage\n' + ''.join(
        '<relstorage %s>\n%s\n</relstorage>\n' % item
        for item in sections.items()))
    output = _run(module, path)
    if module == 'relstorage.metricsserver':
        # It stops at the first section that cannot be opened.
        assert 'Hunter' not in output and 'dsn: ' in output, output
        return
    for name in sections:
        assert '%s:' % name in output, output


def test_zodbconvert(tmp_path):
    sections = _tool_config(tmp_path)
    for name, body in sections.items():
        path = tmp_path / 'convert.conf'
        path.write_text(
            '%%import relstorage\n<relstorage source>\n%s\n</relstorage>\n'
            '<filestorage destination>\n path %s\n</filestorage>\n'
            % (body, tmp_path / 'Data.fs'))
        output = _run('relstorage.zodbconvert', path)
        assert 'zodbconvert' in output, output
