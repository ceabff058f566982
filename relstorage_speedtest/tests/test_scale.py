"""relstorage_speedtest.scale end to end at a tiny size on SQLite: it builds,
measures twice, packs the garbage it made and reports."""
import io
import json

from relstorage_speedtest import scale


def test_scale_builds_measures_and_packs(tmp_path):
    out = tmp_path / 'scale.json'
    assert scale.main(['--objects', '600', '--baseline', '200',
                       '--batch', '100', '--databases', 'sqlite',
                       '--json', str(out)]) == 0
    result = json.loads(out.read_text())['results'][0]
    first, last = result['points']
    assert (first['objects'], last['objects']) == (200, 600)
    assert last['bytes'] > first['bytes'] > 0
    for point in (first, last):
        assert min(point[key]
                   for key in ('cold', 'warm', 'hot', 'commit')) > 0
        # The commit changed half the sample (a hundred objects or more):
        # its WAL frames hold at least the table's pages they are on.
        assert point['commit_log_bytes'] >= 4 * 4096, point
        for key in ('cold_read_calls', 'commit_read_calls'):
            assert point[key] is None or point[key] > 0, (key, point)
    assert len(result['build_rate_by_tenth']) >= 6
    pack = result['pack']
    assert 'error' not in pack, pack
    # Five of the six commits' limbo mappings were unlinked, each with
    # its tenth of the commit's objects: 5 * (10 + 1) objects went.
    assert ', 55 objects;' in pack['summary'][0], pack['summary']
    text = io.StringIO()
    scale.report([result], text)
    assert 'sqlite: 200 -> 600 objects' in text.getvalue()
    assert 'commit: MB written to the log' in text.getvalue()
