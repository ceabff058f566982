"""ZODB's reusable blob suite (``ZODB.tests.testblob.storage_reusable_suite``)
as pytest tests, for blobs kept in the database and in a shared blob-dir;
and its external-GC doctest (``IExternalGC_suite``), which uses a blob too.

The suite is a unittest suite of doctests and test classes meant for
zope.testrunner, with a layer that makes ``time.time()`` increase on every
call; ``run_case`` plays the layer's part around each test.
"""
import doctest
import gc
import os
import unittest

import pytest
from ZODB.tests.PackableStorage import IExternalGC_suite
from ZODB.tests.testblob import storage_reusable_suite

from relstorage.testing.dbs import POOLER_OPTIONS
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import require_pooler

#: Names the suite gives its storages -> our test database.
WHICH = {'data': 'main', '1': 'main', '2': 'dst', 'dest': 'dst'}

#: Blob modes, by the key suffix they are counted under.
MODES = {'blobs-db': False, 'blobs-shared': True}


def _flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _flatten(test)
        else:
            yield test


def _factory(database, keep_history, pooler=None):
    """A DatabaseFactory, through a private pgbouncer in the pool mode
    *pooler* if given (started when the first test needs it)."""
    if pooler is None:
        return DatabaseFactory(database, keep_history)
    return DatabaseFactory(database, keep_history,
                           server=require_pooler(pooler),
                           pooler=POOLER_OPTIONS[pooler])


def make_suite(database, keep_history, shared, pooler=None):
    def create(name, blob_dir):
        factory = _factory(database, keep_history, pooler)
        return factory.storage(WHICH.get(name, 'main'), zap=True,
                               blob_dir=blob_dir, shared_blob_dir=shared)
    mode = 'HP' if keep_history else 'HF'
    return storage_reusable_suite(
        'RelStorage%s%s%s' % (database, mode, 'Shared' if shared else 'DB'),
        create,
        test_blob_storage_recovery=True,
        test_packing=keep_history,
        test_undo=keep_history)


def external_gc_suite(database, keep_history, pooler=None):
    """The IExternalGC doctest: deleteObject, then a pack without GC
    removes what was deleted (the suite's storage packs with pack-gc
    off and keeps blobs in the database)."""
    def create():
        factory = _factory(database, keep_history, pooler)
        # The doctest's setUp has made a fresh temporary working directory.
        return factory.storage('main', zap=True, pack_gc=False,
                               blob_dir=os.path.abspath('blobs'))
    return IExternalGC_suite(create)


def blob_cases(database, pooler=None):
    """pytest params: every test of the blob suite, per history mode and
    blob mode, and the external-GC doctest per history mode, each marked
    with the key the conformance summary counts (through a pgbouncer in
    the pool mode *pooler*, if given)."""
    params = []
    label = database + ('-pgbouncer-' + pooler if pooler else '')
    for keep_history in (True, False):
        mode = 'HP' if keep_history else 'HF'
        suites = [('%s-%s-%s' % (label, mode, suffix),
                   make_suite(database, keep_history, shared, pooler))
                  for suffix, shared in MODES.items()]
        suites.append(('%s-%s-external-gc' % (label, mode),
                       external_gc_suite(database, keep_history, pooler)))
        for key, suite in suites:
            for test in _flatten(suite):
                name = test.id().replace('ZODB.tests.testblob.', '')
                params.append(pytest.param(
                    getattr(suite, 'layer', None), test, not keep_history,
                    id='%s:%s' % (key, name),
                    marks=pytest.mark.conformance(key)))
    return params


def count_blob_cases(database, pooler=None):
    counts = {}
    for param in blob_cases(database, pooler):
        key = param.marks[0].args[0]
        counts[key] = counts.get(key, 0) + 1
    return counts


#: Examples that cannot pass for the superuser, who may write read-only
#: files: that committed blob files are read-only is still checked, by mode
#: bits, in ``test_blob_file_permissions`` of the same suite.
NOT_FOR_ROOT = ("open(blob.committed(), 'w')",)

#: Examples of the external-GC doctest that read the revision a deletion
#: replaced, which only a history-preserving storage keeps; the rest of
#: the doctest (deletion, conflicts, pack) runs history-free too.
NEEDS_HISTORY = ('storage.loadBefore(oid0, conn.root()._p_serial) ==',
                 'storage.loadBefore(oid1, conn.root()._p_serial) ==')


def _drop_examples(test, history_free):
    if not isinstance(test, doctest.DocTestCase):
        return
    dropped = (NOT_FOR_ROOT if os.geteuid() == 0 else ()) + (
        NEEDS_HISTORY if history_free else ())
    dt = test._dt_test
    dt.examples = [ex for ex in dt.examples
                   if not any(s in ex.source for s in dropped)]


def run_case(layer, test, history_free=False):
    _drop_examples(test, history_free)
    if layer is not None:
        layer.setUp()
        layer.testSetUp()
    result = unittest.TestResult()
    try:
        test.run(result)
    finally:
        if layer is not None:
            layer.testTearDown()
            layer.tearDown()
        gc.collect()  # storages the tests drop hold server connections
    problems = result.errors + result.failures
    if problems:
        pytest.fail('\n'.join(text for _, text in problems), pytrace=False)
    if result.skipped:
        pytest.skip(result.skipped[0][1])
    assert result.testsRun == 1
