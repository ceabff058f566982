"""relstorage_speedtest.adds runs end to end, tiny, on SQLite: processes
adding at once beside ZODB alone, and beside RelStorage 4.3 (no timing
asserts: the figures are only checked to be there and sane)."""
import json

import pytest

from relstorage_speedtest.adds import main


def _run(tmp_path, *extra):
    out = tmp_path / 'adds.json'
    assert main(['--databases', 'sqlite', '--objects', '20', '--commits',
                 '3', '--rounds', '2', '--json', str(out)]
                + list(extra)) == 0
    return json.loads(out.read_text())


def test_two_processes_beside_zodb_alone(tmp_path, capsys):
    data = _run(tmp_path)
    assert len(data['rounds']) == 2
    for row in data['rounds']:
        assert set(row) == {'ZODB alone', 'ours sqlite hf', 'ours sqlite hp'}
        for label, figures in row.items():
            assert figures['ms'] > 0
            assert figures['cpu_ms'] > 0
            # SQLite has no server process: nothing counted as one.
            assert figures['server_ms'] >= 0
    labels = [line['label'] for line in data['summary']]
    assert labels == ['ZODB alone', 'ours sqlite hf', 'ours sqlite hp']
    for line in data['summary'][1:]:
        share, low, high = line['zodb_share']
        assert 0 < low <= share <= high
        assert 'rs4_vs_this' not in line
    out = capsys.readouterr().out
    assert 'ZODB alone/this' in out
    assert '2 processes, each 3 adds of 20 objects' in out


def test_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        main(['--databases', 'filestorage'])
    assert 'one process only' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(['--processes', '0'])
    assert 'must be >= 1' in capsys.readouterr().err


def test_beside_relstorage_4(tmp_path):
    from .test_pack import _other_venv
    data = _run(tmp_path, '--modes', 'hp', '--processes', '1',
                '--no-baseline', '--other-venv', _other_venv())
    assert data['other']['version'] == '4.3.0'
    for row in data['rounds']:
        assert set(row) == {'ours sqlite hp', 'RS 4.3 sqlite hp'}
    (line, _) = data['summary']
    assert line['label'] == 'ours sqlite hp'
    assert line['rs4_vs_this'][0] > 0
    assert 'zodb_share' not in line
