"""Fails when fewer ZODB conformance tests exist per database and history
mode than ``conformance_counts.json`` records -- for example because a ZODB
release renamed its test methods and our loader stopped finding them."""
import collections
import json
import os

from .blob_conformance import count_blob_cases
from .conformance import count_tests
from .conformance import VARIANTS
from .conformance import make_classes
from .dbs import DATABASES

COUNTS_FILE = os.path.join(os.path.dirname(__file__),
                           'conformance_counts.json')


def current_counts():
    counts = collections.Counter()
    for db in DATABASES:
        counts.update(count_blob_cases(db))
    for db, driver in VARIANTS:
        for cls in make_classes(db, driver).values():
            counts[cls.conformance_key] += count_tests(cls)
    return dict(counts)


def test_no_conformance_suite_shrank():
    with open(COUNTS_FILE) as f:
        recorded = json.load(f)
    counts = current_counts()
    for key, expected in recorded.items():
        assert counts.get(key, 0) >= expected, (
            'only %d conformance tests for %s, %d recorded'
            % (counts.get(key, 0), key, expected))


def test_every_database_and_mode_is_recorded():
    with open(COUNTS_FILE) as f:
        recorded = json.load(f)
    assert set(current_counts()) == set(recorded)


def test_both_method_prefixes_are_loaded():
    # ZODB 6 kept a few check* names (e.g. checkResolve in older mixins);
    # each must be reachable under a test_ name.
    for cls in make_classes('sqlite').values():
        names = set(dir(cls))
        for name in names:
            if name.startswith('check') and callable(getattr(cls, name)):
                assert 'test_' + name in names, name


if __name__ == '__main__':  # pragma: no cover -- maintainers' helper
    print(json.dumps(current_counts(), indent=2, sort_keys=True))
