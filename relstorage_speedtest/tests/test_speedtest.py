"""The speed test runs end to end and checks what it reads back (no
timing asserts: the figures are only checked to exist)."""
import json
import os
import subprocess
import sys
import time

from relstorage.testing.dbs import child_env
from relstorage_speedtest.contenders import parse
from relstorage_speedtest.main import main

CONFIG = """\
%%import relstorage
<zodb sqlite-hp>
  <relstorage>
    keep-history true
    cache-local-mb 5
    <sqlite3>
      data-dir %(tmp)s/hp
    </sqlite3>
  </relstorage>
</zodb>
<zodb plain>
  <filestorage>
    path %(tmp)s/Data.fs
  </filestorage>
</zodb>
"""


def test_quick_run_on_the_default(tmp_path, capsys):
    out = tmp_path / 'r.json'
    charts = tmp_path / 'charts'
    assert main(['--quick', '-q', '-t', '2', '--growth', '100',
                 '--json', str(out), '--charts', str(charts)]) == 0
    data = json.loads(out.read_text())
    assert set(data['write_read']) == {'sqlite-hp', 'sqlite-hf'}
    for name, by_size in data['write_read'].items():
        for level in ('1', '2'):
            figure = by_size['100'][level]
            assert figure['write_ms'] > 0 and figure['read_ms'] > 0
            assert len(figure['samples'][0]) == int(level)
            assert len(figure['samples'][0][0]['write']) == 2
    assert set(data['raw_limit']) == {'sqlite-hp', 'sqlite-hf'}
    for figure in data['raw_limit'].values():
        assert len(figure['raw_samples']) == len(
            figure['storage_samples']) == 2
        assert 0 < figure['raw_ms'] and 0 < figure['storage_ms']
    assert all(len(times) == 4 for times in data['growth'].values())
    assert data['environment']['packages']['ZODB']
    assert sorted(os.listdir(charts)) == ['growth.png', 'read.png',
                                          'write.png']
    shown = capsys.readouterr().out
    assert 'sqlite-hf' in shown and 'Growth' in shown


def test_config_file_with_filestorage_and_zeo(tmp_path, capsys):
    config = tmp_path / 'speed.conf'
    config.write_text(CONFIG % {'tmp': tmp_path})
    out = tmp_path / 'r.json'
    assert main([str(config), '--zeo', '-q', '-n', '20', '-c', '1,2',
                 '--runs', '1', '-t', '2', '--growth', '0', '--no-raw',
                 '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data['write_read']) == {'sqlite-hp', 'plain', 'zeo'}
    # A FileStorage cannot be opened by two processes: one level only.
    assert set(data['write_read']['plain']['20']) == {'1'}
    assert set(data['write_read']['zeo']['20']) == {'1', '2'}


def test_an_oracle_section_is_a_shared_database():
    (ora,) = parse('<zodb ora>\n  <relstorage>\n    <oracle>\n'
                   '      user app\n      password pw\n'
                   '      dsn db.example.org:1521/ORCLPDB1\n'
                   '    </oracle>\n  </relstorage>\n</zodb>\n')
    assert ora.kind == 'oracle'
    assert ora.shared


def test_variants_for_the_connection_test(tmp_path):
    (pg,) = parse('%import relstorage\n<zodb pg>\n  <relstorage>\n'
                  '    cache-local-mb 20\n    <postgresql>\n'
                  '      dsn dbname=x host=127.0.0.1\n    </postgresql>\n'
                  '  </relstorage>\n</zodb>\n')
    assert pg.kind == 'postgresql'
    socket = pg.over_unix_socket(str(tmp_path), '/nonexistent')
    assert 'host=%s' % tmp_path in socket.text
    nocache = socket.without_cache()
    assert 'cache-local-mb 0' in nocache.text
    assert 'cache-local-mb 20' not in nocache.text
    psycopg3 = pg.through_psycopg3()
    assert psycopg3.name == pg.name + ' psycopg3'
    assert '<postgresql>\n      driver psycopg\n' in psycopg3.text
    assert psycopg3.through_psycopg3() is None     # names its driver
    (my,) = parse('<zodb my>\n  <relstorage>\n    <mysql>\n'
                  '      host 127.0.0.1\n      port 3306\n'
                  '    </mysql>\n  </relstorage>\n</zodb>\n')
    sock = tmp_path / 'mysqld.sock'
    sock.write_text('')
    variant = my.over_unix_socket('/nonexistent', str(sock))
    assert 'unix_socket %s' % sock in variant.text
    assert 'host' not in variant.text and 'port' not in variant.text
    assert my.through_psycopg3() is None


def test_zeo_server_logs_to_a_file_not_an_unread_pipe():
    """Under 8 writers the server logs a line per lock wait: into a pipe
    that nobody reads, it blocked once the pipe was full, and every client
    with it."""
    from relstorage_speedtest.contenders import ZEOServer
    server = ZEOServer()
    try:
        assert server.proc.stderr is None
        assert os.path.exists(server.log)
    finally:
        server.stop()


def test_servers_with_connection_variants_and_raw_limit(tmp_path):
    """PostgreSQL and MariaDB/MySQL contenders: the write/read test, the
    connection test (TCP and unix socket, cache on and off) and the raw
    INSERT limit, with the servers' versions in the environment."""
    from relstorage.testing.dbs import mysql_params
    from relstorage.testing.dbs import pg_dsn
    from relstorage.testing.dbs import require
    require('postgresql')
    require('mysql')
    my = mysql_params(False)
    lines = ['host %(host)s', 'port %(port)s', 'user %(user)s', 'db %(db)s']
    if my['passwd']:
        lines.append('passwd %(passwd)s')
    config = tmp_path / 'servers.conf'
    config.write_text(
        '%%import relstorage\n'
        '<zodb pg>\n  <relstorage>\n    keep-history false\n'
        '    <postgresql>\n      dsn %s\n    </postgresql>\n'
        '  </relstorage>\n</zodb>\n'
        '<zodb my>\n  <relstorage>\n    keep-history false\n'
        '    <mysql>\n%s\n    </mysql>\n  </relstorage>\n</zodb>\n'
        % (pg_dsn(False), '\n'.join('      ' + line % my for line in lines)))
    out = tmp_path / 'r.json'
    assert main([str(config), '-q', '-n', '20', '-c', '1', '--runs', '1',
                 '-t', '2', '--growth', '0', '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data['write_read']) == {'pg', 'my'}
    for name in ('pg', 'my'):
        variants = data['connections'][name]
        assert {name, name + ' no-cache'} <= set(variants)
        for figure in variants.values():
            assert figure['write_ms'] > 0 and figure['read_ms'] > 0
        assert data['raw_limit'][name]['raw_ms'] > 0
        assert data['raw_limit'][name]['storage_ms'] > 0
    assert 'PostgreSQL' in data['environment']['servers']['pg']
    assert 'MariaDB' in data['environment']['servers']['my'] or \
        data['environment']['servers']['my'][0].isdigit()
    if os.path.isdir('/var/run/postgresql'):
        assert 'pg unix-socket no-cache' in data['connections']['pg']


def test_progress_is_told_by_work_not_by_steps(capsys):
    """A 10,000-object step weighs far more than a 100-object one, and
    growth by its commits: the share done counts that."""
    from relstorage_speedtest.main import Runner
    from relstorage_speedtest.main import cost
    small, big = cost(100, 10), cost(10000, 10)
    growth = cost(1, 1, commits=50000)
    assert big > 10 * small and growth > big
    runner = Runner(3, small + big + growth)
    runner.step('small', small)
    runner.step('big', big)
    runner.step('growth', growth)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith('[1/3, 0%] small')
    share = 100 * small // (small + big + growth)
    assert lines[1].startswith('[2/3, %d%%] big' % share)
    assert 'left)' in lines[2]


def test_a_failing_step_keeps_what_was_measured(tmp_path, capsys):
    """A step that fails ends the run with an error, but the figures
    measured before it are written to the JSON file."""
    import ZODB
    from ZODB.FileStorage import FileStorage
    ZODB.DB(FileStorage(str(tmp_path / 'ro.fs'))).close()   # has a root
    config = tmp_path / 'speed.conf'
    config.write_text(
        '<zodb good>\n  <filestorage>\n    path %s/good.fs\n'
        '  </filestorage>\n</zodb>\n'
        '<zodb readonly>\n  <filestorage>\n    path %s/ro.fs\n'
        '    read-only true\n  </filestorage>\n</zodb>\n'
        % (tmp_path, tmp_path))
    out = tmp_path / 'r.json'
    assert main([str(config), '-q', '-n', '10', '-c', '1', '--runs', '1',
                 '-t', '1', '--growth', '0', '--json', str(out)]) == 2
    data = json.loads(out.read_text())
    assert data['write_read']['good']['10']['1']['write_ms'] > 0
    assert 'readonly' not in data['write_read']
    assert 'ReadOnlyError' in data['error']
    assert 'ReadOnlyError' in capsys.readouterr().err


def test_metrics_variant_takes_turns_with_its_contender(tmp_path, capsys):
    (hp,) = parse(CONFIG % {'tmp': tmp_path})[:1]
    variant = hp.with_metrics()
    assert variant.name == 'sqlite-hp metrics'
    assert '<relstorage>\n    metrics true\n' in variant.text
    assert variant.with_metrics().text.count('metrics true') == 1
    assert parse(CONFIG % {'tmp': tmp_path})[1].with_metrics() is None
    out = tmp_path / 'r.json'
    assert main(['-q', '--metrics', '--only', 'sqlite-hp', '-n', '20',
                 '-c', '1', '--runs', '2', '-t', '2', '--growth', '0',
                 '--no-raw', '--no-connections', '--json', str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data['write_read']) == {'sqlite-hp', 'sqlite-hp metrics'}
    for by_size in data['write_read'].values():
        figure = by_size['20']['1']
        assert len(figure['samples']) == 2
        assert figure['write_ms'] > 0 and figure['read_ms'] > 0
    shown = capsys.readouterr().out
    assert 'metrics true against false' in shown
    assert shown.count('%') >= 2


def test_replica_reads_take_turns_and_the_lag_is_measured(tmp_path, capsys):
    from relstorage.testing.dbs import require_pair
    pair = require_pair('postgresql')
    config = tmp_path / 'speed.conf'
    config.write_text(
        '%%import relstorage\n<zodb pg>\n  <relstorage>\n'
        '    keep-history false\n    <postgresql>\n'
        '      dsn host=%s port=%d dbname=relstoragetest_hf2 '
        'user=relstoragetest password=relstoragetest\n'
        '    </postgresql>\n  </relstorage>\n</zodb>\n'
        % (pair.primary.host, pair.primary.port))
    ro = pair.server_file(pair.replica, name='speedtest-ro')
    (pg,) = parse(config.read_text())
    variant = pg.with_replica_reads(ro)
    assert variant.name == 'pg replica-reads'
    assert 'ro-replica-conf %s\n' % ro in variant.text
    assert variant.with_replica_reads(ro).text.count('ro-replica-conf') == 1
    assert parse(CONFIG % {'tmp': tmp_path})[0].with_replica_reads(ro) is None
    out = tmp_path / 'r.json'
    assert main(['-q', '--ro-replica-conf', ro, '-n', '20', '-c', '1,2',
                 '--runs', '1', '-t', '2', '--growth', '0', '--no-raw',
                 '--no-connections', '--json', str(out), str(config)]) == 0
    data = json.loads(out.read_text())
    assert set(data['write_read']) == {'pg', 'pg replica-reads'}
    for by_size in data['write_read'].values():
        for level in ('1', '2'):
            figure = by_size['20'][level]
            assert figure['write_ms'] > 0 and figure['read_ms'] > 0
    lags = data['replica_lag']['pg replica-reads']
    assert len(lags) == 30 and all(lag > 0 for lag in lags)
    assert 'Replica lag after a commit' in capsys.readouterr().out


def test_charts_without_matplotlib_fail_at_start(tmp_path):
    """--charts where matplotlib cannot be imported: refused before
    anything is measured, not after the whole run."""
    code = ('import sys; sys.modules["matplotlib"] = None\n'
            'from relstorage_speedtest.main import main\n'
            'sys.exit(main(["--quick", "--charts", sys.argv[1]]))\n')
    started = time.monotonic()
    done = subprocess.run([sys.executable, '-c', code, str(tmp_path / 'c')],
                          capture_output=True, text=True, env=child_env(),
                          timeout=120)
    assert time.monotonic() - started < 60
    assert done.returncode == 2
    assert '--charts needs matplotlib' in done.stderr
    assert done.stdout == ''
    assert not (tmp_path / 'c').exists()
