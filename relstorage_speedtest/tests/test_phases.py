"""relstorage_speedtest.phases for real on this side and FileStorage (the other
side, RelStorage 4.3, is never installed by the tests): each commit's
time, and the storage's part of it, which is less."""
import io
import json

from relstorage_speedtest import phases


def test_this_storage_and_filestorage_on_sqlite(tmp_path):
    out = tmp_path / 'phases.json'
    assert phases.main(['--databases', 'sqlite', '--modes', 'hp',
                        '--objects', '50', '--commits', '3',
                        '--rounds', '2', '--filestorage',
                        '--json', str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert (row['database'], row['mode']) == ('sqlite', 'hp')
    assert sorted(row['sides']) == ['FileStorage', 'this storage']
    for rounds in row['sides'].values():
        assert len(rounds) == 2
        for figures in rounds:
            for phase in ('add', 'update'):
                f = figures[phase]
                assert 0 < f['storage'] < f['total'], f
                assert 0 < f['first_storage'] < f['first'], f
                # A commit stores every object and votes and finishes.
                for method in ('store', 'tpc_vote', 'tpc_finish'):
                    assert f['methods'][method] > 0, (method, f)
            assert figures['add']['methods']['new_oid'] > 0
            # The connection's cache holds the objects: updates after the
            # first load nothing.
            assert 'load' not in figures['update']['methods'], figures


def test_the_summary_names_each_side_and_the_ratio():
    figures = {'add': {'total': 0.02, 'storage': 0.005, 'first': 0.04,
                       'methods': {'store': 0.001}},
               'update': {'total': 0.03, 'storage': 0.01, 'first': 0.05,
                          'methods': {'tpc_vote': 0.004}}}
    other = json.loads(json.dumps(figures))
    other['add']['total'] = 0.03
    results = {('sqlite', 'hf'): {'this storage': [figures],
                                  'FileStorage': [other]}}
    text = io.StringIO()
    phases.summarize(results, text)
    lines = text.getvalue().splitlines()
    assert any(line.startswith('sqlite     HF add') and
               'this storage 20.0 (5.0 / 15.0) first 40.0' in line and
               'FileStorage 30.0 (5.0 / 25.0) first 40.0 ratio 1.50' in line
               for line in lines), lines
