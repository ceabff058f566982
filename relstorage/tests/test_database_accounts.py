"""The database and its account, as each guide (docs/postgresql.rst,
docs/mysql.rst, docs/sqlite.rst) says to make them: the statements of
its section "The database and its account" (for SQLite, the directory's)
are run as written, the example names replaced by fresh ones, as the
server's administrator on a private server of the run; the storage then
opens with that account, creates its schema, commits and reads back.

And a PostgreSQL database that the storage's role does not own (since
PostgreSQL 15 its schema public lets only the owner create): opening
names the missing privilege and the statements that give it, and after
the first of them, run by the administrator, the storage opens."""
import grp
import logging
import os
import pwd
import re
import secrets
import stat
import subprocess
from pathlib import Path

import pytest
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.exceptions import PermissionDenied
from relstorage.options import Options
from relstorage.storage import RelStorage
from relstorage.testing.checkout import checkout_files
from relstorage.testing.dbs import require_private_server

DOCS = Path(__file__).resolve().parents[2] / 'docs'
SECTION = re.compile(r'^(The (?:database|directory) and its account)\n=+\n',
                     re.M)


def documented(page):
    """The lines of the first literal block of *page*'s section on the
    database and its account."""
    checkout_files(new=False)  # skips outside a checkout
    text = (DOCS / (page + '.rst')).read_text()
    found = SECTION.search(text)
    assert found, '%s.rst has no section on the database and its account' \
        % page
    # Up to the next heading.
    section = re.split(r'\n\S[^\n]*\n=+\n', text[found.end():])[0]
    block = re.search(r'::\n\n((?:    [^\n]*\n|\n)+)', section)
    assert block, 'no statements in %s.rst\'s section' % page
    lines = [line[4:] for line in block.group(1).splitlines() if line]
    return lines


def as_named(line, names):
    """*line* with the guide's example names replaced (whole words)."""
    for example, name in names.items():
        line = re.sub(r'(?<![\w%])' + re.escape(example) + r'(?![\w%])',
                      name, line)
    return line


def commit_and_read(storage):
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()['made'] = PersistentMapping(by='the guide')
        with db.transaction() as conn:
            assert conn.root()['made']['by'] == 'the guide'
    finally:
        db.close()


def fresh_name(what):
    return 'rsguide_%s_%s' % (what, secrets.token_hex(4))


def pg_storage(server, database, role, password, driver='auto'):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    return RelStorage(PostgreSQLAdapter(
        'dbname=%s host=%s port=%s user=%s password=%s'
        % (database, server.host, server.port, role, password),
        driver=driver, options=Options(keep_history=False)))


def pg_admin(server):
    from relstorage.testing.postgresql_server import admin_connection
    conn = admin_connection(server, 'postgres')
    return conn, conn.cursor()


def test_postgresql_guide_statements():
    lines = documented('postgresql')
    server = require_private_server('postgresql')
    name, password = fresh_name('app'), secrets.token_hex(8)
    conn, cur = pg_admin(server)
    try:
        statements = [s for s in ' '.join(lines).split(';') if s.strip()]
        assert [s.split()[:2] for s in statements] == [
            ['CREATE', 'ROLE'], ['CREATE', 'DATABASE']]
        for statement in statements:
            cur.execute(as_named(statement, {'app': name, 'secret': password}))
        commit_and_read(pg_storage(server, name, name, password))
        from relstorage.testing.postgresql_server import admin_connection
        made = admin_connection(server, name)
        try:
            tables = made.cursor()
            tables.execute(
                "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class "
                "WHERE relnamespace = 'public'::regnamespace "
                "AND relkind = 'r'")
            assert tables.fetchall() == [(name,)]
        finally:
            made.close()
    finally:
        pg_drop(cur, name, name)
        conn.close()


def pg_drop(cur, database, role):
    cur.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % database)
    cur.execute('DROP ROLE IF EXISTS "%s"' % role)


@pytest.mark.parametrize('driver', ['psycopg2', 'psycopg'])
def test_postgresql_database_not_owned_names_the_missing_privilege(driver):
    """The role may connect to a database the administrator owns, but
    not create in its schema public: the error names the privilege, the
    schema and the database, and the statement that gives it (with
    either driver); run, the storage opens and commits."""
    server = require_private_server('postgresql')
    role, database = fresh_name('role'), fresh_name('db')
    conn, cur = pg_admin(server)
    try:
        cur.execute('CREATE ROLE "%s" LOGIN' % role)
        cur.execute('CREATE DATABASE "%s"' % database)
        with pytest.raises(PermissionDenied) as exc:
            pg_storage(server, database, role, '', driver)
        message = str(exc.value)
        assert ('role %s lacks the CREATE privilege on schema public of '
                'database %s, owned by %s' % (role, database,
                                              server.admin_user)) in message
        assert 'PostgreSQL 15' in message
        assert 'needs read-only true' not in message
        [own] = re.findall(r'ALTER DATABASE "[^"]+" OWNER TO "[^"]+"',
                           message)
        assert own == 'ALTER DATABASE "%s" OWNER TO "%s"' % (database, role)
        assert 'GRANT CREATE ON SCHEMA "public" TO "%s"' % role in message
        cur.execute(own)
        commit_and_read(pg_storage(server, database, role, '', driver))
    finally:
        pg_drop(cur, database, role)
        conn.close()


def test_mysql_guide_statements():
    import MySQLdb
    from relstorage.adapters.mysql import MySQLAdapter
    lines = documented('mysql')
    server = require_private_server('mysql')
    name, password = fresh_name('app'), secrets.token_hex(8)
    names = {'app': name, 'secret': password, '192.0.2.10': '127.0.0.1'}
    statements = [s for s in ' '.join(lines).split(';') if s.strip()]
    assert [s.split()[:2] for s in statements] == [
        ['CREATE', 'DATABASE'], ['CREATE', 'USER'], ['GRANT', 'ALL']]
    assert not any("'%'" in s for s in statements)
    try:
        server.admin(*[as_named(s, names) for s in statements])
        # Only that host: the account has no other.
        assert server.admin(
            'SELECT Host FROM mysql.user WHERE User = %r' % name) == (
                ('127.0.0.1',),)
        commit_and_read(RelStorage(MySQLAdapter(
            host=server.host, port=server.port, user=name, passwd=password,
            db=name, options=Options(keep_history=False))))
        with pytest.raises(MySQLdb.OperationalError):
            MySQLdb.connect(host=server.host, port=server.port, user=name,
                            passwd=password, db='relstoragetest_hp',
                            connect_timeout=5).close()
    finally:
        server.admin('DROP DATABASE IF EXISTS `%s`' % name,
                     "DROP USER IF EXISTS '%s'@'127.0.0.1'" % name)


def test_sqlite_guide_directory(tmp_path, caplog):
    from relstorage.adapters.sqlite import SQLiteAdapter
    lines = documented('sqlite')
    [command] = lines
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    where = tmp_path / 'var' / 'lib' / 'app' / 'relstorage'
    line = as_named(command, {'app': user}).replace(
        '/var/lib/%s/relstorage' % user, str(where))
    assert line.split()[0] == 'install' and str(where) in line
    line = line.replace('-g %s' % user, '-g %s' % group)
    subprocess.run(line, shell=True, check=True, timeout=30)
    made = where.stat()
    assert (made.st_uid, made.st_gid) == (os.getuid(), os.getgid())
    assert stat.S_IMODE(made.st_mode) == 0o700
    with caplog.at_level(logging.WARNING, logger='relstorage'):
        commit_and_read(RelStorage(SQLiteAdapter(
            str(where), options=Options(keep_history=False))))
    assert [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING] == []
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    for path in where.iterdir():
        assert path.stat().st_uid == os.getuid(), path
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
