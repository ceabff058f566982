"""ZODB's storage conformance suites, and its blob suite, on postgresql."""
import pytest

from .blob_conformance import blob_cases
from .blob_conformance import run_case
from .conformance import make_classes

globals().update(make_classes('postgresql'))


@pytest.mark.parametrize('layer, test, history_free', blob_cases('postgresql'))
def test_blob_suite(layer, test, history_free):
    run_case(layer, test, history_free)
