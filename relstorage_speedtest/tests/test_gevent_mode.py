"""relstorage_speedtest.gevent_mode runs end to end, tiny, on SQLite and
PostgreSQL with this storage's contenders only (RelStorage 4.3 is never
installed by the tests; no timing asserts: the figures are only checked to
be numbers, and every run to read back what it committed)."""
import json

from relstorage.testing.dbs import require
from relstorage_speedtest import othervenv
from relstorage_speedtest.gevent_mode import main

GREENLETS, REQUESTS = 3, 4


def _run(tmp_path, *extra):
    out = tmp_path / 'gevent.json'
    assert main(['--greenlets', str(GREENLETS), '--requests', str(REQUESTS),
                 '--objects', '40', '--reads', '3', '--write-ratio', '0.5',
                 '--rounds', '2', '--json', str(out)] + list(extra)) == 0
    return json.loads(out.read_text())


def _check(data, keys, names):
    assert len(data['rounds']) == 2
    for row in data['rounds']:
        assert sorted(row) == sorted(keys)
        for key in keys:
            assert sorted(row[key]) == sorted(names)
            for result in row[key].values():
                assert 'error' not in result, result
                assert result['served'] == GREENLETS * REQUESTS
                assert result['per_second'] > 0 and result['seconds'] > 0
                # About half the requests wrote (seeded): each increment
                # committed is read back, no more, no less.
                assert 0 < result['written'] < GREENLETS * REQUESTS
                assert result['counted'] == result['written']
    # The same seed makes every contender serve the same requests.
    for key in keys:
        assert len({r['written'] for row in data['rounds']
                    for r in row[key].values()}) == 1
    for line in data['summary']:
        assert sorted(line['sides']) == sorted(names)
        for median, low, high in line['sides'].values():
            assert low <= median <= high and low > 0
        ratio = line['ratios']['ours-gevent/ours-threads']
        assert ratio[1] <= ratio[0] <= ratio[2] and ratio[1] > 0


def test_gevent_against_threads_on_sqlite(tmp_path, capsys):
    data = _run(tmp_path, '--databases', 'sqlite',
                '--contenders', 'ours-gevent,ours-threads,ours-serial')
    _check(data, ['sqlite hf'], ['ours-gevent', 'ours-threads',
                                 'ours-serial'])
    shown = capsys.readouterr().out
    assert 'ours-gevent/ours-serial' in shown
    assert 'requests/s' in shown


def test_gevent_against_threads_on_postgresql(tmp_path):
    require('postgresql')
    data = _run(tmp_path, '--databases', 'postgresql', '--modes', 'hf,hp',
                '--contenders', 'ours-gevent,ours-threads')
    _check(data, ['postgresql hf', 'postgresql hp'],
           ['ours-gevent', 'ours-threads'])


def test_behind_a_slow_proxy(tmp_path):
    require('postgresql')
    out = tmp_path / 'gevent.json'
    assert main(['--databases', 'postgresql', '--contenders', 'ours-gevent',
                 '--greenlets', '2', '--requests', '2', '--objects', '10',
                 '--rounds', '1', '--latency-ms', '5',
                 '--json', str(out)]) == 0
    (row,) = json.loads(out.read_text())['rounds']
    result = row['postgresql hf']['ours-gevent']
    assert result['served'] == 4 and result['counted'] == result['written']


def test_an_unknown_contender_is_refused():
    import pytest
    with pytest.raises(SystemExit, match='unknown: ours-asyncio'):
        main(['--contenders', 'ours-asyncio'])


def test_a_virtualenv_holding_more_is_ready(tmp_path):
    """A virtualenv whose marker lists more than is asked for (gevent
    added by hand, say) is taken as made."""
    venv = str(tmp_path)
    with open(othervenv._marker(venv), 'w') as f:
        f.write('\n'.join((othervenv.RS4,) + othervenv.SHOOTOUT
                          + ('gevent',)))
    assert othervenv.ready(venv) == venv
    assert othervenv.ready(venv, extra=othervenv.SHOOTOUT
                           + ('gevent',)) == venv
    assert othervenv.ready(venv, extra=('gevent', 'more')) is None
    assert othervenv.ready(venv, spec='RelStorage==4.2.0') is None


def test_beside_relstorage_4(tmp_path):
    """RelStorage 4.3's gevent drivers and its blocking ones, named
    (its ``auto`` would take gevent MySQLdb with gevent installed), when
    its virtualenv is already made (tests never install it)."""
    import pytest
    from relstorage_speedtest.gevent_mode import DEFAULT_VENV
    from relstorage_speedtest.gevent_mode import GEVENT_EXTRA
    require('postgresql')
    venv = othervenv.ready(DEFAULT_VENV, extra=GEVENT_EXTRA)
    if venv is None:
        pytest.skip('no %s with its marker; not installed by tests'
                    % DEFAULT_VENV)
    data = _run(tmp_path, '--databases', 'sqlite,postgresql',
                '--contenders', 'ours-gevent,ours-threads,rs4-gevent,'
                'rs4-threads', '--other-venv', venv)
    assert data['other']['version'] == '4.3.0'
    names = ['ours-gevent', 'ours-threads', 'rs4-gevent', 'rs4-threads']
    _check(data, ['sqlite hf', 'postgresql hf'], names)
    drivers = {key: {name: result['driver']
                     for name, result in row.items()}
               for key, row in data['rounds'][0].items()}
    assert drivers['postgresql hf']['rs4-gevent'] == 'gevent psycopg2'
    assert drivers['postgresql hf']['rs4-threads'] == 'psycopg2'
    assert drivers['postgresql hf']['ours-gevent'].endswith('(cooperative)')
    assert not drivers['postgresql hf']['ours-threads'].endswith(
        '(cooperative)')
    assert drivers['sqlite hf']['rs4-gevent'] == 'gevent sqlite3'
    for line in data['summary']:
        assert line['ratios']['ours-gevent/rs4-gevent'][0] > 0
        assert line['ratios']['rs4-gevent/rs4-threads'][0] > 0
