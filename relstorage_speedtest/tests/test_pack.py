"""relstorage_speedtest.pack runs end to end on SQLite (no timing asserts:
the figures are only checked to be sane)."""
import json
import signal

import pytest

from relstorage_speedtest import othervenv
from relstorage_speedtest.pack import main


def _check_side(figures, objects):
    assert 'error' not in figures, figures.get('error')
    assert figures['exit_status'] == 0
    assert figures['seconds'] > 0 and figures['peak_mb'] > 0
    # The tree, its buckets and the mappings (each a third unlinked).
    assert figures['objects_before'] > objects
    assert figures['objects_after'] < figures['objects_before']
    assert figures['tree_items'] == objects - len(range(0, objects, 3))
    assert figures['writer_commits'] > 0
    assert figures['writer_error_count'] == 0
    assert 0 < figures['writer_median'] <= figures['writer_longest_wait']


def test_pack_alone(tmp_path, capsys):
    out = tmp_path / 'pack.json'
    assert main(['--objects', '300', '--rounds', '2',
                 '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert data['other'] is None and len(data['rounds']) == 2
    for row in data['rounds']:
        assert set(row) == {'ours'}
        _check_side(row['ours'], 300)
    assert data['summary']['ours']['seconds']['median'] > 0
    shown = capsys.readouterr().out
    assert 'ours  pack' in shown and 'over 2 rounds' in shown


def test_pack_without_a_writer(tmp_path):
    out = tmp_path / 'pack.json'
    assert main(['--objects', '300', '--no-writer', '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert data['writer'] is False
    (row,) = data['rounds']
    figures = row['ours']
    assert 'error' not in figures and not figures['timed_out']
    assert figures['writer_commits'] == 0
    assert figures['objects_after'] < figures['objects_before']
    assert figures['tree_items'] == 300 - len(range(0, 300, 3))


def test_the_nightly_pack(tmp_path):
    out = tmp_path / 'pack.json'
    assert main(['--objects', '300', '--no-writer', '--nightly', '0.1',
                 '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert data['nightly'] == 0.1
    (row,) = data['rounds']
    figures = row['ours']
    assert 'error' not in figures
    assert figures['first_pack_seconds'] > 0 and figures['churn_seconds'] > 0
    items = {i for i in range(300) if i % 3}
    items -= set(range(2, 300, 20))
    items |= set(range(300, 315))
    assert figures['tree_items'] == len(items)
    # The measured pack unpickled only what the day's work changed.
    (said,) = [line for line in figures['output_tail']
               if 'states unpickled' in line]
    unpickled, kept = [int(said.split(word)[0].split()[-1]) for word in
                       (' states unpickled', ' taken as the last pack')]
    assert 0 < unpickled < kept, said


def test_a_pack_past_the_timeout_is_killed_and_fails_the_run(tmp_path,
                                                             capsys):
    out = tmp_path / 'pack.json'
    assert main(['--objects', '300', '--pack-timeout', '0.01',
                 '--json', str(out)]) == 1
    data = json.loads(out.read_text())
    (row,) = data['rounds']
    figures = row['ours']
    assert figures['timed_out']
    assert figures['exit_status'] == -signal.SIGKILL
    assert 'did not finish in 0.01 s' in figures['error']
    assert 'ours  pack STOPPED' in capsys.readouterr().out


def _other_venv():
    """The other side's virtualenv when it is already made (tests never
    install it)."""
    venv = othervenv.ready()
    if venv is None:
        pytest.skip('no %s with its marker (made by `python -m '
                    'relstorage_speedtest.pack --other-venv`); not installed '
                    'by tests'
                    % othervenv.DEFAULT_DIR)
    return venv


def test_pack_beside_the_other_zodbpack(tmp_path, capsys):
    venv = _other_venv()
    out = tmp_path / 'pack.json'
    assert main(['--objects', '300', '--other-venv', venv,
                 '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert data['other']['version'] == '4.3.0'
    (row,) = data['rounds']
    for name in ('ours', 'other'):
        _check_side(row[name], 300)
    assert row['same_live_data']
    assert row['ours']['objects_after'] == row['other']['objects_after']
    assert row['time_ratio'] > 0 and row['memory_ratio'] > 0
    assert 'live data: %d current objects on both sides' % (
        row['ours']['objects_after']) in capsys.readouterr().out


def _pgjsonb_venv():
    """zodb-pgjsonb's virtualenv when it is already made (tests never
    install it)."""
    venv = othervenv.ready(othervenv.PGJSONB_DIR, othervenv.PGJSONB)
    if venv is None:
        pytest.skip('no %s with its marker (made by `python -m '
                    'relstorage_speedtest.pack --database postgresql '
                    '--pgjsonb-venv`); not installed by tests'
                    % othervenv.PGJSONB_DIR)
    return venv


@pytest.mark.parametrize('history', ['--keep-history', '--no-keep-history'])
def test_pack_beside_zodb_pgjsonb(tmp_path, capsys, history):
    from relstorage.testing.dbs import require
    require('postgresql')
    venv = _pgjsonb_venv()
    out = tmp_path / 'pack.json'
    assert main(['--objects', '300', '--database', 'postgresql', history,
                 '--pgjsonb-venv', venv, '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert data['pgjsonb']['version'] == othervenv.PGJSONB.split('==')[1]
    (row,) = data['rounds']
    _check_side(row['ours'], 300)
    assert row['ours']['with_writer']
    theirs = row['pgjsonb']
    assert 'error' not in theirs and theirs['exit_status'] == 0
    # Never beside a writer: its pack would delete what one commits.
    assert not theirs['with_writer'] and theirs['writer_commits'] == 0
    assert theirs['objects_before'] == row['ours']['objects_before']
    assert theirs['tree_items'] == 300 - len(range(0, 300, 3))
    assert row['pgjsonb_same_live_data']
    assert row['pgjsonb_time_ratio'] > 0 and row['pgjsonb_memory_ratio'] > 0
    assert 'ratios: time pgjsonb/ours' in capsys.readouterr().out


def test_zodb_pgjsonb_packs_postgresql_only(capsys):
    with pytest.raises(SystemExit):
        main(['--database', 'sqlite', '--pgjsonb-venv'])
    assert '--pgjsonb-venv needs --database postgresql' in (
        capsys.readouterr().err)


def test_a_python_for_zodb_pgjsonb_is_found():
    python = othervenv.find_python()
    if python is None:
        pytest.skip('no Python 3.12 or 3.13 here')
    assert othervenv._is_version(python, python.rsplit('python', 1)[1])
    assert othervenv.find_python(('2.1',)) is None
