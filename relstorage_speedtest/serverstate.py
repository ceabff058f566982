"""What a benchmark's figures depend on besides the code: the machine, and
each database server's version, uptime, durability and memory settings,
and the sizes of the databases the run used. Printed with the figures
and kept in their JSON, so that two runs can be told apart."""
import os
import platform
import sqlite3

#: Settings that change what a commit or a read costs.
PG_SETTINGS = ('shared_buffers', 'effective_cache_size', 'work_mem',
               'synchronous_commit', 'fsync', 'full_page_writes',
               'wal_level', 'max_connections', 'jit')
MYSQL_SETTINGS = ('innodb_buffer_pool_size', 'innodb_flush_log_at_trx_commit',
                  'innodb_log_file_size', 'sync_binlog', 'log_bin',
                  'innodb_doublewrite', 'max_connections',
                  'transaction_isolation')


def machine():
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {'python': platform.python_version(), 'cpus': os.cpu_count(),
            'platform': platform.platform(), 'load_average': load,
            'sqlite': sqlite3.sqlite_version}


def postgresql(dsn, databases):
    """The server *dsn* reaches: version, uptime, settings, and the size
    of each of *databases* that exists."""
    import psycopg2
    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute('SELECT version(), '
                    'extract(epoch FROM now() - pg_postmaster_start_time())')
        version, uptime = cur.fetchone()
        cur.execute('SELECT name, setting, unit FROM pg_settings '
                    'WHERE name = ANY(%s)', (list(PG_SETTINGS),))
        settings = {name: setting + (unit or '')
                    for name, setting, unit in cur.fetchall()}
        cur.execute('SELECT datname, pg_database_size(datname) '
                    'FROM pg_database WHERE datname = ANY(%s)',
                    (list(databases),))
        sizes = dict(cur.fetchall())
    finally:
        conn.close()
    return {'version': version, 'uptime_seconds': float(uptime),
            'settings': settings, 'database_bytes': sizes}


def mysql(params, databases):
    """Likewise for the MySQL or MariaDB server *params* reach."""
    import MySQLdb
    conn = MySQLdb.connect(**params)
    try:
        cur = conn.cursor()
        cur.execute('SELECT VERSION()')
        version = cur.fetchone()[0]
        cur.execute("SHOW GLOBAL STATUS LIKE 'Uptime'")
        uptime = float(cur.fetchone()[1])
        settings = {}
        for name in MYSQL_SETTINGS:
            cur.execute('SHOW GLOBAL VARIABLES LIKE %s', (name,))
            row = cur.fetchone()
            if row:
                settings[name] = row[1]
        cur.execute('SELECT table_schema, SUM(data_length + index_length) '
                    'FROM information_schema.tables WHERE table_schema IN '
                    '(%s) GROUP BY table_schema'
                    % ', '.join(['%s'] * len(databases)), tuple(databases))
        sizes = {name: int(size or 0) for name, size in cur.fetchall()}
    finally:
        conn.close()
    return {'version': version, 'uptime_seconds': uptime,
            'settings': settings, 'database_bytes': sizes}


def directory_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def describe(state):
    """Lines for a terminal."""
    lines = []
    m = state.get('machine', {})
    lines.append('machine: %s CPUs, load %s, Python %s, SQLite %s, %s' % (
        m.get('cpus'), m.get('load_average'), m.get('python'),
        m.get('sqlite'), m.get('platform')))
    for kind, server in sorted(state.get('servers', {}).items()):
        if 'error' in server:
            lines.append('%s: %s' % (kind, server['error']))
            continue
        lines.append('%s: %s; up %.1f h' % (
            kind, server['version'].split(' on ')[0],
            server['uptime_seconds'] / 3600))
        lines.append('  settings: ' + ', '.join(
            '%s=%s' % item for item in sorted(server['settings'].items())))
        lines.append('  databases: ' + ', '.join(
            '%s %.1f MB' % (name, size / 1e6)
            for name, size in sorted(server['database_bytes'].items())))
    return lines
