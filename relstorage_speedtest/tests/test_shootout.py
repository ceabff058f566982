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
