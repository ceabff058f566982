"""relstorage_speedtest.iternext runs end to end, tiny, on FileStorage and
SQLite (no timing asserts: every contender walks the same records)."""
import json

from relstorage_speedtest.iternext import main


def test_walks_the_same_records_everywhere(tmp_path, capsys):
    out = tmp_path / 'iternext.json'
    assert main(['--objects', '40', '--commits', '2', '--rounds', '2',
                 '--databases', 'filestorage,sqlite', '--modes', 'hf,hp',
                 '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data['rounds']) == 2
    for row in data['rounds']:
        assert set(row) == {'FileStorage', 'ours sqlite hf', 'ours sqlite hp'}
        # The mappings, their tree (and its buckets) and the root.
        (count,) = {figures['count'] for figures in row.values()}
        assert count >= 42
        assert len({figures['digest'] for figures in row.values()}) == 1
        for figures in row.values():
            assert set(figures['phases']) == {'record_iternext', 'iterator'}
            assert figures['records'] >= figures['count']
    by_label = {line['label']: line for line in data['summary']}
    assert by_label['FileStorage']['record_iternext']['vs_filestorage'] == [
        1.0, 1.0, 1.0]
    shown = capsys.readouterr().out
    assert 'record_iternext: seconds' in shown and 'iterator: seconds' in shown
