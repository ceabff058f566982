"""SQL for blobs kept in the database (``shared-blob-dir false``).

A blob's bytes live in ``blob_chunk`` as rows of at most blob-chunk-size
bytes under a random ``blob_id``; the revision that owns the blob names it
in ``object_state.blob_id``. Chunks are written at vote by the committing
transaction (invisible until it commits) and read one at a time, so no
blob is ever held whole in memory.
"""
import secrets

from .._util import chunks
from .session import in_list
from .sql import SQL


def new_blob_id():
    """A fresh positive 63-bit key (a collision would violate the primary
    key and fail the commit, never mix two blobs)."""
    return secrets.randbits(63) or 1


def upload_blob(session, path, chunk_size):
    """Copy the file at *path* into new chunk rows; return their blob_id.

    Every chunk but the last is full and the last is shorter (empty when
    the size is a multiple of *chunk_size*, and chunk 0 of an empty
    file), so a reader can tell a whole sequence from one that lost
    chunks, at its end as well as in the middle."""
    blob_id = new_blob_id()
    with open(path, 'rb') as f:
        num = 0
        while True:
            data = f.read(chunk_size)
            session.execute(
                'INSERT INTO blob_chunk (blob_id, chunk_num, chunk) '
                'VALUES (%s, %s, %s)', (blob_id, num, data))
            num += 1
            if len(data) < chunk_size:
                break
    return blob_id


#: blob_of's statement; ``{length}`` measures a chunk ``chunk``.
BLOB_OF = SQL(
    'SELECT s.blob_id, '
    '(SELECT COUNT(*) FROM blob_chunk c WHERE c.blob_id = s.blob_id), '
    '(SELECT MIN(chunk_num) FROM blob_chunk c '
    'WHERE c.blob_id = s.blob_id), '
    '(SELECT MAX(chunk_num) FROM blob_chunk c '
    'WHERE c.blob_id = s.blob_id), '
    '(SELECT {length} FROM blob_chunk c WHERE c.blob_id = s.blob_id '
    'AND c.chunk_num = 0), '
    '(SELECT {length} FROM blob_chunk c WHERE c.blob_id = s.blob_id '
    'AND c.chunk_num = (SELECT MAX(chunk_num) FROM blob_chunk d '
    'WHERE d.blob_id = s.blob_id)) '
    'FROM object_state s WHERE s.zoid = %s AND s.tid = %s')
BLOB_OF_SQL = BLOB_OF.format(length='LENGTH(chunk)')


def blob_of(session, oid, tid, sql=BLOB_OF_SQL):
    """What the database holds of the blob of revision *(oid, tid)*, in
    one round trip: None when this session cannot see that revision,
    else ``(blob_id, count, first, last, size)`` -- the revision's
    blob_id (None when it holds no blob), how many chunks that blob has,
    the lowest and highest chunk number, and its size in bytes.

    A whole blob has chunks 0 to count - 1 (the primary key rules out two
    of one number), so any other span means chunks are missing. Every
    chunk but the last is full (see upload_blob), so the size is read
    from the lengths of the first and the last chunk: the server does
    not read the blob. *sql* is BLOB_OF filled with the database's
    measure of a chunk (its mover's blob_of_sql)."""
    row = session.fetchone(sql, (oid, tid))
    if row is None:
        return None
    blob_id, count, first, last, full, tail = row
    count, full, tail = int(count or 0), int(full or 0), int(tail or 0)
    size = (count - 1) * full + tail if count > 1 else full
    return blob_id, count, first, last, size


def read_chunk(session, blob_id, num):
    """The bytes of chunk *num* of *blob_id*, or None past the last."""
    row = session.fetchone(
        'SELECT chunk FROM blob_chunk WHERE blob_id = %s AND chunk_num = %s',
        (blob_id, num))
    if row is None:
        return None
    # An empty chunk is NULL where zero bytes are stored as NULL (Oracle).
    return bytes(row[0]) if row[0] is not None else b''


def delete_blobs(session, blob_ids):
    """Remove every chunk of *blob_ids* (by primary key prefix, so only
    those rows are touched and locked)."""
    for chunk in chunks(sorted(set(blob_ids))):
        session.execute('DELETE FROM blob_chunk WHERE blob_id IN %s'
                        % in_list(chunk), chunk)


def drop_replaced_blobs(session, oids):
    """History-free: remove the blobs of the current revisions of *oids*,
    which this transaction replaces (their rows are locked by it)."""
    blob_ids = []
    for chunk in chunks(oids):
        blob_ids.extend(blob_id for (blob_id,) in session.fetchall(
            'SELECT blob_id FROM object_state WHERE zoid IN %s '
            'AND blob_id IS NOT NULL' % in_list(chunk), chunk))
    delete_blobs(session, blob_ids)


def blob_totals(session):
    """``(blobs, bytes)`` kept in the database (every blob has a chunk 0);
    reads the length of every chunk."""
    blobs, size = session.fetchone(
        'SELECT SUM(CASE WHEN chunk_num = 0 THEN 1 ELSE 0 END), '
        'SUM(LENGTH(chunk)) FROM blob_chunk')
    return int(blobs or 0), int(size or 0)


def chunk_counts(session, blob_ids):
    """``{blob_id: (chunks, highest chunk_num)}`` for those of *blob_ids*
    with any chunk; a blob is whole when it has chunks 0 to the highest
    (a missing last chunk cannot be told from a shorter blob)."""
    found = {}
    for chunk in chunks(sorted(set(blob_ids))):
        for blob_id, count, highest in session.fetchall(
                'SELECT blob_id, COUNT(*), MAX(chunk_num) FROM blob_chunk '
                'WHERE blob_id IN %s GROUP BY blob_id' % in_list(chunk),
                chunk):
            found[blob_id] = (int(count), int(highest))
    return found
