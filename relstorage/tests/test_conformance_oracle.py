"""ZODB's storage conformance suites, and its blob suite, on oracle.

They run only against a configured server (RELSTORAGE_TEST_ORACLE_*, see
dbs.py); otherwise every one of them is skipped with that reason, and the
summary at the end of the run says "oracle: not run (no server
configured)"."""
import pytest

from relstorage.testing.dbs import require

from .blob_conformance import blob_cases
from .blob_conformance import run_case
from .conformance import make_classes

globals().update(make_classes('oracle'))


@pytest.mark.parametrize('layer, test, history_free', blob_cases('oracle'))
def test_blob_suite(layer, test, history_free):
    # Before the suite's doctests, which would report the skip as an error.
    require('oracle')
    run_case(layer, test, history_free)
