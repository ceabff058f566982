"""relstorage_speedtest.pgwal at a tiny size: a private, durable PostgreSQL
server of its own, two values of a setting compared, and the server gone
at the end."""
import io
import json

import pytest

from relstorage.testing.dbs import in_ci
from relstorage.testing.servers import NotInstalled
from relstorage_speedtest import pgwal


def test_two_values_of_wal_compression(tmp_path, monkeypatch):
    servers = []
    start = pgwal.DurableServer.start

    def remember(self):
        servers.append(self)
        return start(self)
    monkeypatch.setattr(pgwal.DurableServer, 'start', remember)
    out = tmp_path / 'pgwal.json'
    try:
        assert pgwal.main(['--objects', '3000', '--rounds', '2',
                           '--setting', 'wal_compression=off,pglz',
                           '--json', str(out)]) == 0
    except NotInstalled as e:
        if in_ci():
            raise AssertionError('CI=true and %s' % e)
        pytest.skip(str(e))
    (server,) = servers
    assert not server.running()
    figures = json.loads(out.read_text())['figures']
    assert sorted(figures) == ['off', 'pglz']
    for points in figures.values():
        assert len(points) == 2
        for point in points:
            # A commit of 1,000 objects after a checkpoint writes whole
            # pages: megabytes, whatever the compression.
            assert point['commit_log_bytes'] > 100000, point
            # pg_waldump over the commit's WAL: a record per changed row
            # at least, and pages written whole after the checkpoint.
            assert point['wal_records'] >= 1000, point
            assert 0 < point['wal_fpi_bytes'] < point['commit_log_bytes']
            assert point['commit'] > 0 and point['cold'] > 0
    # Whole pages of random bytes compress little, but the pages here
    # hold mostly small pickles and free space.
    off = min(p['commit_log_bytes'] for p in figures['off'])
    pglz = max(p['commit_log_bytes'] for p in figures['pglz'])
    assert pglz < off
    text = io.StringIO()
    args = pgwal.parse_args(['--objects', '3000', '--rounds', '2',
                             '--setting', 'wal_compression=off,pglz'])
    pgwal.report(args, figures, text)
    assert 'wal_compression at 3000 objects' in text.getvalue()
    assert 'of which full-page images' in text.getvalue()


def test_a_setting_must_name_values():
    with pytest.raises(SystemExit):
        pgwal.parse_args(['--setting', 'wal_compression'])
    with pytest.raises(SystemExit):
        pgwal.parse_args(['--setting', 'x; DROP TABLE y=1'])
