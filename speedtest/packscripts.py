"""What each side of ``speedtest.pack`` runs with its own Python: one
script, kept here as source text and written to a file of its own, that
builds the database, commits beside the pack, or reads what is left.

It imports ZODB and whichever ``relstorage`` its Python has, never this
package, so that the same text runs in the other side's virtualenv.

    python packside.py build|writer|verify SPEC
    python packside.py zodbpack ZODBPACK-ARGS

RelStorage 4.3 on MariaDB 10.11 (SPEC's ``mariadb``) needs adjustments,
below: both to create its schema, the version one to commit. Its
``zodbpack`` needs the version one too (``packside.py zodbpack`` applies
it, then calls that version's ``relstorage.zodbpack.main``): as installed
it packs, but on opening it takes the server for MySQL 8, finds stored
procedures made for another version and replaces them, and a writer
committing meanwhile fails (``PROCEDURE lock_objects_and_detect_conflicts
does not exist``).
"""
import os

SCRIPT = r'''
import hashlib
import json
import signal
import sys
import time

import transaction
import ZODB.config
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping


def as_mysql57():
    """RelStorage 4.3 reads MariaDB 10.11's version as MySQL 8.0.19 or
    later and then writes upserts only MySQL accepts: in this process,
    MariaDB is taken for MySQL 5.7."""
    from relstorage.adapters.mysql import schema
    detector = schema.MySQLVersionDetector
    fetch = detector._fetch_version_from_server

    def fetched(self, cursor):
        version = fetch(self, cursor)
        return '5.7.40' if 'mariadb' in version.lower() else version
    detector._fetch_version_from_server = fetched


def without_column_reference():
    """RelStorage 4.3 declares object_state.tid with a column-level
    REFERENCES, which MySQL ignores and MariaDB enforces (and the schema
    then cannot be made): left out when the schema is created here."""
    from relstorage.adapters import schema
    from relstorage.adapters.mysql import schema as mysql_schema
    for cls in (schema.AbstractSchemaInstaller,
                mysql_schema.MySQLSchemaInstaller):
        templates = vars(cls).get('CREATE_OBJECT_STATE_TMPLS')
        if templates:
            cls.CREATE_OBJECT_STATE_TMPLS = tuple(
                text.replace('REFERENCES "transaction"', '')
                for text in templates)


def open_db(spec, creating=False):
    if spec.get('mariadb'):
        as_mysql57()
        if creating:
            without_column_reference()
    return ZODB.config.databaseFromString(
        '%import relstorage\n<zodb>\n' + spec['section'] + '\n</zodb>\n')


def build(db, objects, batch=1000):
    """*objects* objects in a BTree; a fifth then changed (history), a
    third unlinked (garbage)."""
    with db.transaction() as conn:
        conn.root()['tree'] = OOBTree()
    for start in range(0, objects, batch):
        with db.transaction() as conn:
            tree = conn.root()['tree']
            for i in range(start, min(start + batch, objects)):
                tree[i] = PersistentMapping(value=i)
    for start in range(0, objects, batch * 5):
        with db.transaction() as conn:
            tree = conn.root()['tree']
            for i in range(start, min(start + batch * 5, objects), 5):
                tree[i]['value'] = -i
    for start in range(0, objects, batch * 3):
        with db.transaction() as conn:
            tree = conn.root()['tree']
            for i in range(start, min(start + batch * 3, objects), 3):
                del tree[i]


def tree_digest(db):
    """Items in the tree and a digest of their keys and values."""
    conn = db.open()
    try:
        pairs = [[key, value['value']]
                 for key, value in conn.root()['tree'].items()]
    finally:
        conn.close()
    return len(pairs), hashlib.sha256(
        json.dumps(pairs).encode()).hexdigest()[:16]


def do_build(spec):
    db = open_db(spec, creating=True)
    started = time.perf_counter()
    build(db, spec['objects'])
    seconds = time.perf_counter() - started
    print(json.dumps({'build_seconds': seconds}))
    db.close()


def do_writer(spec):
    """Small commits until SIGTERM, one JSON line per commit."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *args: stopping.append(1))
    db = open_db(spec)
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    n = 0

    def commit():
        tm.begin()
        conn.root()['writer'] = n
        tm.commit()
    commit()  # the first one opens and loads: not counted
    print(json.dumps({'ready': True}), flush=True)
    while not stopping:
        n += 1
        at = time.time()
        started = time.perf_counter()
        error = None
        try:
            commit()
        except Exception as e:  # noqa: BLE001 -- reported to the parent
            tm.abort()
            error = repr(e)
        print(json.dumps({'at': at, 'seconds': time.perf_counter() - started,
                          'error': error}), flush=True)
        time.sleep(0.005)
    conn.close()
    db.close()


def do_verify(spec):
    db = open_db(spec)
    items, digest = tree_digest(db)
    print(json.dumps({'tree_items': items, 'tree_digest': digest}))
    db.close()


def do_zodbpack(args):
    """RelStorage 4.3's own zodbpack, with MariaDB taken for MySQL 5.7."""
    as_mysql57()
    from relstorage.zodbpack import main
    sys.exit(main(['zodbpack'] + args))


if __name__ == '__main__':
    if sys.argv[1] == 'zodbpack':
        do_zodbpack(sys.argv[2:])
    else:
        {'build': do_build, 'writer': do_writer,
         'verify': do_verify}[sys.argv[1]](json.loads(sys.argv[2]))
'''


def write_script(directory):
    """The script, written to *directory* (which then comes first on the
    child's ``sys.path``, not the working directory); its path."""
    path = os.path.join(directory, 'packside.py')
    with open(path, 'w') as f:
        f.write(SCRIPT)
    return path
