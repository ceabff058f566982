"""A pytest plugin that tallies the ZODB conformance tests per database and
history mode and prints the table, with skip reasons, at the end of the run.
(``test_conformance_guard.py`` checks the counts against the record.)"""
import collections

import pytest

from relstorage.testing.dbs import ORACLE_HOW
from relstorage.testing.dbs import ORACLE_NOT_CONFIGURED


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


def database_lines(collected, results, oracle_configured):
    """One line per database: whether its conformance tests ran. A
    database whose tests were all skipped did not run, whatever the
    number collected; Oracle without a configured server says so even
    when none of its tests were collected."""
    totals = collections.defaultdict(collections.Counter)
    for key, count in collected.items():
        db = key.split('-')[0]
        totals[db]['collected'] += count
        totals[db].update(results.get(key, {}))
    lines = []
    for db in sorted(set(totals) | ({'oracle'} if not oracle_configured
                                    else set())):
        t = totals[db]
        if db == 'oracle' and not oracle_configured:
            lines.append('oracle: not run (no server configured)')
        elif t['passed'] or t['failed']:
            lines.append('%s: ran (%d passed, %d failed, %d skipped of %d)'
                         % (db, t['passed'], t['failed'], t['skipped'],
                            t['collected']))
        else:
            lines.append('%s: not run (%d skipped of %d)'
                         % (db, t['skipped'], t['collected']))
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    collected = getattr(config, '_conformance_collected', None)
    tr = terminalreporter
    if not collected:
        if ORACLE_NOT_CONFIGURED:
            tr.write_line('oracle: not run (no server configured)')
        return
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
    tr.section('databases')
    for line in database_lines(collected, _results,
                               not ORACLE_NOT_CONFIGURED):
        tr.write_line(line)
    if ORACLE_NOT_CONFIGURED:
        tr.write_line('  (%s; Oracle is the one database CI may not '
                      'reach)' % ORACLE_HOW)
