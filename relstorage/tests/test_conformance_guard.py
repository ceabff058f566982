"""Fails when fewer ZODB conformance tests exist per database and history
mode than ``conformance_counts.json`` records -- for example because a ZODB
release renamed its test methods and our loader stopped finding them."""
import collections
import json
import os

from relstorage.testing.dbs import ALL_DATABASES
from relstorage.testing.dbs import ORACLE_NOT_CONFIGURED

from .blob_conformance import count_blob_cases
from .conformance import count_tests
from .conformance import POOL_MODES
from .conformance import CLUSTER_LAYOUTS
from .conformance import REPLICA_DATABASES
from .conformance import VARIANTS
from .conformance import make_classes
from .summary import database_lines

COUNTS_FILE = os.path.join(os.path.dirname(__file__),
                           'conformance_counts.json')


def current_counts():
    counts = collections.Counter()
    for db in ALL_DATABASES:
        counts.update(count_blob_cases(db))
    for db, driver in VARIANTS:
        for cls in make_classes(db, driver).values():
            counts[cls.conformance_key] += count_tests(cls)
    for db in REPLICA_DATABASES:
        for cls in make_classes(db, replicas=True).values():
            counts[cls.conformance_key] += count_tests(cls)
    for pool_mode in POOL_MODES:
        counts.update(count_blob_cases('postgresql', pool_mode))
        for cls in make_classes('postgresql', pooler=pool_mode).values():
            counts[cls.conformance_key] += count_tests(cls)
    for layout in CLUSTER_LAYOUTS:
        for cls in make_classes('mysql', cluster=layout).values():
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


def test_skipped_suites_do_not_count_as_run():
    collected = {'oracle-HP': 95, 'oracle-HF': 60, 'sqlite-HP': 95}
    results = {'oracle-HP': {'skipped': 95}, 'oracle-HF': {'skipped': 60},
               'sqlite-HP': {'passed': 90, 'skipped': 5}}
    assert database_lines(collected, results, oracle_configured=False) == [
        'oracle: not run (no server configured)',
        'sqlite: ran (90 passed, 0 failed, 5 skipped of 95)']
    # A configured server whose tests were all skipped did not run either.
    assert database_lines(collected, results, oracle_configured=True)[0] \
        == 'oracle: not run (155 skipped of 155)'
    # Not even collected: still said.
    assert database_lines({}, {}, oracle_configured=False) == [
        'oracle: not run (no server configured)']


def test_oracle_suites_exist_and_say_why_they_do_not_run():
    # Collected like the others (the guard above counts them), and skipped
    # with a reason that names the variables, when no server is set up.
    classes = make_classes('oracle')
    assert set(c.conformance_key for c in classes.values()) == {
        'oracle-HP', 'oracle-HF', 'oracle-HP-mt-instances',
        'oracle-HF-mt-instances'}
    if ORACLE_NOT_CONFIGURED:
        assert ORACLE_NOT_CONFIGURED.startswith(
            'oracle: not run (no server configured)')
        assert 'RELSTORAGE_TEST_ORACLE_DSN' in ORACLE_NOT_CONFIGURED


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
