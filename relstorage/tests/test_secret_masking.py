"""A password is hidden where it stands as a value, never inside the
server's own words: real failed connections (a database that does not
exist, a wrong password) with short passwords, to the machine's
PostgreSQL and MariaDB and to private servers that check passwords; the
server's message must come through word for word, and the password must
not be in it as a value (quoted, after ``password=``, in a URI, as a word
of its own)."""
import re

import pytest

from relstorage.adapters.redact import scrub
from relstorage.config import storage_from_string
from relstorage.exceptions import DatabaseUnavailable
from relstorage.testing.dbs import MYSQL_HOST
from relstorage.testing.dbs import MYSQL_PORT
from relstorage.testing.dbs import MYSQL_USER
from relstorage.testing.dbs import PG_HOST
from relstorage.testing.dbs import PG_PORT
from relstorage.testing.dbs import PG_USER
from relstorage.testing.dbs import require
from relstorage.testing.private_servers import private_server
from relstorage.testing.servers import NotInstalled
from relstorage.testing.servers import ServerError
from relstorage.testing.tls import CHECKED_USER
from relstorage.testing.tls import PasswordPostgreSQLServer

from .test_tls_and_credentials import _started as started
from .test_tls_and_credentials import _unavailable as unavailable

#: Passwords that are pieces of what servers say ("database", "exist",
#: "at", "failed", "Access denied", "127.0.0.1").
SHORT = ['a', 'e', 'at', 'ist', 'data', 'ase', 'cce', '1', '0.0']

NO_DATABASE = 'relstoragetest_h_nosuch'


def _failure(section):
    with pytest.raises(DatabaseUnavailable) as exc:
        storage_from_string('%%import relstorage\n<relstorage>\n%s\n'
                            '</relstorage>\n' % section)
    message = str(exc.value)
    assert '\n' not in message
    return message


def _said(message):
    """What the server (or driver) said: the message after the
    description of the database."""
    return message.split('): ', 1)[1]


def assert_not_a_value(password, text):
    """*password* is nowhere in *text* where a value stands: quoted, after
    ``password=``, as a URI's, or (unless it is shorter than 3, as "a"
    or "at", which are the server's words) as a word of its own."""
    word = re.escape(password)
    for pattern in (r'["\']%s["\']' % word,
                    r'(?i)pass(?:wd|word)\s*=\s*["\']?%s' % word,
                    r':%s@' % word):
        assert not re.search(pattern, text), (password, text)
    if len(password) >= 3:
        words = re.split(r'[\s"\'(),;:=@]+|\.(?:\s|$)', text)
        assert password not in words, (password, text)


# The machine's PostgreSQL (it trusts local connections: the password
# given is not checked, and what the server says is the same with any)

def _pg_section(dsn, driver):
    return '<postgresql>\n  driver %s\n  dsn %s\n</postgresql>' % (
        driver, dsn)


def _pg_forms(password):
    where = 'host=%s port=%s dbname=%s user=%s' % (
        PG_HOST, PG_PORT, NO_DATABASE, PG_USER)
    return [
        where + ' password=%s' % password,
        where + " password='%s'" % password,
        'postgresql://%s:%s@%s:%s/%s' % (PG_USER, password, PG_HOST,
                                         PG_PORT, NO_DATABASE),
        'postgresql://%s@%s:%s/%s?password=%s' % (
            PG_USER, PG_HOST, PG_PORT, NO_DATABASE, password),
    ]


@pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])
@pytest.mark.parametrize('password', SHORT)
def test_postgresql_no_such_database(driver, password):
    require('postgresql')
    without = _said(_failure(_pg_section(
        'host=%s port=%s dbname=%s user=%s' % (
            PG_HOST, PG_PORT, NO_DATABASE, PG_USER), driver)))
    assert 'database "%s" does not exist' % NO_DATABASE in without
    assert 'connection to server at "%s", port %s failed' % (
        PG_HOST, PG_PORT) in without
    for dsn in _pg_forms(password):
        said = _said(_failure(_pg_section(dsn, driver)))
        # Word for word what the server says without a password.
        assert said == without
        assert_not_a_value(password, said)


# A private PostgreSQL that checks passwords

@pytest.fixture(scope='module')
def checking_pg():
    yield from started(PasswordPostgreSQLServer())


def _checked_section(server, password, dbname='relstoragetest_hp'):
    return _pg_section('host=127.0.0.1 port=%d dbname=%s user=%s '
                       "password='%s'" % (server.port, dbname, CHECKED_USER,
                                          password), 'psycopg2')


@pytest.mark.parametrize('password', SHORT)
def test_postgresql_wrong_password(checking_pg, password):
    checking_pg.set_password('Right-Pw-for-the-test')
    said = _said(_failure(_checked_section(checking_pg, password)))
    assert ('password authentication failed for user "%s"' % CHECKED_USER
            in said), said
    assert_not_a_value(password, said)


@pytest.mark.parametrize('password', ['a', 'ist', 'data'])
def test_postgresql_right_password_no_such_database(checking_pg, password):
    checking_pg.set_password(password)
    said = _said(_failure(_checked_section(checking_pg, password,
                                           NO_DATABASE)))
    assert 'database "%s" does not exist' % NO_DATABASE in said, said
    assert_not_a_value(password, said)


def test_postgresql_echoing_the_password_as_the_user(checking_pg):
    """A password that is also the user's name: the server's
    ``for user "..."`` would show it; hidden there."""
    checking_pg.set_password('Right-Pw-for-the-test')
    said = _said(_failure(_checked_section(checking_pg, CHECKED_USER)))
    assert said.endswith('password authentication failed for user "***"'), said
    assert CHECKED_USER not in said


# The machine's MariaDB: a wrong password

@pytest.mark.parametrize('driver', ['MySQLdb', 'PyMySQL'])
def test_mysql_wrong_password(driver):
    require('mysql')

    def said(password):
        return _said(_failure(
            '<mysql>\n  driver %s\n  host %s\n  port %d\n  user %s\n'
            '  passwd %s\n  db %s\n</mysql>' % (
                driver, MYSQL_HOST, MYSQL_PORT, MYSQL_USER, password,
                NO_DATABASE)))
    baseline = said('Wrong-Pw-long-enough')
    assert "Access denied for user '%s'@" % MYSQL_USER in baseline
    assert '(using password: YES)' in baseline
    for password in SHORT:
        text = said(password)
        assert text == baseline
        assert_not_a_value(password, text)


# A private MariaDB: an account with a short password, a database that
# does not exist

SHORT_USER = 'rs_short_pw'


@pytest.fixture(scope='module')
def mariadb():
    try:
        server = private_server('mysql')
    except (NotInstalled, ServerError) as e:
        unavailable(str(e))
    return server


def _set_mysql_password(server, password):
    import MySQLdb
    conn = MySQLdb.connect(host=server.host, port=server.port, user='root',
                           passwd='', connect_timeout=5)
    try:
        cur = conn.cursor()
        for host in ('%', 'localhost', '127.0.0.1'):
            cur.execute("CREATE USER IF NOT EXISTS %s@%s", (SHORT_USER, host))
            cur.execute("ALTER USER %s@%s IDENTIFIED BY %s",
                        (SHORT_USER, host, password))
    finally:
        conn.close()


@pytest.mark.parametrize('driver', ['MySQLdb', 'PyMySQL'])
@pytest.mark.parametrize('password', ['a', 'ist', 'data', 'cce'])
def test_mysql_no_such_database(mariadb, driver, password):
    _set_mysql_password(mariadb, password)
    said = _said(_failure(
        '<mysql>\n  driver %s\n  host 127.0.0.1\n  port %d\n  user %s\n'
        '  passwd %s\n  db %s\n</mysql>' % (
            driver, mariadb.port, SHORT_USER, password, NO_DATABASE)))
    assert re.search(r"^\(1044, \"Access denied for user '%s'@'[\w.%%]+' "
                     r"to database '%s'\"\)$" % (SHORT_USER, NO_DATABASE),
                     said), said
    assert_not_a_value(password, said)


# What drivers quote: the value is hidden, the rest left as it is

@pytest.mark.parametrize('text,secret,expected', [
    # libpq, an unquoted password with a space: the rest is quoted.
    ('missing "=" after "Zq7Secret" in connection info string',
     'Hunter2 Zq7Secret',
     'missing "=" after "***" in connection info string'),
    # A connection string or URI quoted back: the value, whatever it is.
    ("invalid dsn: host=x password='it\\'s' user=a", '',
     "invalid dsn: host=x password='***' user=a"),
    ('bad "postgresql://app:a@host/db?sslpassword=a"', 'a',
     'bad "postgresql://app:***@host/db?sslpassword=***"'),
    # The password standing as a word of its own.
    ('login with Hunter2 refused', 'Hunter2', 'login with *** refused'),
    ('user "a" at "127.0.0.1"', 'a', 'user "***" at "127.0.0.1"'),
    # Not inside the server's words.
    ('FATAL:  database "exist" does not exist', 'ist',
     'FATAL:  database "exist" does not exist'),
    ("Access denied for user 'app'@'%' (using password: YES)", 'a',
     "Access denied for user 'app'@'%' (using password: YES)"),
])
def test_scrub(text, secret, expected):
    assert scrub(text, [secret]) == expected
