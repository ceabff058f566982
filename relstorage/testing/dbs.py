"""Where the tests and the speed test find the test databases.

PostgreSQL is expected on 127.0.0.1:5432 with the role and databases that
``scripts/testdb.sh`` creates; the RELSTORAGE_TEST_PG_* variables point the
tests at another server. SQLite databases live in temporary directories.
When a server cannot be reached the tests that need it are skipped, except
under CI (``CI=true``), where that is a failure.

Oracle is tested only where a server is configured: RELSTORAGE_TEST_ORACLE_DSN
(an Easy Connect string), RELSTORAGE_TEST_ORACLE_USER (a prefix: the users
PREFIX_hp, PREFIX_hf, PREFIX_hp2, PREFIX_hf2 and PREFIX_misc each hold one
test schema) and RELSTORAGE_TEST_ORACLE_PASSWORD (theirs). Without them the
Oracle tests are skipped, saying so, in CI too: no Oracle server can be
installed from the package registries CI reaches. A configured server that
cannot be reached fails under CI like the others.
"""
import atexit
import os
import shutil
import tempfile
import time
import unittest

from relstorage.children import child_env  # noqa: F401 -- for the tests
from relstorage.options import Options

DATABASES = ('sqlite', 'postgresql', 'mysql')
#: Databases tested only where a server is configured (see above).
CONFIGURED_ONLY = ('oracle',)
#: Every database the conformance suites are built for.
ALL_DATABASES = DATABASES + CONFIGURED_ONLY

PG_HOST = os.environ.get('RELSTORAGE_TEST_PG_HOST', '127.0.0.1')
PG_PORT = os.environ.get('RELSTORAGE_TEST_PG_PORT', '5432')
PG_USER = os.environ.get('RELSTORAGE_TEST_PG_USER', 'relstoragetest')
PG_PASSWORD = os.environ.get('RELSTORAGE_TEST_PG_PASSWORD', 'relstoragetest')
PG_DB_PREFIX = os.environ.get('RELSTORAGE_TEST_PG_DB_PREFIX',
                              'relstoragetest')


MYSQL_HOST = os.environ.get('RELSTORAGE_TEST_MYSQL_HOST', '127.0.0.1')
MYSQL_PORT = int(os.environ.get('RELSTORAGE_TEST_MYSQL_PORT', '3306'))
MYSQL_USER = os.environ.get('RELSTORAGE_TEST_MYSQL_USER', 'relstoragetest')
MYSQL_PASSWORD = os.environ.get('RELSTORAGE_TEST_MYSQL_PASSWORD',
                                'relstoragetest')
MYSQL_DB_PREFIX = os.environ.get('RELSTORAGE_TEST_MYSQL_DB_PREFIX',
                                 'relstoragetest')


ORACLE_DSN = os.environ.get('RELSTORAGE_TEST_ORACLE_DSN', '')
ORACLE_USER = os.environ.get('RELSTORAGE_TEST_ORACLE_USER', '')
ORACLE_PASSWORD = os.environ.get('RELSTORAGE_TEST_ORACLE_PASSWORD', '')
ORACLE_HOW = ('set RELSTORAGE_TEST_ORACLE_DSN, RELSTORAGE_TEST_ORACLE_USER '
              'and RELSTORAGE_TEST_ORACLE_PASSWORD to run them')
#: Why the Oracle tests do not run here ('' when a server is configured).
ORACLE_NOT_CONFIGURED = '' if (ORACLE_DSN and ORACLE_USER
                               and ORACLE_PASSWORD) else (
    'oracle: not run (no server configured): ' + ORACLE_HOW)


def in_ci():
    return os.environ.get('CI', '').lower() in ('true', '1', 'yes')


def _db_name(prefix, keep_history, which):
    if which == 'misc':
        return prefix + '_misc'
    return '%s_%s%s' % (prefix, 'hp' if keep_history else 'hf',
                        '2' if which == 'dst' else '')


def pg_dsn(keep_history, which='main', server=None):
    """The DSN of one of the test databases: ``main`` and ``dst`` exist per
    history mode, ``misc`` for tests that create their own schema. On the
    configured test server, or on *server* (a private server of the run,
    see private_servers, or one with a ``dsn(database)`` method)."""
    if server is None:
        host, port, user, password = PG_HOST, PG_PORT, PG_USER, PG_PASSWORD
        prefix = PG_DB_PREFIX
    elif hasattr(server, 'dsn'):
        # Several servers (a failover formation) that say how to reach
        # them.
        return server.dsn(_db_name('relstoragetest', keep_history, which))
    else:
        host, port, user, password = (server.host, server.port, server.user,
                                      server.password)
        prefix = 'relstoragetest'
    dsn = 'dbname=%s host=%s port=%s user=%s' % (
        _db_name(prefix, keep_history, which), host, port, user)
    if password:
        dsn += ' password=%s' % password
    return dsn


def mysql_params(keep_history, which='main', server=None, **overrides):
    """Connection keywords (mysqlclient's names) of a test database, on
    the configured test server or on *server*."""
    if server is None:
        params = dict(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER,
                      passwd=MYSQL_PASSWORD,
                      db=_db_name(MYSQL_DB_PREFIX, keep_history, which))
    else:
        params = dict(host=server.host, port=server.port, user=server.user,
                      passwd=server.password,
                      db=_db_name('relstoragetest', keep_history, which))
    params.update(overrides)
    return params


def oracle_params(keep_history, which='main'):
    """``user``, ``password`` and ``dsn`` of an Oracle test schema."""
    return dict(user=_db_name(ORACLE_USER, keep_history, which),
                password=ORACLE_PASSWORD, dsn=ORACLE_DSN)


def admin_query(db_name, keep_history, sql, params=()):
    """Rows of *sql* run on a connection of its own to a test database
    (as an administrator or a monitoring tool would), then closed."""
    if db_name == 'postgresql':
        import psycopg2
        conn = psycopg2.connect(pg_dsn(keep_history))
        conn.autocommit = True
    elif db_name == 'oracle':
        import oracledb
        conn = oracledb.connect(**oracle_params(keep_history))
    else:
        import MySQLdb
        conn = MySQLdb.connect(**mysql_params(keep_history))
    try:
        cur = conn.cursor()
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()


_unreachable = {}


def require(db):
    """Skip (or, under CI, fail) when *db*'s server cannot be reached."""
    if db == 'sqlite':
        return
    if db == 'oracle' and ORACLE_NOT_CONFIGURED:
        # Said, never silent; not a failure in CI (see above).
        raise unittest.SkipTest(ORACLE_NOT_CONFIGURED)
    if db not in _unreachable:
        _unreachable[db] = _probe(db)
    problem = _unreachable[db]
    if problem:
        if in_ci():
            raise AssertionError('CI=true and %s' % problem)
        raise unittest.SkipTest(problem)


def require_pair(db):
    """The shared replicated pair of private *db* servers
    (replica_pairs); skip when their programs are missing, or under CI
    fail (as when they will not start)."""
    from .replica_pairs import replica_pair
    return _installed('%s replica pair' % db, replica_pair, db)


def require_private_server(kind):
    """The run's private server of *kind* (private_servers); skip when
    its programs are missing, or under CI fail."""
    from .private_servers import private_server
    return _installed('private %s server' % kind, private_server, kind)


def _installed(what, start, *args):
    """*start(*args)*; when the programs it needs are missing, a skip
    naming *what* (under CI a failure)."""
    from .servers import NotInstalled
    try:
        return start(*args)
    except NotInstalled as e:
        if in_ci():
            raise AssertionError('CI=true and no %s: %s' % (what, e))
        raise unittest.SkipTest('no %s: %s' % (what, e))


#: pgbouncer's default_pool_size for the suites through it, by pool
#: mode: in session mode each client connection holds a server connection
#: as long as it is open; in transaction mode only while a transaction
#: runs, but ZODB's race tests run 64 at once, each holding a snapshot
#: until the others let it go on. (The bank workload of test_pgbouncer
#: runs through a pool of 4.)
POOL_SIZES = {'transaction': 100, 'session': 200}
#: The adapter's ``pooler`` option through each pool mode: told of a
#: transaction pooler; not told of a session pooler (which then passes
#: the check made at open).
POOLER_OPTIONS = {'transaction': 'transaction', 'session': 'none'}


def require_pooler(pool_mode, pool_size=None):
    """The private pgbouncer with *pool_mode* (and *pool_size*, by default
    POOL_SIZES') in front of the private PostgreSQL server; skip when its
    programs are missing, or under CI fail."""
    from .servers import NotInstalled
    from .private_servers import private_pooler
    try:
        return private_pooler(pool_mode, pool_size or POOL_SIZES[pool_mode])
    except NotInstalled as e:
        if in_ci():
            raise AssertionError('CI=true and no pgbouncer: %s' % e)
        raise unittest.SkipTest('no pgbouncer: %s' % e)


def _probe(db):
    if db == 'postgresql':
        try:
            import psycopg2
            psycopg2.connect(pg_dsn(True), connect_timeout=5).close()
        except Exception as e:  # noqa: BLE001 -- reported as the skip reason
            return ('the PostgreSQL test server at %s:%s cannot be reached '
                    '(run scripts/testdb.sh): %s' % (PG_HOST, PG_PORT, e))
    if db == 'mysql':
        try:
            import MySQLdb
            MySQLdb.connect(connect_timeout=5, **mysql_params(True)).close()
        except Exception as e:  # noqa: BLE001 -- reported as the skip reason
            return ('the MySQL/MariaDB test server at %s:%s cannot be '
                    'reached (run scripts/testdb.sh): %s'
                    % (MYSQL_HOST, MYSQL_PORT, e))
    if db == 'oracle':
        try:
            import oracledb
            oracledb.connect(tcp_connect_timeout=5,
                             **oracle_params(True)).close()
        except Exception as e:  # noqa: BLE001 -- reported as the skip reason
            return ('the Oracle test server at %s cannot be reached as %s: '
                    '%s' % (ORACLE_DSN, oracle_params(True)['user'], e))
    return None


#: Server databases this test process has already emptied of every table
#: (a run starts from nothing, whatever an earlier run or release left).
_dropped = set()


def empty_database(database, keep_history, which, server=None):
    """Drop every table, view and procedure of a test database on a
    server, ours or anybody's (RelStorage 4's, left by a benchmark or an
    upgrade test, hold foreign keys and views that our own drop_all does
    not know)."""
    if database == 'postgresql':
        import psycopg2
        conn = psycopg2.connect(pg_dsn(keep_history, which, server))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute('DROP SCHEMA public CASCADE')
            cur.execute('CREATE SCHEMA public')
            # As a new database has it: other users of the server (a
            # read-only one, say) may look inside.
            cur.execute('GRANT USAGE ON SCHEMA public TO PUBLIC')
            # The schema took with it what scripts/testdb.sh (or a
            # private server) granted the user that may only read on the
            # tables made later: given again, else the read-only user
            # tests that follow would fail.
            from .servers import RO_USER
            cur.execute('SELECT 1 FROM pg_roles WHERE rolname = %s',
                        (RO_USER,))
            if cur.fetchone():
                cur.execute('ALTER DEFAULT PRIVILEGES IN SCHEMA public '
                            'GRANT SELECT ON TABLES TO %s' % RO_USER)
        conn.close()
    elif database == 'mysql':
        import MySQLdb
        conn = MySQLdb.connect(**mysql_params(keep_history, which, server))
        cur = conn.cursor()
        cur.execute('SHOW FULL TABLES')
        tables = list(cur.fetchall())
        cur.execute('SELECT routine_name, routine_type FROM '
                    'information_schema.routines WHERE routine_schema = '
                    'DATABASE()')
        routines = list(cur.fetchall())
        cur.execute('SET FOREIGN_KEY_CHECKS = 0')
        for table, kind in tables:
            cur.execute('DROP %s `%s`' % (
                'VIEW' if kind == 'VIEW' else 'TABLE', table))
        for name, kind in routines:
            cur.execute('DROP %s `%s`' % (kind, name))
        conn.close()


def require_galera():
    """The shared private Galera cluster (galera_cluster), all three
    nodes running; skip when its programs are missing, or under CI fail."""
    from .servers import NotInstalled
    from .galera_cluster import galera_cluster
    try:
        return galera_cluster()
    except NotInstalled as e:
        if in_ci():
            raise AssertionError('CI=true and no Galera cluster: %s' % e)
        raise unittest.SkipTest('no Galera cluster: %s' % e)


class DatabaseFactory:
    """Builds adapters and storages for one database and history mode."""

    def __init__(self, db, keep_history, child=False, server=None,
                 driver=None, options=None, pooler=None):
        self.db = db
        #: The PostgreSQL adapter's pooler option (None: its default),
        #: for a *server* that is a pgbouncer.
        self.pooler = pooler
        #: Options every adapter it builds gets (ro_replica_conf, say).
        self.options = dict(options or {})
        self.keep_history = keep_history
        #: The adapter's driver option (None: its default).
        self.driver = driver
        self._dirs = {}
        # A child process shares the parent's databases as they are.
        self._child = child
        #: A private server of the run (private_servers) instead of the
        #: configured one.
        self.server = server

    def data_dir(self, which='main'):
        if which not in self._dirs:
            path = tempfile.mkdtemp(prefix='relstorage-test-')
            _made_dirs.add(path)
            self._dirs[which] = path
        return self._dirs[which]

    def adapter(self, which='main', **options):
        if self.server is None:
            require(self.db)
        # One key per server database ('misc' serves both modes).
        key = (self.db, None if which == 'misc' else self.keep_history, which,
               getattr(self.server, 'port', self.server))
        if self.db != 'sqlite' and not self._child and key not in _dropped:
            _dropped.add(key)
            if which == 'misc' and self.db in ('postgresql', 'mysql'):
                # Tests that make their own schema there start from
                # nothing, whatever an earlier run left.
                empty_database(self.db, self.keep_history, which,
                               self.server)
            else:
                self._build(which, Options(keep_history=self.keep_history)
                            ).drop_all()
        return self._build(which, Options(keep_history=self.keep_history,
                                          **dict(self.options, **options)))

    def _build(self, which, opts):
        if self.db == 'sqlite':
            from relstorage.adapters.sqlite import SQLiteAdapter
            return SQLiteAdapter(self.data_dir(which), options=opts)
        if self.db == 'oracle':
            from relstorage.adapters.oracle import OracleAdapter
            return OracleAdapter(options=opts,
                                 **oracle_params(self.keep_history, which))
        if self.db == 'mysql':
            from relstorage.adapters.mysql import MySQLAdapter
            return MySQLAdapter(options=opts, driver=self.driver or 'auto',
                                **mysql_params(self.keep_history, which,
                                               self.server))
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        return PostgreSQLAdapter(pg_dsn(self.keep_history, which,
                                        self.server),
                                 driver=self.driver or 'auto', options=opts,
                                 pooler=self.pooler or 'none')

    def storage(self, which='main', zap=False, **options):
        from relstorage.storage import RelStorage
        storage = RelStorage(self.adapter(which, **options))
        if zap:
            storage.zap_all()
        return storage

    @classmethod
    def in_child(cls, db, keep_history, data_dir):
        """The factory a child process rebuilds from its arguments: the
        same database, mode and (for SQLite) data directory."""
        factory = cls(db, str(keep_history) == 'True', child=True)
        factory._dirs['main'] = data_dir
        return factory

    def cleanup(self):
        for path in self._dirs.values():
            shutil.rmtree(path, ignore_errors=True)
            _made_dirs.discard(path)
        self._dirs.clear()


#: The data directories DatabaseFactory.data_dir made in this process and
#: no cleanup() removed yet: removed when the process exits (the ones a
#: child process is given are its parent's, never in it).
_made_dirs = set()


@atexit.register
def _remove_made_dirs():
    while _made_dirs:
        shutil.rmtree(_made_dirs.pop(), ignore_errors=True)


def wait_for(predicate, timeout=10):
    """Whether *predicate()* became true within *timeout* seconds (for
    what travels on its own, such as a commit's announcement, which
    arrives shortly after the COMMIT)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True
