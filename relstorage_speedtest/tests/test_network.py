"""relstorage_speedtest.network runs end to end, tiny, on ZEO and
PostgreSQL through the delaying proxy (no timing asserts: what the proxy
counted, and that every contender read the same data)."""
import json

from relstorage.testing.dbs import require
from relstorage_speedtest.network import PHASES
from relstorage_speedtest.network import main


def test_counts_round_trips_of_each_work_at_each_delay(tmp_path, capsys):
    require('postgresql')
    out = tmp_path / 'network.json'
    assert main(['--folders', '3', '--items', '4', '--delays', '0,1',
                 '--rounds', '2', '--databases', 'zeo,postgresql',
                 '--modes', 'hp', '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data['rounds']) == 2
    for row in data['rounds']:
        assert set(row) == {'ZEO 6.2', 'ours postgresql hp'}
        for figures in row.values():
            for delay in ('0', '1'):
                at = figures[delay]
                assert set(at) == set(PHASES)
                for phase in ('page cold', 'traversal', 'prefetch 500',
                              'record_iternext'):
                    assert at[phase]['trips'] >= 1, (phase, at)
                assert at['page cold']['units'] == 3
                assert at['traversal']['units'] == 3 * 4 * 3
                assert at['prefetch 500']['units'] == 12
        ours = row['ours postgresql hp']
        for delay in ('0', '1'):
            # A page served from the caches costs its two polls; 12
            # items prefetched, one round trip.
            assert ours[delay]['page cached']['trips'] == 2 * 3
            assert ours[delay]['prefetch 500']['trips'] == 1
        # The counts do not depend on the delay.
        assert ({p: ours['0'][p]['trips'] for p in PHASES}
                == {p: ours['1'][p]['trips'] for p in PHASES})
    lines = {(line['label'], line['delay']): line for line in data['summary']}
    ours = lines['ours postgresql hp', 1]['phases']['page cold']
    assert ours['ZEO 6.2']['trips'][0] > 0
    shown = capsys.readouterr().out
    assert 'page cold: per page view' in shown
