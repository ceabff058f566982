"""The layout rules the code keeps, checked over every shipped module
(everything under relstorage/ but relstorage/tests/): each rule is a
scan that fails naming the module and line that breaks it."""
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
