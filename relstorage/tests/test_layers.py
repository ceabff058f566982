"""The layout rules the code keeps, checked over every shipped module
(everything under relstorage/ but relstorage/tests/): each rule is a
scan that fails naming the module and line that breaks it."""
import ast
import importlib
import inspect
import pathlib
import pkgutil

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
            if qualified in PRIVATE_SIGNALS:
                continue
            if module is not exceptions:
                misplaced.append('%s: define it in relstorage.exceptions'
                                 % qualified)
            elif not issubclass(value, RelStorageError):
                misplaced.append('%s: derive it from RelStorageError'
                                 % qualified)
    assert misplaced == []


def test_private_signals_exist_and_stay_private():
    # The allow-list names real classes (a renamed one would leave a
    # stale entry that hides nothing), and only private names.
    for qualified in PRIVATE_SIGNALS:
        module, name = qualified.rsplit('.', 1)
        assert name.startswith('_'), qualified
        assert inspect.isclass(getattr(importlib.import_module(module),
                                       name))


def test_moved_errors_keep_their_old_names_and_bases():
    from ZODB.POSException import ConflictError
    from ZODB.POSException import StorageError
    from relstorage.adapters.upgrade import UpgradeRefused
    from relstorage.storage.copy import CopyError
    from relstorage.storage.pack import PackAlreadyRunning
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
    speedtest = SOURCE.parent / 'speedtest'
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
