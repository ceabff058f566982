"""What the speed test measures: the ``<zodb NAME>`` sections of a
zope.conf-style file, kept as text so that every worker process opens its
own database from it, plus variants of them (unix socket, no local cache)
and a ZEO server the tool may start itself."""
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from relstorage.children import child_env

SECTION = re.compile(r'^[ \t]*<zodb(?:[ \t]+([^>\s]+))?[ \t]*>.*?^[ \t]*</zodb>',
                     re.MULTILINE | re.DOTALL | re.IGNORECASE)
IMPORT = re.compile(r'^[ \t]*%import[ \t]+\S+[ \t]*$', re.MULTILINE)

DEFAULT_CONFIG = """\
%import relstorage
<zodb sqlite-hp>
  <relstorage>
    keep-history true
    <sqlite3>
      data-dir {tmp}/sqlite-hp
    </sqlite3>
  </relstorage>
</zodb>
<zodb sqlite-hf>
  <relstorage>
    keep-history false
    <sqlite3>
      data-dir {tmp}/sqlite-hf
    </sqlite3>
  </relstorage>
</zodb>
"""


class Contender:
    """One database to measure: a name and the config text opening it."""

    def __init__(self, name, text, imports=''):
        self.name = name
        self.text = text
        self.imports = imports

    @property
    def config(self):
        return self.imports + '\n' + self.text

    @property
    def kind(self):
        """'postgresql', 'mysql', 'oracle', 'sqlite', 'zeo',
        'filestorage' or 'other'."""
        text = self.text.lower()
        for tag, kind in (('<postgresql', 'postgresql'), ('<mysql', 'mysql'),
                          ('<oracle', 'oracle'),
                          ('<sqlite3', 'sqlite'), ('<relstorage', 'sqlite'),
                          ('<zeoclient', 'zeo'),
                          ('<filestorage', 'filestorage')):
            if tag in text:
                return kind
        return 'other'

    @property
    def shared(self):
        """Whether several processes may open it at once."""
        return self.kind not in ('filestorage', 'other')

    def open(self):
        import io

        import ZODB.config
        from ZConfig import loadConfigFile
        schema = ZODB.config.getDbSchema()
        config, _ = loadConfigFile(schema, io.StringIO(self.config))
        (section,) = config.database
        return section.open()

    def variant(self, suffix, text):
        return Contender(self.name + suffix, text, self.imports)

    def without_cache(self):
        """The same with the local cache off (RelStorage only)."""
        if '<relstorage' not in self.text.lower():
            return None
        text = re.sub(r'^[ \t]*cache-local-mb[ \t]+\S+[ \t]*\n', '',
                      self.text, flags=re.MULTILINE | re.IGNORECASE)
        text = re.sub(r'(<relstorage[^>]*>)', r'\1\n    cache-local-mb 0',
                      text, count=1, flags=re.IGNORECASE)
        return self.variant(' no-cache', text)

    def with_metrics(self):
        """The same with ``metrics true`` (RelStorage only), to measure
        what recording the metrics costs."""
        if '<relstorage' not in self.text.lower():
            return None
        text = re.sub(r'^[ \t]*metrics[ \t]+\S+[ \t]*\n', '', self.text,
                      flags=re.MULTILINE | re.IGNORECASE)
        text = re.sub(r'(<relstorage[^>]*>)', r'\1\n    metrics true', text,
                      count=1, flags=re.IGNORECASE)
        return self.variant(' metrics', text)

    def with_replica_reads(self, ro_replica_conf):
        """The same PostgreSQL or MySQL contender with its loads from
        the replicas the file *ro_replica_conf* lists, or None."""
        if self.kind not in ('postgresql', 'mysql'):
            return None
        text = re.sub(r'^[ \t]*ro-replica-conf[ \t]+\S+[ \t]*\n', '',
                      self.text, flags=re.MULTILINE | re.IGNORECASE)
        text = re.sub(r'(<relstorage[^>]*>)',
                      lambda m: '%s\n    ro-replica-conf %s'
                      % (m.group(1), ro_replica_conf),
                      text, count=1, flags=re.IGNORECASE)
        return self.variant(' replica-reads', text)

    def through_psycopg3(self):
        """The same PostgreSQL contender through psycopg 3 (``driver
        psycopg``), or None for other contenders, for one that names its
        driver, or where psycopg 3 is not installed."""
        if self.kind != 'postgresql' or re.search(
                r'^[ \t]*driver[ \t]', self.text, flags=re.MULTILINE):
            return None
        if importlib.util.find_spec('psycopg') is None:
            return None
        text = re.sub(r'(<postgresql[^>]*>)', r'\1\n      driver psycopg',
                      self.text, count=1, flags=re.IGNORECASE)
        return self.variant(' psycopg3', text)

    def over_unix_socket(self, pg_socket_dir, mysql_socket):
        """The same server reached over its unix domain socket, or None
        when this contender is not a server reached over TCP."""
        kind = self.kind
        if kind == 'postgresql':
            if not os.path.isdir(pg_socket_dir):
                return None
            text, n = re.subn(r'host=\S+', 'host=%s' % pg_socket_dir,
                              self.text)
            if not n:  # no host: libpq already uses the socket
                return None
        elif kind == 'mysql':
            if not os.path.exists(mysql_socket):
                return None
            text, n = re.subn(r'^([ \t]*)host[ \t]+\S+[ \t]*$',
                              r'\1unix_socket %s' % mysql_socket, self.text,
                              flags=re.MULTILINE)
            text = re.sub(r'^[ \t]*port[ \t]+\S+[ \t]*\n', '', text,
                          flags=re.MULTILINE)
            if not n:
                return None
        else:
            return None
        return self.variant(' unix-socket', text)


def parse(config_text):
    """The contenders of a config file, in order."""
    imports = '\n'.join(m.group(0).strip()
                        for m in IMPORT.finditer(config_text))
    found = []
    for i, m in enumerate(SECTION.finditer(config_text)):
        name = m.group(1) or 'db%d' % (i + 1)
        found.append(Contender(name, m.group(0), imports))
    if not found:
        raise ValueError('the config holds no <zodb NAME> section')
    names = [c.name for c in found]
    if len(set(names)) != len(names):
        raise ValueError('two <zodb> sections have the same name: %s'
                         % ', '.join(sorted(n for n in names
                                            if names.count(n) > 1)))
    return found


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class ZEOServer:
    """A ZEO server over a FileStorage in a temporary directory, on
    127.0.0.1, run as a child process for as long as the test runs."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix='speedtest-zeo-')
        self.port = _free_port()
        # The server logs to a file: a pipe nobody reads fills up with its
        # "waiting for the lock" lines under 8 writers, and the server then
        # blocks writing to it, and every client with it.
        self.log = os.path.join(self.dir, 'server.log')
        with open(self.log, 'wb') as log:
            self.proc = subprocess.Popen(
                [sys.executable, '-m', 'ZEO.runzeo', '-a',
                 '127.0.0.1:%d' % self.port, '-f',
                 os.path.join(self.dir, 'Data.fs')],
                stdout=subprocess.DEVNULL, stderr=log, env=child_env())
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(('127.0.0.1', self.port), 1).close()
                break
            except OSError:
                if self.proc.poll() is not None or \
                        time.monotonic() > deadline:
                    with open(self.log, 'rb') as log:
                        err = log.read().decode(errors='replace')
                    self.stop()
                    raise RuntimeError('the ZEO server did not start: %s'
                                       % err[-2000:])
                time.sleep(0.1)

    def contender(self):
        return Contender('zeo', (
            '<zodb zeo>\n  <zeoclient>\n    server 127.0.0.1:%d\n'
            '  </zeoclient>\n</zodb>\n' % self.port))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
