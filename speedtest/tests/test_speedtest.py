"""The speed test runs and checks what it reads back (no timing asserts)."""
import json

from speedtest.main import main


def test_speedtest_default_sqlite(tmp_path, capsys):
    out = tmp_path / 'r.json'
    assert main(['-n', '20', '-t', '2', '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data['contenders']) == {'sqlite'}
    assert data['contenders']['sqlite']['write'] > 0
    assert 'sqlite' in capsys.readouterr().out
