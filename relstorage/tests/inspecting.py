"""What the tests of zodbinfo and zodbcheck share: a known workload, a
config file for it, running the tools, and damaging a database the way
a bad disk, a bad restore or another tool would."""
import io
import json
import subprocess
import sys

import ZODB
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob
from ZODB.utils import u64

from relstorage.testing.dbs import child_env

from .test_zodbpack import adapter_section

#: Small chunks, so that one blob has several.
CHUNK = 1000
BLOB = b'b' * 2500   # three chunks


def write_config(tmp_path, factory, blob_dir=None, shared=False):
    lines = ['%import relstorage', '<relstorage main>',
             ' keep-history %s' % ('true' if factory.keep_history
                                   else 'false')]
    if blob_dir is not None:
        lines.append(' blob-dir %s' % blob_dir)
        lines.append(' blob-chunk-size %d' % CHUNK)
        if shared:
            lines.append(' shared-blob-dir true')
    lines += [adapter_section(factory), '</relstorage>', '']
    path = tmp_path / 'inspect.conf'
    path.write_text('\n'.join(lines))
    return str(path)


def open_db(factory, blob_dir=None, shared=False):
    options = {}
    if blob_dir is not None:
        options = dict(blob_dir=str(blob_dir), blob_chunk_size=CHUNK,
                       shared_blob_dir=shared)
    return ZODB.DB(factory.storage(**options))


def workload(db):
    """Three transactions (the root's creation among them): the root
    holds two mappings ``a`` (changed once) and ``b``, a mapping ``c``
    holding ``d``, and a blob of three chunks. Returns ``{name: oid}``
    (ints)."""
    with db.transaction() as conn:
        root = conn.root()
        root['a'] = PersistentMapping(n=1)
        root['b'] = PersistentMapping(n=2)
        root['c'] = PersistentMapping(d=PersistentMapping(n=4))
        blob = root['blob'] = Blob()
        with blob.open('w') as f:
            f.write(BLOB)
    with db.transaction() as conn:
        root = conn.root()
        root['a']['n'] = 3
        oids = {name: u64(root[name]._p_oid) for name in 'abc'}
        oids['d'] = u64(root['c']['d']._p_oid)
        oids['blob'] = u64(root['blob']._p_oid)
        oids['root'] = 0
    return oids


def make_garbage(db):
    """Unlink ``c`` (and so ``d``) from the root."""
    with db.transaction() as conn:
        del conn.root()['c']


def run_tool(tool, *args):
    """``(exit status, stdout, stderr)`` of ``python -m relstorage.TOOL``."""
    proc = subprocess.run(
        [sys.executable, '-m', 'relstorage.' + tool] + list(args),
        capture_output=True, text=True, env=child_env(), timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def run_main(module, *args):
    """``(exit status, stdout)`` of the tool's main() in this process."""
    out = io.StringIO()
    status = module.main(list(args), out=out)
    return status, out.getvalue()


def run_json(module, *args):
    status, text = run_main(module, '--json', *args)
    storages = json.loads(text)['storages']
    assert len(storages) == 1, text
    return status, storages[0]


def execute(factory, *statements):
    """Run ``(sql, params)`` statements in one transaction of their own,
    on a connection of the test's database (placeholders ``%s``)."""
    adapter = factory.adapter()
    session = adapter.connect(for_store=True)
    try:
        session.begin()
        for sql, params in statements:
            session.execute(sql, params)
        session.commit()
    finally:
        session.rollback_quietly()
        session.close()
        adapter.close()


def delete_object(factory, oid):
    """Remove every row of *oid*, as a careless cleanup would."""
    tables = (('object_state', 'current_object') if factory.keep_history
              else ('object_state',))
    execute(factory, *[('DELETE FROM %s WHERE zoid = %%s' % table, (oid,))
                       for table in tables])


def overwrite_state(factory, oid, state):
    """Give every revision of *oid* the bytes *state* (with a matching
    size: damage the storage's own size check does not catch)."""
    execute(factory, ('UPDATE object_state SET state = %s, state_size = %s '
                      'WHERE zoid = %s', (state, len(state), oid)))


#: A record whose class header is fine and whose state is cut short.
BAD_STATE = (b'\x80\x03cpersistent.mapping\nPersistentMapping\nq\x00.'
             b'\x80\x03}q\x01(X\x04\x00\x00')
