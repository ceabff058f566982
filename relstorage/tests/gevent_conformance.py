"""The storage suites (tests/conformance.py) run by unittest in a child
process that gevent patched first (test_gevent)::

    python -c 'from gevent import monkey; monkey.patch_all(); \
        from relstorage.tests.gevent_conformance import main; main()' \
        DATABASE DRIVER MODES

DRIVER may be empty (the adapter's default); MODES is ``HP``, ``HF`` or
``HP,HF``. Prints one line of JSON: the tests run, the tests skipped,
and each failure or error with its traceback; the slowest tests go to
stderr. The tests of NOT_RUN are left out, and said to be.
"""
import json
import sys
import time
import unittest

from .conformance import RelStorageTestBase
from .conformance import make_classes

#: How many of the slowest tests are reported.
SLOWEST = 12
#: driver -> tests not run through it under gevent, and why.
NOT_RUN = {
    'PyMySQL': (RelStorageTestBase.MANY_CLIENTS,
                "64 clients' storages through PyMySQL (pure Python) do not "
                'finish within the race tests\' 120 s on a busy two-core '
                'machine, with gevent or without it (plain threads time out '
                'the same way); mysqlclient runs them under gevent'),
}


def classes(database, driver, modes):
    """The suites' classes of *database* through *driver* (None: the
    default) in the history *modes* (``HP``, ``HF``)."""
    return [cls for cls in make_classes(database, driver).values()
            if ('HP' if cls.keep_history else 'HF') in modes]


def run(test_classes, left_out=()):
    """``(run, skipped, [failure, ...], [(seconds, test), ...])`` of the
    tests of *test_classes* but those named in *left_out*."""
    loader = unittest.TestLoader()
    durations = []
    result = unittest.TestResult()
    for cls in test_classes:
        for test in loader.loadTestsFromTestCase(cls):
            if test._testMethodName in left_out:
                continue
            start = time.perf_counter()
            test(result)
            durations.append((time.perf_counter() - start, str(test)))
    failed = ['%s\n%s' % (test, trace)
              for test, trace in result.failures + result.errors]
    return result.testsRun, len(result.skipped), failed, durations


def main(argv=None):
    database, driver, modes = (argv or sys.argv[1:])[:3]
    left_out = NOT_RUN.get(driver, ((), ''))
    if left_out[0]:
        print('not run: %s: %s' % (', '.join(sorted(left_out[0])),
                                   left_out[1]), file=sys.stderr)
    ran, skipped, failed, durations = run(
        classes(database, driver or None, modes.split(',')), left_out[0])
    for seconds, test in sorted(durations, reverse=True)[:SLOWEST]:
        print('%7.2fs %s' % (seconds, test), file=sys.stderr)
    print(json.dumps([ran, skipped, failed]), flush=True)
