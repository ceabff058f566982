"""The layout rules the code keeps, checked over every shipped module
(everything under relstorage/ but relstorage/tests/, and for the imports
of the tests and of the testing support relstorage_speedtest/ but its
tests): each rule is a scan that fails naming the module and line that
breaks it."""
import ast
import importlib
import inspect
import pathlib
import pkgutil
import re
import textwrap

import relstorage
from relstorage import exceptions
from relstorage.exceptions import RelStorageError

SOURCE = pathlib.Path(relstorage.__file__).parent

#: Exception classes allowed outside relstorage.exceptions: private
#: control-flow signals that never leave the module defining them.
PRIVATE_SIGNALS = {
    # Marks a PRAGMA refused because another connection holds the file,
    # for checkpoint.retry(), which retries on an exception class; every
    # one that is still raised at the deadline becomes DatabaseUnavailable
    # inside files.connect().
    'relstorage.adapters.sqlite.files._Busy',
}

#: Error classes of the testing support (relstorage.testing): they tell a
#: test or the speed test that a private server could not be had, and
#: never come out of a storage.
TESTING_ERRORS = {
    'relstorage.testing.servers.NotInstalled',
    'relstorage.testing.servers.ServerError',
}


def shipped_modules():
    """Every shipped module, imported."""
    names = ['relstorage']
    for info in pkgutil.walk_packages(relstorage.__path__, 'relstorage.'):
        if info.name.startswith('relstorage.tests'):
            continue
        names.append(info.name)
    return [importlib.import_module(name) for name in sorted(names)]


def test_every_shipped_module_is_scanned():
    names = {m.__name__ for m in shipped_modules()}
    # A few from each layer, so a scan that finds nothing cannot pass.
    assert {'relstorage.exceptions', 'relstorage.zodbconvert',
            'relstorage.storage.pack', 'relstorage.adapters.upgrade',
            'relstorage.adapters.sqlite.files'} <= names
    assert not any(n.startswith('relstorage.tests') for n in names)


def test_error_classes_live_in_exceptions_under_relstorage_error():
    misplaced = []
    for module in shipped_modules():
        for name, value in vars(module).items():
            if not (inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == module.__name__):
                continue
            qualified = '%s.%s' % (module.__name__, name)
            if qualified in PRIVATE_SIGNALS | TESTING_ERRORS:
                continue
            if module is not exceptions:
                misplaced.append('%s: define it in relstorage.exceptions'
                                 % qualified)
            elif not issubclass(value, RelStorageError):
                misplaced.append('%s: derive it from RelStorageError'
                                 % qualified)
    assert misplaced == []


def _existing_class(qualified):
    """``(module, name)`` of an allow-list entry, which must name a real
    class (a renamed one would leave a stale entry that hides nothing)."""
    module, name = qualified.rsplit('.', 1)
    assert inspect.isclass(getattr(importlib.import_module(module),
                                   name)), qualified
    return module, name


def test_private_signals_exist_and_stay_private():
    # Only private names.
    for qualified in PRIVATE_SIGNALS:
        assert _existing_class(qualified)[1].startswith('_'), qualified


def test_testing_errors_exist_and_stay_in_the_testing_package():
    for qualified in TESTING_ERRORS:
        module = _existing_class(qualified)[0]
        assert module.startswith('relstorage.testing.'), qualified


def test_moved_errors_keep_their_old_names_and_bases():
    from ZODB.POSException import ConflictError
    from ZODB.POSException import StorageError
    from relstorage.adapters.upgrade import UpgradeRefused
    from relstorage.storage.copy import CopyError
    from relstorage.storage.pack.pack import PackAlreadyRunning
    from relstorage.zodbconvert import UsageError
    assert UpgradeRefused is exceptions.UpgradeRefused
    assert CopyError is exceptions.CopyError
    assert PackAlreadyRunning is exceptions.PackAlreadyRunning
    assert UsageError is exceptions.UsageError
    # What callers catch them as still catches them.
    assert issubclass(PackAlreadyRunning, StorageError)
    assert issubclass(UpgradeRefused, exceptions.SchemaError)
    assert issubclass(exceptions.UnableToLockRows, ConflictError)
    assert issubclass(exceptions.UnableToLockRows, RelStorageError)


#: Where shipped code may look at the environment: (file under
#: relstorage/, function) -> why that is no behaviour from the environment.
ENVIRONMENT_READS = {
    # XDG_DATA_HOME: the established convention for per-user data; it
    # only places the default data directory (data-dir replaces it).
    ('defaultlocation.py', 'per_user_data_dir'),
    # libpq's PG* variables, only to describe where libpq connects (libpq
    # reads them itself; relstorage passes the DSN through).
    ('adapters/postgresql/dsn.py', 'dsn_location'),
    # The environment handed to a child process, passed through unread.
    ('children.py', 'child_env'),
    # Test configuration, read by the testing support only: the
    # RELSTORAGE_TEST_* settings naming the test servers (at module
    # level), and CI, under which an unreachable server fails a test
    # rather than skipping it.
    ('testing/dbs.py', None),
    ('testing/dbs.py', 'in_ci'),
    # XDG_CACHE_HOME: where the tests keep what they download between
    # runs (the established convention for per-user caches).
    ('testing/cache.py', 'cache_root'),
    # A private test server's environment: the caller's, less the PG*
    # and MYSQL* variables that would point it elsewhere.
    ('testing/processes.py', 'server_env'),
    # The environment of a user's shell for a tool run from a copy of the
    # checkout (buildout, an installed wheel): the caller's, less
    # PYTHONPATH and VIRTUAL_ENV.
    ('testing/checkout.py', 'user_environment'),
}
_ENVIRONMENT_NAMES = {'environ', 'environb', 'getenv', 'getenvb'}


def environment_reads(path):
    """``(line, function)`` of every use of os.environ / os.getenv (as an
    attribute of ``os`` or imported from it) in the file *path*."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if (isinstance(node, ast.Attribute)
                and node.attr in _ENVIRONMENT_NAMES
                and isinstance(node.value, ast.Name)
                and node.value.id == 'os'):
            found.append((node.lineno, function))
        if (isinstance(node, ast.ImportFrom) and node.module == 'os'
                and any(a.name in _ENVIRONMENT_NAMES for a in node.names)):
            found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)
    visit(tree, None)
    return found


def shipped_files():
    return sorted(p for p in SOURCE.rglob('*.py')
                  if 'tests' not in p.relative_to(SOURCE).parts)


def test_the_environment_scan_sees_reads():
    sample = SOURCE / 'defaultlocation.py'
    assert [f for _, f in environment_reads(sample)] == ['per_user_data_dir']


def test_no_behaviour_from_the_environment():
    unexpected = []
    seen = set()
    for path in shipped_files():
        rel = path.relative_to(SOURCE).as_posix()
        for line, function in environment_reads(path):
            if (rel, function) in ENVIRONMENT_READS:
                seen.add((rel, function))
            else:
                unexpected.append('%s:%d (in %s)' % (rel, line, function))
    assert unexpected == []
    # No stale entry: each allowed read is still there.
    assert seen == ENVIRONMENT_READS


#: The tests' package: only the tests import it (and the speed test's
#: tests); what anything else needs from it belongs in relstorage.testing.
TESTS_PACKAGE = 'relstorage.tests'
#: The testing support: the tests and the speed test use it, the storage
#: never does.
TESTING_PACKAGE = 'relstorage.testing'
_IMPORTERS = {'import_module', '__import__'}


def _within(name, target):
    return name == target or name.startswith(target + '.')


def _absolute(module, level, package):
    """The absolute name of ``from <level dots><module> import``."""
    if not level:
        return module or ''
    base = package.split('.')[:len(package.split('.')) - (level - 1)]
    return '.'.join(base + ([module] if module else []))


def _imported(node, package):
    """The absolute names the import statement *node* (of a module of
    *package*) binds: ``a.b`` for ``import a.b`` and for ``from a import
    b``, relative imports resolved; [] for any other node."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = _absolute(node.module, node.level, package)
        return ['%s.%s' % (base, a.name) for a in node.names]
    return []


def _docstrings(tree):
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return {id(n.body[0].value) for n in nodes
            if n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def imports_of(target, source, package):
    """Lines of *source* (a module of *package*) that import the package
    *target*: ``import``, ``from ... import`` (relative ones resolved),
    ``importlib.import_module``/``__import__`` of a string, and code for
    a child process (any string but a docstring that names it)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        names = _imported(node, package)
        if (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, 'attr', getattr(node.func, 'id', None))
              in _IMPORTERS):
            name = node.args[0].value
            level = len(name) - len(name.lstrip('.'))
            names = [_absolute(name.lstrip('.'), level, package)]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings
              and re.search(r'\b%s\b' % re.escape(target), node.value)):
            names = [target]
        if any(_within(n, target) for n in names):
            found.append(node.lineno)
    return sorted(set(found))


def modules_outside_the_tests():
    """``(path, package)`` of every module of relstorage and
    relstorage_speedtest but their tests."""
    root = SOURCE.parent
    found = []
    for top in ('relstorage', 'relstorage_speedtest'):
        for path in sorted((root / top).rglob('*.py')):
            parts = path.relative_to(root).with_suffix('').parts
            if parts[1:2] == ('tests',):
                continue
            package = parts if parts[-1] == '__init__' else parts[:-1]
            found.append((path, '.'.join(p for p in package
                                         if p != '__init__')))
    return found


def test_the_tests_import_scan_sees_every_form():
    sample = textwrap.dedent('''
        """Docstrings may name relstorage.tests."""
        import relstorage.tests.conftest
        from relstorage.tests import conftest
        from relstorage import tests
        from ..tests import conftest
        from .. import tests
        importlib.import_module('relstorage.tests.conftest')
        __import__('..tests', globals())
        subprocess.run(['python', '-m', 'relstorage.tests.chaos'])
        from relstorage.testing import dbs
        from . import dbs
        ''')
    assert imports_of(TESTS_PACKAGE, sample, 'relstorage.testing') == list(
        range(3, 11))
    names = {str(p.relative_to(SOURCE.parent))
             for p, _ in modules_outside_the_tests()}
    assert {'relstorage/storage/pack/pack.py', 'relstorage/testing/dbs.py',
            'relstorage_speedtest/main.py'} <= names
    assert not any('/tests/' in n for n in names)


def importers_of(target, modules):
    """``path:line`` of each import of *target* by *modules*."""
    return ['%s:%d' % (path.relative_to(SOURCE.parent), line)
            for path, package in modules
            for line in imports_of(target, path.read_text(), package)]


def test_nothing_outside_the_tests_imports_them():
    assert importers_of(TESTS_PACKAGE, modules_outside_the_tests()) == []


def test_the_storage_does_not_import_the_testing_support():
    storage = [(path, package) for path, package
               in modules_outside_the_tests()
               if not package.startswith(('relstorage_speedtest',
                                          TESTING_PACKAGE))]
    assert storage
    assert importers_of(TESTING_PACKAGE, storage) == []


def gevent_imports(modules):
    """``(path, line, at_top)`` of each import statement of gevent in
    *modules*; *at_top*: at the module's top level."""
    found = []
    for path, package in modules:
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if any(_within(n, 'gevent') for n in _imported(node, package)):
                found.append((str(path.relative_to(SOURCE.parent)),
                              node.lineno, id(node) in top))
    return found


def test_gevent_is_imported_by_the_cooperative_module_alone():
    """gevent is optional and changes nothing unless in use: only
    adapters/cooperative.py imports it, and only within its functions
    (called when an adapter cooperates), so importing any module of the
    storage never imports gevent."""
    storage = [(path, package) for path, package
               in modules_outside_the_tests()
               if not package.startswith(('relstorage_speedtest',
                                         TESTING_PACKAGE))]
    found = gevent_imports(storage)
    assert found
    assert {path for path, _, _ in found} == {
        'relstorage/adapters/cooperative.py'}
    assert not any(at_top for _, _, at_top in found)


def lines_found(scan, tmp_path, text):
    """The lines *scan* reports in a module whose source is *text*."""
    sample = tmp_path / 'sample.py'
    sample.write_text(text)
    return sorted(line for line, _ in scan(sample))


def scan_modules(scan, under='', skip=()):
    """``module:line: what`` of each report of *scan* over the shipped
    modules whose path starts with *under*, but those starting with one
    of *skip*."""
    found = []
    for path in shipped_files():
        rel = path.relative_to(SOURCE).as_posix()
        if not rel.startswith(under) or (skip and rel.startswith(skip)):
            continue
        found.extend('%s:%d: %s' % (rel, line, what)
                     for line, what in scan(path))
    return found


# -- per-database knowledge lives in the database packages ------------------

DATABASE_PACKAGES = ('adapters/sqlite/', 'adapters/postgresql/',
                     'adapters/mysql/', 'adapters/oracle/')
#: The testing support starts and fills servers of each kind by name.
TESTING_SUPPORT = ('testing/',)
#: Names (lower-cased) that only a database package may decide by.
DATABASE_NAMES = {'postgresql', 'postgres', 'mysql', 'mariadb', 'oracle',
                  'sqlite', 'sqlite3', 'postgresqladapter', 'mysqladapter',
                  'oracleadapter', 'sqliteadapter'}


def _names_a_database(node):
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.lower() in DATABASE_NAMES)


def _is_type_name(node):
    """``type(x).__name__`` or ``x.__class__.__name__``."""
    return (isinstance(node, ast.Attribute) and node.attr == '__name__'
            and (isinstance(node.value, ast.Call)
                 and getattr(node.value.func, 'id', None) == 'type'
                 or getattr(node.value, 'attr', None) == '__class__'))


def node_scan(check):
    """A scan of a module: ``(line, what)`` for each node that
    *check(node)* names (None: none of the nodes it looks for)."""
    def scan(path):
        return [(node.lineno, what)
                for node in ast.walk(ast.parse(path.read_text()))
                for what in [check(node)] if what]
    return scan


def _decision_by_name(node):
    if isinstance(node, ast.Compare):
        if any(_names_a_database(o) or _is_type_name(o)
               for o in [node.left] + node.comparators):
            return 'comparison'
    elif isinstance(node, ast.Dict):
        if any(k is not None and _names_a_database(k) for k in node.keys):
            return 'table keyed by database names'
    elif isinstance(node, ast.Subscript) and _is_type_name(node.slice):
        return 'lookup by type name'
    elif (isinstance(node, ast.Call)
          and getattr(node.func, 'attr', None) == 'get' and node.args
          and _is_type_name(node.args[0])):
        return 'lookup by type name'
    return None


#: ``(line, what)`` of each place a module decides by a database's name:
#: a comparison with one, a dict keyed by them, or a type's name compared
#: or looked up.
decisions_by_database_name = node_scan(_decision_by_name)

def test_the_database_name_scan_sees_decisions(tmp_path):
    assert lines_found(
        decisions_by_database_name, tmp_path,
        "KEYS = {'mysql': 1}\n"
        "if kind == 'postgresql': pass\n"
        "where = TABLE.get(type(adapter).__name__)\n"
        "print('the %s' % type(e).__name__)\n") == [1, 2, 3]


def test_no_shared_module_decides_by_a_database_name():
    """Shared code asks the adapter (upgrade_class, database_name,
    uri_keys, section_from_uri...); only a database package knows which
    database it is."""
    assert scan_modules(decisions_by_database_name,
                        skip=DATABASE_PACKAGES + TESTING_SUPPORT) == []


def test_every_database_declares_what_shared_code_asks():
    from relstorage.adapters.adapter import Adapter
    from relstorage.adapters.upgrade import Upgrade
    adapters = {value for module in shipped_modules()
                for value in vars(module).values()
                if inspect.isclass(value) and issubclass(value, Adapter)
                and value is not Adapter}
    assert {cls.database_name for cls in adapters} == {
        'PostgreSQL', 'MySQL', 'Oracle', 'SQLite'}
    for cls in adapters:
        assert 'driver' in cls.uri_keys
        assert (cls.section_from_uri.__func__
                is not Adapter.section_from_uri.__func__), cls
        upgrade = cls.__dict__.get('upgrade_class')
        if isinstance(upgrade, property):  # imported when asked for
            upgrade = upgrade.fget(None)
        assert upgrade is None or issubclass(upgrade, Upgrade), cls

#: The role modules every database package has (a package holds what
#: differs for its database; a newcomer who knows where one database's
#: locker is knows where the others' are).
ROLE_MODULES = ('adapter.py', 'session.py', 'schema.py', 'locker.py',
                'mover.py')


def test_every_database_package_has_the_role_modules():
    missing = ['%s%s' % (package, module) for package in DATABASE_PACKAGES
               for module in ROLE_MODULES
               if not (SOURCE / package / module).is_file()]
    assert missing == []


def test_what_replicas_need_is_the_replication_module_s():
    """A database with replicas has them served by its replication.py
    (an IReplication), not by methods of its adapter."""
    from relstorage.adapters.adapter import Adapter
    from relstorage.adapters.components import IReplication
    from relstorage.adapters.mysql.adapter import MySQLAdapter
    from relstorage.adapters.mysql.replication import MySQLReplication
    from relstorage.adapters.postgresql.adapter import PostgreSQLAdapter
    from relstorage.adapters.postgresql.replication import (
        PostgreSQLReplication)
    for cls in (MySQLReplication, PostgreSQLReplication):
        assert IReplication.implementedBy(cls)
    for adapter in (Adapter, MySQLAdapter, PostgreSQLAdapter):
        assert not any(hasattr(adapter, name) for name in IReplication)
    with_replicas = sorted(
        str(path.parent.relative_to(SOURCE)) + '/'
        for path in SOURCE.glob('adapters/*/replication.py'))
    assert with_replicas == ['adapters/mysql/', 'adapters/postgresql/']


#: What a driver's error means, asked of a session.
ERROR_QUESTIONS = ('is_disconnect', 'is_full_error', 'is_permission_error',
                   'missing_create_privilege')


def test_a_session_tells_what_its_drivers_errors_mean():
    """The error questions are the session's (adapters.session.Session,
    answered by each server database's session class), never an
    adapter's."""
    import importlib
    from relstorage.adapters.adapter import Adapter
    from relstorage.adapters.session import Session
    for name in ERROR_QUESTIONS:
        assert callable(getattr(Session, name)), name
    adapters = [Adapter]
    for package in DATABASE_PACKAGES:
        module = importlib.import_module(
            'relstorage.' + package.replace('/', '.') + 'adapter')
        adapters.extend(value for value in vars(module).values()
                        if isinstance(value, type)
                        and issubclass(value, Adapter))
    asked = sorted('%s.%s' % (cls.__name__, name) for cls in adapters
                   for name in ERROR_QUESTIONS if name in vars(cls))
    assert asked == []
    for package in ('adapters/postgresql/', 'adapters/mysql/',
                    'adapters/oracle/'):
        module = importlib.import_module(
            'relstorage.' + package.replace('/', '.') + 'session')
        answered = {name for value in vars(module).values()
                    if isinstance(value, type) and issubclass(value, Session)
                    for name in ERROR_QUESTIONS if name in vars(value)}
        assert {'is_disconnect', 'is_full_error',
                'is_permission_error'} <= answered, package


#: What opening a session takes: the connector's (IConnector), in the
#: database package's session.py.
CONNECTION_WORDS = ('def open_connection', 'def describe', 'def location',
                    'def set_up', 'def commits_announced', '.connect(',
                    'DatabaseUnavailable', 'password_command(')


def test_sessions_open_through_the_database_s_connector():
    """Each database package's session.py has the connector that opens
    and sets up its sessions (and answers describe() and location());
    its adapter.py only assembles, opening nothing itself."""
    import importlib
    from relstorage.adapters.components import IConnector
    for package in DATABASE_PACKAGES:
        module = importlib.import_module(
            'relstorage.' + package.replace('/', '.') + 'session')
        connectors = [value for value in vars(module).values()
                      if isinstance(value, type)
                      and value.__module__ == module.__name__
                      and IConnector.implementedBy(value)]
        assert connectors, package
    found = sorted(
        '%s: %s' % (package, word) for package in DATABASE_PACKAGES
        for word in CONNECTION_WORDS
        if word in (SOURCE / package / 'adapter.py').read_text())
    assert found == []
    # The shared adapter hands these to the connector.
    from relstorage.adapters.adapter import Adapter
    for name in ('open_connection', 'describe', 'location'):
        assert 'self.connector.' in inspect.getsource(getattr(Adapter, name))


def _patched_in(node):
    """A part patched in at run time: ``setattr`` on an adapter or a
    session, or a class made by ``type(name, bases, namespace)``."""
    if not isinstance(node, ast.Call):
        return None
    name = getattr(node.func, 'id', None)
    if name == 'type' and len(node.args) == 3:
        return 'class made with type()'
    if name == 'setattr' and node.args:
        target = ast.unparse(node.args[0]).lower()
        if 'adapter' in target or 'session' in target:
            return 'setattr on %s' % ast.unparse(node.args[0])
    return None


patched_in = node_scan(_patched_in)


def _galera_branch(node):
    """A decision by whether the server is a Galera node."""
    if isinstance(node, (ast.If, ast.IfExp, ast.While)) and \
            'galera' in ast.unparse(node.test).lower():
        return 'branch on %s' % ast.unparse(node.test)
    if isinstance(node, ast.BoolOp) and any(
            'galera' in ast.unparse(value).lower()
            for value in node.values[:-1]):
        return 'branch on %s' % ast.unparse(node)
    return None


galera_branches = node_scan(_galera_branch)


def test_the_variant_scans_see_patches_and_branches(tmp_path):
    assert lines_found(
        patched_in, tmp_path,
        "setattr(adapter, 'locker_class', cls)\n"
        "Pooled = type('Pooled', (Mixin, cls), {})\n"
        "setattr(self.seen, name, value)\n"
        "kind = type(error)\n"
        "setattr(session, attribute, None)\n") == [1, 2, 5]
    assert lines_found(
        galera_branches, tmp_path,
        "if self.galera: pass\n"
        "x = a if adapter.galera else b\n"
        "y = self.galera and session.scalar(q)\n"
        "kinds = (galera.GaleraNode, SingleServer)\n") == [1, 2, 3]


def test_variants_are_declared_classes_chosen_at_open():
    """A transaction pooler's parts, a Galera node's, a driver without
    COPY: classes (or a class's property) chosen in one place when an
    adapter is made, never patched in; only the Galera module knows
    Galera."""
    assert scan_modules(patched_in) == []
    assert scan_modules(galera_branches, 'adapters/',
                        skip='adapters/mysql/galera.py') == []


def test_the_pack_is_one_package():
    """Graph, kept references, pages, workers, several databases: the
    pack's modules are storage/pack/, beside none of the ZODB-facing
    ones."""
    pack = {p.name for p in (SOURCE / 'storage' / 'pack').glob('*.py')}
    assert {'pack.py', 'multidb.py', 'graph.py', 'keptrefs.py',
            'prepackio.py', 'workers.py'} <= pack
    strays = [p.name for p in (SOURCE / 'storage').glob('*.py')
              if 'pack' in p.stem or p.stem.startswith('ref')
              or p.stem.startswith('kept')]
    assert strays == []


def test_the_pack_leaves_database_features_to_its_session():
    """What a kind of database adds to a batch (a cluster that refuses
    one, the pause between batches) is the pack writer's
    (IPackWriter.run_batch, pause_between_batches), not the pack's."""
    for path in (SOURCE / 'storage' / 'pack').glob('*.py'):
        text = path.read_text()
        assert 'ClusterConflict' not in text, path.name
        assert 'pack_pause_between_batches' not in text, path.name
    from relstorage.adapters.mysql import galera
    from relstorage.adapters.mysql.server import SingleServer
    from relstorage.adapters.packwork import PackWriter
    assert SingleServer.pack_writer_class is PackWriter
    assert issubclass(galera.GaleraNode.pack_writer_class, PackWriter)
    assert (galera.GaleraNode.pack_writer_class.run_batch
            is not PackWriter.run_batch)


#: The most lines a library module may have: one concern per module.
MODULE_LINES = 600


def test_no_library_module_is_over_the_bound():
    speedtest = SOURCE.parent / 'relstorage_speedtest'
    files = shipped_files() + sorted(speedtest.glob('*.py'))
    long = ['%s: %d lines' % (path.relative_to(SOURCE.parent), lines)
            for path in files
            for lines in [len(path.read_text().splitlines())]
            if lines > MODULE_LINES]
    assert long == []


# -- one way to compose SQL ---------------------------------------------------

_SQL_WORDS = re.compile(r'%s|\b(SELECT|FROM|WHERE|JOIN|INSERT|DELETE|UPDATE|'
                        r'INDEX|LIMIT)\b')


def _sqlish(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_SQL_WORDS.search(node.value))
    name = getattr(node, 'id', None) or getattr(node, 'attr', None) or ''
    return any(word in name.lower() for word in ('sql', 'stmt', 'script'))


def _sql_rewrite(node):
    if (isinstance(node, ast.Call)
            and getattr(node.func, 'attr', None) == 'replace'
            and any(_sqlish(n) for n in [node.func.value] + node.args)):
        return '.replace() on SQL'
    if (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and '%%s' in node.value):
        return '%%s'
    return None


#: ``(line, what)`` of each ``.replace()`` on SQL text (a statement or a
#: piece of one) and each ``%%s`` (a ``%`` that means a slot and a
#: parameter in one string) in a module.
sql_rewrites = node_scan(_sql_rewrite)

def test_the_sql_rewrite_scan_sees_rewrites(tmp_path):
    assert lines_found(
        sql_rewrites, tmp_path,
        "a = sql.replace('SELECT ', 'SELECT STRAIGHT_JOIN ', 1)\n"
        "b = 'SELECT GET_LOCK(%s, %%s)' % NAME\n"
        "c = stmt.replace('%s', '?')\n"
        "d = name.replace('-', '_')\n") == [1, 2, 3]


def test_statements_are_composed_one_way():
    """Statements get their identifiers, hints and clauses through the
    slots of adapters.sql.SQL (or are stated whole per database), never by
    rewriting shared text; adapters.sql alone translates parameters."""
    assert scan_modules(sql_rewrites, 'adapters/',
                        skip='adapters/sql.py') == []


#: Words of statements and their clauses, for the scan of SQL text.
_STATEMENT_WORDS = re.compile(
    r'%s|\b(SELECT|FROM|WHERE|JOIN|INSERT|DELETE|UPDATE|INDEX|LIMIT|CREATE|'
    r'DROP|ALTER|MERGE|TABLE|LENGTH|GET_LOCK|RELEASE_LOCK|ANALYZE)\b')


def _is_sql_text(node):
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and bool(_STATEMENT_WORDS.search(node.value)))


def _text_templates(tree):
    """Names given SQL text (a str) in the module *tree*."""
    return {target.id if isinstance(target, ast.Name) else target.attr
            for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and _is_sql_text(node.value)
            for target in node.targets
            if isinstance(target, (ast.Name, ast.Attribute))}


def _templates_in(under):
    names = set()
    for path in shipped_files():
        if path.relative_to(SOURCE).as_posix().startswith(under):
            names |= _text_templates(ast.parse(path.read_text()))
    return names


def sql_text_compositions(path, templates=None):
    """``(line, what)`` of each ``.format()`` on SQL text (a literal, or
    a name some module gives SQL text; adapters.sql.SQL's format is the
    way) and each f-string with SQL words in the module *path*."""
    tree = ast.parse(path.read_text())
    if templates is None:
        templates = _text_templates(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and any(
                _is_sql_text(part) for part in node.values):
            found.append((node.lineno, 'f-string SQL'))
        elif (isinstance(node, ast.Call)
              and getattr(node.func, 'attr', None) == 'format'):
            receiver = node.func.value
            name = getattr(receiver, 'id', None) or getattr(
                receiver, 'attr', None)
            if _is_sql_text(receiver) or name in templates:
                found.append((node.lineno, '.format() on SQL text'))
    return found


def test_the_sql_text_scan_sees_compositions(tmp_path):
    assert lines_found(
        sql_text_compositions, tmp_path,
        "A = 'SELECT zoid FROM {table}'\n"
        "a = A.format(table=t)\n"
        "b = 'DELETE FROM {t}'.format(t=t)\n"
        "c = f'SELECT {x} FROM y'\n"
        "d = EMPTY_TABLE.format(table=t)\n"
        "e = '{} items'.format(n)\n") == [2, 3, 4]


def test_sql_text_is_not_formatted_outside_adapters_sql():
    """SQL text gets its slots filled by adapters.sql.SQL alone: no
    str.format template or f-string builds a statement."""
    templates = _templates_in('adapters/')
    assert scan_modules(lambda path: sql_text_compositions(path, templates),
                        'adapters/', skip='adapters/sql.py') == []


#: Text that begins a statement or one of its clauses.
_STATEMENT_START = re.compile(
    r'^[\s;]*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|MERGE|SET|'
    r'LOCK|LISTEN|NOTIFY|COPY|DO|CALL|WITH|FROM|WHERE|JOIN|AND|OR|ORDER|'
    r'GROUP|LIMIT|FETCH|VALUES|ON|RETURNING|FOR|PREPARE|EXECUTE|TRUNCATE|'
    r'ANALYZE)\b')
#: Calls giving placeholders only (the IN %s convention).
_PLACEHOLDER_CALLS = {'in_list'}


def _statement_text(node):
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and bool(_STATEMENT_START.match(node.value)))


def _joined(node):
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _joined(node.left) + _joined(node.right)
    return [node]


def _placeholders(node):
    return isinstance(node, ast.Call) and (
        getattr(node.func, 'id', None)
        or getattr(node.func, 'attr', None)) in _PLACEHOLDER_CALLS


#: Names that hold a statement by the project's conventions.
_STATEMENT_NAME = re.compile(r'(_sql|_SQL|_DDL)$')


def _statement_names(tree):
    """The module-level names of *tree* bound to statements: statement
    text, an SQL of it, or such a statement filled or formatted."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            value = node.value
            # A table of statements: its items are.
            if isinstance(value, ast.DictComp):
                value = value.value
            elif isinstance(value, ast.Dict) and value.values:
                value = value.values[0]
            while isinstance(value, ast.Call):
                if (isinstance(value.func, ast.Attribute)
                        and value.func.attr in ('format', 'fill')):
                    value = value.func.value
                elif value.args and getattr(value.func, 'id', '') == 'SQL':
                    value = value.args[0]
                else:
                    break
            if _statement_text(value) or _statement_ref(value, names):
                names.update(t.id for t in node.targets
                             if isinstance(t, ast.Name))
    return names


def _statement_ref(node, names):
    """Whether *node* names a statement: one of *names*, an attribute or
    name spelt as a statement's (``*_sql``), or an item of either."""
    if isinstance(node, ast.Subscript):
        return _statement_ref(node.value, names)
    name = getattr(node, 'id', None) or getattr(node, 'attr', None)
    if not isinstance(node, (ast.Name, ast.Attribute)) or not name:
        return False
    return name in names or bool(_STATEMENT_NAME.search(name))


def sql_joins(path):
    """``(line, what)`` of each statement joined from parts with ``+`` or
    ``+=`` or filled by ``%`` (but for ``%d``, an int where the database
    takes no bind, and the IN %s convention) in the module *path*: a
    statement's text, or a name that holds one."""
    tree = ast.parse(path.read_text())
    names = _statement_names(tree)
    inner = {id(child) for node in ast.walk(tree)
             if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
             for child in (node.left, node.right)}

    def statement(part):
        return _statement_text(part) or _statement_ref(part, names)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            parts = _joined(node)
            if id(node) not in inner and any(map(statement, parts)) \
                    and not all(isinstance(p, ast.Constant) for p in parts):
                found.append((node.lineno, 'statement joined with +'))
        elif (isinstance(node, ast.AugAssign)
              and isinstance(node.op, ast.Add)
              and (statement(node.value) or statement(node.target))):
            found.append((node.lineno, 'statement joined with +='))
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
              and _statement_text(node.left)
              and re.search(r'%[^d%]', node.left.value.replace('%%', ''))
              and not _placeholders(node.right)):
            found.append((node.lineno, 'statement filled with %'))
    return found


def test_the_sql_join_scan_sees_joins(tmp_path):
    assert lines_found(
        sql_joins, tmp_path,
        "a = 'DELETE FROM object_state WHERE ' + where\n"
        "b = ('SELECT 1; ' + 'SELECT 2')\n"
        "sql += ' ORDER BY tid'\n"
        "c = 'SELECT zoid FROM (%s) p' % inner\n"
        "d = 'ALTER SEQUENCE s INCREMENT BY %d' % step\n"
        "e = 'DELETE FROM t WHERE zoid IN %s' % in_list(oids)\n"
        "f = msg + '; the user needs the CREATE SESSION privilege'\n"
        "g = 'INSERT INTO t VALUES ' + rows + tail\n"
        "H = SQL('SELECT 1 FROM {t}').format(t='x')\n"
        "i = H + ' FOR UPDATE'\n"
        "j = self.deleted_sql + clause\n"
        "k = INSERTS[kind] + ', '.join(rows)\n"
        "INSERTS = {1: SQL('INSERT INTO t VALUES ')}\n"
        "l = LOCK + '; ' + last_tid_sql\n"
        "m = (A_DDL, B_DDL) + tuple(more)\n"
        "n = 'PREPARE p AS ' + numbered(load)\n") == [1, 3, 4, 8, 10, 11,
                                                       12, 14, 16]


def test_statements_are_not_joined_from_parts():
    """A statement's parts meet in the slots of adapters.sql's SQL or
    Rows, or it is written whole, or several go as one adapters.sql.script:
    never joined with ``+`` or filled by ``%`` where a call happens to
    put them."""
    assert scan_modules(sql_joins, 'adapters/', skip='adapters/sql.py') == []


def test_sql_slots_and_quoting():
    from relstorage.adapters.sql import SQL
    from relstorage.adapters.sql import Identifier
    from relstorage.adapters.sql import listed
    from relstorage.adapters.sql import numbered
    from relstorage.adapters.sql import qmark
    from relstorage.adapters.sql import without_parameters
    stmt = SQL('SELECT {hint}zoid FROM {table} WHERE zoid = %s')
    assert stmt.slots == {'hint', 'table'}
    assert stmt.format(hint='', table='object_state') == (
        'SELECT zoid FROM object_state WHERE zoid = %s')
    assert stmt.format(hint='STRAIGHT_JOIN ', table=Identifier('a"b')) == (
        'SELECT STRAIGHT_JOIN zoid FROM "a""b" WHERE zoid = %s')
    assert stmt.format(quote='`', hint='', table=Identifier('transaction')) \
        == 'SELECT zoid FROM `transaction` WHERE zoid = %s'
    # A slot left empty, or one the text does not have, is refused.
    for parts in ({'hint': ''}, {'hint': '', 'table': 't', 'index': ''}):
        try:
            stmt.format(**parts)
        except ValueError:
            pass
        else:
            raise AssertionError(parts)
    assert SQL('{a} {b}').format(a=SQL('x'), b='y') == 'x y'
    # Slots filled now, the others left for later (braces in a part are
    # text, not slots).
    partly = SQL('SELECT {cols} FROM {table} WHERE {where}').fill(
        cols='a', table=Identifier('t{x}'))
    assert partly.slots == {'where'}
    assert partly.format(where='a = %s') == (
        'SELECT a FROM "t{x}" WHERE a = %s')
    try:
        partly.fill(table='u')
    except ValueError:
        pass
    else:
        raise AssertionError('filled a slot the statement lacks')
    assert listed(['a', 'b`c'], '`') == '`a`, `b``c`'
    assert qmark('a = %s AND b = %s') == 'a = ? AND b = ?'
    assert numbered('a = %s AND b = %s') == 'a = $1 AND b = $2'
    assert numbered('SELECT 1') == 'SELECT 1'
    assert without_parameters("LIKE 'a%'") == "LIKE 'a%%'"


# -- errors classified by code ------------------------------------------------

def _error_text(node):
    """``str(e)``, ``e.args[0]`` or ``e.message``: an error's words."""
    if isinstance(node, ast.Call) and getattr(node.func, 'id', None) == 'str':
        return True
    if isinstance(node, ast.Subscript):
        return getattr(node.value, 'attr', None) == 'args'
    return getattr(node, 'attr', None) == 'message'


def _classification_by_text(node):
    if (isinstance(node, ast.Compare)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and any(_error_text(n) for n in node.comparators)):
        return 'words in an error'
    if (isinstance(node, ast.Call)
            and getattr(node.func, 'attr', None) in ('search', 'match',
                                                     'findall')
            and any(_error_text(n) for n in node.args)):
        return 'pattern on an error'
    return None


#: ``(line, what)`` of each test of whether an error's text holds some
#: words (``'locked' in str(e)``) or matches a pattern, in a module.
classifications_by_text = node_scan(_classification_by_text)

def test_the_error_text_scan_sees_classifications(tmp_path):
    assert lines_found(
        classifications_by_text, tmp_path,
        "if 'locked' in str(e): pass\n"
        "codes = _CODE.findall(str(error))\n"
        "if 'x' not in e.args[0]: pass\n"
        "if e.args[0] in LOCK_ERRORS: pass\n") == [1, 2, 3]


def test_driver_errors_are_classified_by_code():
    """Each database package tells what a driver error means by its code
    (sqlite_errorcode, SQLSTATE or the driver's class for it, MySQL's
    errno, Oracle's ORA- number), never by the words of its message."""
    assert scan_modules(classifications_by_text, 'adapters/') == []


#: What storage/ may import of adapters/: the contract, nothing else.
ADAPTERS_PACKAGE = 'relstorage.adapters'
STORAGE_MAY_IMPORT = ('relstorage.adapters.interfaces',
                      'relstorage.adapters.pack_interfaces')


def adapters_imports(source, package):
    """``(line, name)`` of each name of relstorage.adapters that *source*
    (a module of *package*) imports."""
    return [(node.lineno, name) for node in ast.walk(ast.parse(source))
            for name in _imported(node, package)
            if _within(name, ADAPTERS_PACKAGE)]


def test_the_adapters_import_scan_resolves_relative_imports():
    sample = textwrap.dedent('''
        from ..adapters import interfaces
        from ..adapters.session import chunks
        from .. import adapters
        import relstorage.adapters.sqlite
        from relstorage.adapters.interfaces import IPackWriter
        ''')
    assert adapters_imports(sample, 'relstorage.storage') == [
        (2, 'relstorage.adapters.interfaces'),
        (3, 'relstorage.adapters.session.chunks'),
        (4, 'relstorage.adapters'),
        (5, 'relstorage.adapters.sqlite'),
        (6, 'relstorage.adapters.interfaces.IPackWriter')]


def test_storage_meets_adapters_only_through_the_interfaces():
    storage = [(path, package) for path, package
               in modules_outside_the_tests()
               if _within(package, 'relstorage.storage')]
    assert storage
    wrong = ['%s:%d imports %s' % (path.relative_to(SOURCE), line, name)
             for path, package in storage
             for line, name in adapters_imports(path.read_text(), package)
             if not any(_within(name, allowed)
                        for allowed in STORAGE_MAY_IMPORT)]
    assert wrong == []


def storage_reach_ins(source, filename='<source>'):
    """``(line, expression)`` of every private attribute reached through
    an object named ``storage`` (``storage._x``, ``db.storage._x``) and
    of every ``._adapter``, in the Python *source*."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, ast.Attribute)
                and node.attr.startswith('_')
                and not node.attr.startswith('__')):
            continue
        base = node.value
        named = (base.id if isinstance(base, ast.Name)
                 else base.attr if isinstance(base, ast.Attribute) else '?')
        if named == 'storage' or node.attr == '_adapter':
            found.append((node.lineno, '%s.%s' % (named, node.attr)))
    return found


def test_the_reach_in_scan_sees_reach_ins():
    source = ('a = storage._cache\n'
              'b = db.storage._options\n'
              'c = self._adapter\n'
              'd = storage.adapter, storage.__class__, conn._storage\n')
    assert storage_reach_ins(source) == [
        (1, 'storage._cache'), (2, 'storage._options'),
        (3, 'self._adapter')]


def test_no_module_outside_storage_reaches_into_a_storage():
    """Metrics, blobs, tools are handed what they need (values, callables,
    RelStorage.adapter): only relstorage/storage/ knows a storage's
    private parts; nothing outside it holds an ``_adapter`` either."""
    speedtest = SOURCE.parent / 'relstorage_speedtest'
    files = shipped_files() + sorted(speedtest.glob('*.py'))
    assert speedtest / 'main.py' in files
    found = []
    for path in files:
        rel = path.relative_to(SOURCE.parent).as_posix()
        if rel.startswith('relstorage/storage/'):
            continue
        for line, expression in storage_reach_ins(path.read_text(), rel):
            found.append('%s:%d %s' % (rel, line, expression))
    assert found == []
