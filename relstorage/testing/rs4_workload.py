"""Filling a database with RelStorage 4.3, and describing what a storage
reads from one.

Run as a script with the Python of a virtualenv holding RelStorage 4.3
(see rs4.py), it builds a RelStorage 4 database with history, blobs
kept in the database, metadata, an undo, a pack and a garbage object,
then writes ``dump(storage)`` as JSON. The tests import ``dump`` to
describe the same database as this project reads it after the upgrade:
the two descriptions must be equal.

Usage: python rs4_workload.py KIND KEEP_HISTORY WHERE OUT.json [BLOB_DIR
[cache]] (KIND postgresql with WHERE a dsn, mysql with WHERE
host:port:user:password:db, or sqlite with WHERE a data-dir; BLOB_DIR the
shared blob directory, or with ``cache`` the blob cache of blobs kept in
the database, which the dump fills: else a temporary one).
"""
import hashlib
import json
import shutil
import sys
import tempfile
import time

#: RelStorage 4's chunk size here (its option blob-chunk-size): small,
#: so that blobs take several chunks, one of them an exact multiple.
CHUNK = 4096
#: Blob sizes written: under a chunk, several chunks, and a multiple.
BLOB_SIZES = (100, 3 * CHUNK + 17, 2 * CHUNK)


def _sha(data):
    return hashlib.sha256(data).hexdigest() if data is not None else None


def dump(storage):
    """What *storage* holds, as JSON-ready data: every transaction and
    record the iterator yields (with each blob's digest), and the current
    state and blob of every object."""
    from ZODB.blob import is_blob_record
    from ZODB.POSException import POSKeyError

    def blob_sha(oid, tid):
        try:
            with open(storage.loadBlob(oid, tid), 'rb') as f:
                return _sha(f.read())
        except POSKeyError:
            return 'missing'

    transactions = []
    oids = set()
    for txn in storage.iterator():
        records = []
        for record in txn:
            oids.add(record.oid)
            blob = (blob_sha(record.oid, record.tid)
                    if record.data and is_blob_record(record.data) else None)
            records.append([record.oid.hex(), _sha(record.data), blob])
        transactions.append({
            'tid': txn.tid.hex(), 'status': txn.status,
            'user': txn.user.hex() if isinstance(txn.user, bytes)
            else txn.user,
            'description': txn.description.hex()
            if isinstance(txn.description, bytes) else txn.description,
            'extension': sorted((str(k), str(v))
                                for k, v in txn.extension.items()),
            'records': sorted(records)})
    current = {}
    for oid in sorted(oids):
        try:
            data, tid = storage.load(oid)
        except POSKeyError:
            current[oid.hex()] = None
            continue
        blob = blob_sha(oid, tid) if is_blob_record(data) else None
        current[oid.hex()] = [tid.hex(), _sha(data), blob]
    return {'transactions': transactions, 'current': current}


def _fill(storage, keep_history):
    import transaction
    import ZODB
    from persistent.mapping import PersistentMapping
    from ZODB.blob import Blob
    from ZODB.serialize import referencesf

    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    for n in range(5):
        root['m%d' % n] = PersistentMapping(n=n, text='x' * (n * 300))
    txn = transaction.get()
    txn.setUser('admin')
    txn.note('first objects')
    txn.setExtendedInfo('tool', 'rs4_workload')
    transaction.commit()
    for n, size in enumerate(BLOB_SIZES):
        root['blob%d' % n] = Blob(bytes(range(256)) * (size // 256)
                                  + b'z' * (size % 256))
    transaction.get().note('blobs')
    transaction.commit()
    for step in range(3):
        root['m1']['n'] = step
        root['m2']['text'] = 'y' * step
        transaction.commit()
    with root['blob1'].open('w') as f:
        f.write(b'a second revision of the blob')
    transaction.commit()
    root['garbage'] = PersistentMapping(doomed=True)
    transaction.commit()
    del root['garbage']
    transaction.commit()
    if keep_history:
        # Undo the creation of an object: it exists no longer, but its
        # history does.
        root['undone'] = PersistentMapping(short='lived')
        transaction.get().note('to be undone')
        transaction.commit()
        db.undo(db.undoLog(0, 1)[0]['id'])
        transaction.commit()
        # A pack to before the last updates marks older transactions
        # packed and removes what nothing refers to.
        conn.close()
        time.sleep(0.1)
        pack_time = time.time()
        time.sleep(0.1)
        conn = db.open()
        conn.root()['m3']['n'] = 'after the pack time'
        transaction.commit()
        storage.pack(pack_time, referencesf)
    else:
        storage.pack(time.time(), referencesf)
    conn.close()
    return db


def adjust_for_mariadb():
    """RelStorage 4.3 cannot create its schema on MariaDB 10.11 as it is:
    it reads the version as MySQL 8.0.19 or later (and writes MySQL-only
    upserts), and declares a column-level foreign key that MySQL ignores
    and MariaDB enforces, and fails. For these tests only, in this
    throw-away process: MariaDB is taken for MySQL 5.7, and that foreign
    key is left out."""
    from relstorage.adapters import schema as base
    from relstorage.adapters.mysql import schema as mysql_schema
    detector = mysql_schema.MySQLVersionDetector
    fetch = detector._fetch_version_from_server

    def as_mysql57(self, cursor):
        version = fetch(self, cursor)
        return '5.7.40' if 'mariadb' in version.lower() else version
    detector._fetch_version_from_server = as_mysql57
    for cls in (base.AbstractSchemaInstaller,
                mysql_schema.MySQLSchemaInstaller):
        if 'CREATE_OBJECT_STATE_TMPLS' in vars(cls):
            cls.CREATE_OBJECT_STATE_TMPLS = tuple(
                t.replace('REFERENCES "transaction"', '')
                for t in cls.CREATE_OBJECT_STATE_TMPLS)


def adapter_section(kind, where):
    """The adapter section of a config reaching *where*: a dsn, a MySQL
    ``host:port:user:password:db``, or an SQLite data-dir."""
    if kind == 'postgresql':
        return '<postgresql>\n dsn %s\n</postgresql>' % where
    if kind == 'mysql':
        host, port, user, password, db = where.split(':')
        return ('<mysql>\n host %s\n port %s\n user %s\n passwd %s\n'
                ' db %s\n</mysql>' % (host, port, user, password, db))
    return '<sqlite3>\n data-dir %s\n</sqlite3>' % where


def main(kind, keep_history, where, out, blob_dir='', mode='shared'):
    """Build the database; *blob_dir*, when given, is the shared blob
    directory it keeps its blobs in, or with *mode* ``cache`` its blob
    cache (the blobs going into the database)."""
    keep_history = keep_history == 'true'
    if kind == 'mysql':
        adjust_for_mariadb()
    adapter = adapter_section(kind, where)
    shared = bool(blob_dir) and mode != 'cache'
    # Without a blob directory given the blobs go into the database, and
    # the blob directory is RelStorage 4's cache of them: removed at the
    # end.
    made = not blob_dir
    blob_dir = blob_dir or tempfile.mkdtemp(prefix='rs4-blobs-')
    try:
        _build(keep_history, adapter, blob_dir, shared, out)
    finally:
        if made:
            shutil.rmtree(blob_dir, ignore_errors=True)


def _build(keep_history, adapter, blob_dir, shared, out):
    import ZODB.config
    config = """
%%import relstorage
<relstorage>
  keep-history %s
  blob-dir %s
  shared-blob-dir %s
  blob-chunk-size %d
  %s
</relstorage>
""" % ('true' if keep_history else 'false', blob_dir,
       'true' if shared else 'false', CHUNK, adapter)
    storage = ZODB.config.storageFromString(config)
    storage.zap_all()
    db = _fill(storage, keep_history)
    with open(out, 'w') as f:
        json.dump(dump(db.storage), f, indent=1, sort_keys=True)
    db.close()


if __name__ == '__main__':
    main(*sys.argv[1:7])
