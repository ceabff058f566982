"""ZODB's storage conformance suites, and its blob suite, on mysql."""
import pytest

from .blob_conformance import blob_cases
from .blob_conformance import run_case
from .conformance import make_classes

globals().update(make_classes('mysql'))


@pytest.mark.parametrize('layer, test, history_free', blob_cases('mysql'))
def test_blob_suite(layer, test, history_free):
    run_case(layer, test, history_free)
