"""A pytest plugin that tallies the ZODB conformance tests per database and
history mode and prints the table, with skip reasons, at the end of the run.
(``test_conformance_guard.py`` checks the counts against the record.)"""
import collections

import pytest


_results = collections.defaultdict(collections.Counter)
_skip_reasons = collections.defaultdict(collections.Counter)


def _key(item):
    marker = item.get_closest_marker('conformance')
    if marker is not None:
        return marker.args[0]
    cls = getattr(item, 'cls', None)
    return getattr(cls, 'conformance_key', None) if cls else None


def pytest_runtest_logreport(report):
    if report.when != 'call' and not (report.when == 'setup'
                                      and (report.skipped or report.failed)):
        return
    key = getattr(report, 'conformance_key', None)
    if key is None:
        return
    if report.passed:
        _results[key]['passed'] += 1
    elif report.skipped:
        _results[key]['skipped'] += 1
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) \
            else str(report.longrepr)
        _skip_reasons[key][reason.replace('Skipped: ', '')] += 1
    else:
        _results[key]['failed'] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.conformance_key = _key(item)


def pytest_collection_finish(session):
    session.config._conformance_collected = collections.Counter(
        k for k in (_key(item) for item in session.items) if k)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    collected = getattr(config, '_conformance_collected', None)
    if not collected:
        return
    tr = terminalreporter
    tr.section('ZODB conformance tests per database and history mode')
    tr.write_line('%-28s %9s %6s %6s %7s' % (
        'database-mode', 'collected', 'passed', 'failed', 'skipped'))
    for key in sorted(collected):
        r = _results[key]
        tr.write_line('%-28s %9d %6d %6d %7d' % (
            key, collected[key], r['passed'], r['failed'], r['skipped']))
    for key in sorted(_skip_reasons):
        for reason, n in sorted(_skip_reasons[key].items()):
            tr.write_line('  %s skipped %d: %s' % (key, n, reason))
