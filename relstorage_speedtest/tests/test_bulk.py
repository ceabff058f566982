"""relstorage_speedtest.bulk runs end to end, tiny, on FileStorage and
SQLite (no timing asserts: the figures are only checked to be sane and
every contender to read back the same objects)."""
import json
import time

import pytest

from relstorage_speedtest.bulk import main

PHASES = ['insert', 'modify', 'modify again', 'delete', 'read',
          'fresh read']


def _run(tmp_path, *extra):
    out = tmp_path / 'bulk.json'
    assert main(['--objects', '60', '--commits', '3', '--rounds', '1',
                 '--json', str(out)] + list(extra)) == 0
    return json.loads(out.read_text())


def test_the_default_workload(tmp_path, capsys):
    data = _run(tmp_path, '--databases', 'filestorage,sqlite')
    (row,) = data['rounds']
    assert set(row) == {'FileStorage', 'ours sqlite hf', 'ours sqlite hp'}
    for figures in row.values():
        assert list(figures['phases']) == PHASES
        assert all(s > 0 for s in figures['phases'].values())
        # Half deleted: numbers 2, 3, 6, 7, ... are left.
        assert figures['count'] == 30
        assert figures['cpu'] > 0 and figures['server_cpu'] >= 0
    assert len({figures['digest'] for figures in row.values()}) == 1
    by_label = {line['label']: line for line in data['summary']}
    assert by_label['ours sqlite hf']['cpu'][0] > 0
    assert by_label['FileStorage']['vs_filestorage'] == [1.0, 1.0, 1.0]
    assert by_label['ours sqlite hf']['vs_filestorage'][0] > 0
    shown = capsys.readouterr().out
    assert 'ours sqlite hp' in shown and 'x FileStorage' in shown


def test_the_variations(tmp_path):
    data = _run(tmp_path, '--databases', 'sqlite', '--modes', 'hf',
                '--reindex', '--migrate', '--nested', '--state-bytes', '300')
    (row,) = data['rounds']
    figures = row['ours sqlite hf']
    assert list(figures['phases']) == PHASES[:4] + [
        'reindex', 'migrate'] + PHASES[4:]
    assert figures['count'] == 30


def test_beside_relstorage_4(tmp_path):
    from .test_pack import _other_venv
    venv = _other_venv()
    data = _run(tmp_path, '--databases', 'sqlite', '--modes', 'hp',
                '--other-databases', 'sqlite', '--other-venv', venv)
    assert data['other']['version'] == '4.3.0'
    (row,) = data['rounds']
    assert set(row) == {'ours sqlite hp', 'RS 4.3 sqlite hp'}
    assert row['ours sqlite hp']['digest'] == row['RS 4.3 sqlite hp'][
        'digest']
    (line, _) = data['summary']
    assert line['label'] == 'ours sqlite hp' and line['rs4_vs_this'][0] > 0


def test_server_cpu_counts_the_servers_work():
    """server_cpu_since() counts what PostgreSQL did (a server of this
    machine, as the test databases are), a session's process included
    once that has ended; and never less than nothing, whatever servers
    stop meanwhile."""
    import os

    import psycopg2

    from relstorage.testing.dbs import pg_dsn
    from relstorage_speedtest.bulk import server_cpu
    from relstorage_speedtest.bulk import server_cpu_since

    def named(pid):
        try:
            with open('/proc/%s/comm' % pid) as f:
                return f.read().strip()
        except OSError:
            return None
    if 'postgres' not in {named(p) for p in os.listdir('/proc')
                          if p.isdigit()}:
        pytest.skip('PostgreSQL does not run on this machine')
    before = server_cpu()
    conn = psycopg2.connect(pg_dsn(False, 'main'))
    try:
        cur = conn.cursor()
        cur.execute('SELECT count(*) FROM generate_series(1, 3000000)')
        assert cur.fetchone()[0] == 3000000
    finally:
        conn.close()
    # Counted after the session's process has ended too.
    time.sleep(0.2)
    assert server_cpu_since(before) > 0.05
    # A server that stopped meanwhile (its processes gone, with what they
    # had used) takes nothing away.
    gone = server_cpu()
    gone['999999999', '1'] = 10 ** 9
    assert 0 <= server_cpu_since(gone) < 1
