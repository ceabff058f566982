"""ZODB's storage conformance suites, and its blob suite, on PostgreSQL
through a private pgbouncer (in front of a private PostgreSQL server), in
pool_mode = transaction (the storage told: pooler transaction) and in
pool_mode = session (the storage not told, as a session pooler needs)."""
import pytest

from .blob_conformance import blob_cases
from .blob_conformance import run_case
from .conformance import POOL_MODES
from .conformance import make_classes

for _mode in POOL_MODES:
    globals().update(make_classes('postgresql', pooler=_mode))
del _mode


@pytest.mark.parametrize('layer, test, history_free', [
    case for mode in POOL_MODES for case in blob_cases('postgresql', mode)])
def test_blob_suite(layer, test, history_free):
    run_case(layer, test, history_free)
