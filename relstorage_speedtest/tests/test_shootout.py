"""relstorage_speedtest.shootout runs zodbshootout for real on this side
(the other side, RelStorage 4.3, is never installed by the tests) and reads its
figures; the other side's virtualenv is refused when it would import this
checkout."""
import argparse
import os
import sys

import pytest

from relstorage_speedtest import othervenv
from relstorage_speedtest import shootout


def _args(**changes):
    args = shootout.parse_args(['--processes', '1', '--values', '1',
                                '--objects', '20'])
    return argparse.Namespace(**dict(vars(args), **changes))


def test_this_side_and_filestorage_on_sqlite(tmp_path):
    args = _args()
    tests = ['add', 'hot', 'tpc']
    rows = {}
    for name in ('ours', 'filestorage'):
        contender = shootout.Contender(name, sys.executable, args,
                                       str(tmp_path), dict(os.environ))
        result = contender.run('sqlite', 'hf', 1, tests)
        assert 'error' not in result, result
        assert all(result[t] > 0 for t in tests), result
        rows.setdefault(('sqlite', 'hf', 1), {})[name] = [result]
    table = shootout.summarise(rows, tests)
    assert [line['test'] for line in table] == tests
    for line in table:
        ours = rows[('sqlite', 'hf', 1)]['ours'][0][line['test']]
        fs = rows[('sqlite', 'hf', 1)]['filestorage'][0][line['test']]
        assert line['filestorage'][0] == pytest.approx(fs / ours)
        assert line['sides']['ours'][0] == pytest.approx(ours * 1000)
    # The databases are the contender's own.
    assert os.path.isdir(tmp_path / 'sqlite-ours-hf')


def test_a_single_test_is_read(tmp_path):
    # With one benchmark, zodbshootout's JSON (pyperf's) names it in the
    # suite's metadata only.
    args = _args()
    contender = shootout.Contender('ours', sys.executable, args,
                                   str(tmp_path), dict(os.environ))
    result = contender.run('sqlite', 'hf', 1, ['add'])
    assert 'error' not in result, result
    assert result['add'] > 0


def test_an_unknown_test_is_refused():
    with pytest.raises(SystemExit, match='unknown tests: cool'):
        shootout.main(['--tests', 'add,cool'])


def test_the_other_side_may_not_import_this_checkout():
    # This test's own virtualenv imports the checkout's relstorage.
    with pytest.raises(othervenv.OtherVenvError,
                       match='imports this checkout'):
        othervenv.check(sys.prefix)


def test_this_side_through_pgbouncer(tmp_path):
    """The --pgbouncer contender: a zodbshootout run through a private
    pgbouncer in transaction mode (in front of a private server)."""
    from relstorage.testing.dbs import require_pooler
    pooler = require_pooler('transaction')
    backend = pooler.backend
    args = _args(pg_dsn='host=%s port=%s user=%s password=%s' % (
        backend.host, backend.port, backend.user, backend.password),
        prefix='rsshoot_test', pgbouncer=True)
    # zodbshootout runs from a directory of its own: this checkout's
    # relstorage, whatever the virtualenv's is.
    import relstorage
    env = dict(os.environ, PYTHONPATH=os.path.dirname(
        os.path.dirname(os.path.abspath(relstorage.__file__))))
    contender = shootout.Contender('pooled', sys.executable, args,
                                   str(tmp_path), env, pooler)
    assert contender.runs_on('postgresql')
    assert not contender.runs_on('sqlite')
    section = contender.section('postgresql', 'hf')
    assert 'pooler transaction' in section
    assert 'port=%s ' % pooler.port in section
    assert 'dbname=rsshoot_test_pooled_hf' in section
    conn = backend._admin_connect()
    try:
        cur = conn.cursor()
        cur.execute('DROP DATABASE IF EXISTS rsshoot_test_pooled_hf')
        cur.execute('CREATE DATABASE rsshoot_test_pooled_hf OWNER %s'
                    % backend.user)
    finally:
        conn.close()
    result = contender.run('postgresql', 'hf', 1, ['add', 'tpc'])
    assert 'error' not in result, result
    assert result['add'] > 0 and result['tpc'] > 0


def _pgjsonb(tmp_path):
    """zodb-pgjsonb's contender on a test database, when its virtualenv
    is already made (tests never install it)."""
    from relstorage.testing import dbs
    dbs.require('postgresql')
    venv = othervenv.ready(othervenv.PGJSONB_DIR, othervenv.PGJSONB)
    if venv is None:
        pytest.skip('no %s with its marker; not installed by tests'
                    % othervenv.PGJSONB_DIR)
    args = _args(pg_dsn='host=%s port=%s user=%s password=%s' % (
        dbs.PG_HOST, dbs.PG_PORT, dbs.PG_USER, dbs.PG_PASSWORD))
    contender = shootout.PgjsonbContender(venv, args, str(tmp_path))
    dbs.empty_database('postgresql', False, 'dst')
    # The test database, not one the contender would name itself.
    contender.database = lambda mode: dbs.pg_dsn(False, 'dst').split()[0][
        len('dbname='):]
    return contender


def test_zodb_pgjsonb_on_postgresql(tmp_path):
    contender = _pgjsonb(tmp_path)
    assert contender.runs_on('postgresql')
    assert not contender.runs_on('sqlite') and not contender.runs_on('mysql')
    section = contender.section('postgresql', 'hf')
    assert 'history-preserving false' in section
    assert 'cache-warm-pct 0' in section
    result = contender.run('postgresql', 'hf', 1, ['add', 'hot', 'tpc'])
    assert 'error' not in result, result
    assert all(0 < result[t] < 1 for t in ('add', 'hot', 'tpc')), result


def test_a_failed_benchmark_is_an_error_not_a_figure(tmp_path):
    # Without the start-up module's zap_all, zodb-pgjsonb's own
    # cleanup fails in zodbshootout, which logs it and records 666 s.
    contender = _pgjsonb(tmp_path)
    contender.env = othervenv.neutral_env()
    contender.env.pop(othervenv.PGJSONB_SHIM_VAR, None)
    result = contender.run('postgresql', 'hf', 1, ['add'])
    assert 'add' not in result
    assert 'connection is closed' in result['error'], result
