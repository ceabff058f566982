"""relstorage_speedtest.hot runs end to end, tiny, on SQLite, alone and
beside RelStorage 4.3 (no timing asserts: the figures are only checked to
be there and sane)."""
import json

import pytest

from relstorage_speedtest.hot import main


def _run(tmp_path, *extra):
    out = tmp_path / 'hot.json'
    assert main(['--objects', '50', '--times', '3', '--passes', '2',
                 '--rounds', '2', '--json', str(out)] + list(extra)) == 0
    return json.loads(out.read_text())


def test_both_modes(tmp_path, capsys):
    data = _run(tmp_path)
    assert len(data['rounds']) == 2
    for row in data['rounds']:
        assert set(row) == {'ours sqlite hf', 'ours sqlite hp'}
        for figures in row.values():
            for kind in ('load', 'read'):
                median, low, high = figures[kind]
                assert 0 < low <= median <= high
            # A whole read includes the storage's load.
            assert figures['read'][0] > figures['load'][0]
    assert [line['label'] for line in data['summary']] == [
        'ours sqlite hf', 'ours sqlite hp']
    assert 'load us med' in capsys.readouterr().out


def test_filestorage_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(['--databases', 'filestorage,sqlite'])
    assert 'FileStorage' in capsys.readouterr().err


def test_beside_relstorage_4(tmp_path):
    from .test_pack import _other_venv
    data = _run(tmp_path, '--modes', 'hp', '--other-venv', _other_venv())
    assert data['other']['version'] == '4.3.0'
    for row in data['rounds']:
        assert set(row) == {'ours sqlite hp', 'RS 4.3 sqlite hp'}
    (line, _) = data['summary']
    assert line['label'] == 'ours sqlite hp'
    assert line['rs4_vs_this_load'][0] > 0
    assert line['rs4_vs_this_read'][0] > 0
