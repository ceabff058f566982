"""SQL for packing, per history mode.

Every method takes the session to run on. The pre-pack reads run on a
snapshot without any lock; the removals run in short transactions that
hold the commit lock (see relstorage.storage.pack)."""
import time

from .blobs import delete_blobs
from .session import chunks
from .session import in_list


def _b(value):
    return bytes(value) if value is not None else None


def forget_meta(session, names):
    """Remove the relstorage_meta entries *names*."""
    session.execute('DELETE FROM relstorage_meta WHERE name IN %s'
                    % in_list(names), list(names))


def set_meta(session, **values):
    """Set relstorage_meta entries (name = str(value)), replacing any."""
    forget_meta(session, sorted(values))
    session.executemany(
        'INSERT INTO relstorage_meta (name, value) VALUES (%s, %s)',
        [(name, str(value)) for name, value in sorted(values.items())])


class Packer:

    def __init__(self, adapter):
        self.adapter = adapter

    def states_at(self, session, pack_tid, after_oid, limit):
        """``[(oid, state)]`` current as of *pack_tid*, oid order, a page."""
        return [(oid, _b(state)) for oid, state in session.fetchall(
            self.states_at_sql, (pack_tid, after_oid, limit))]

    def states_after(self, session, after_tid):
        """``[(oid, state)]`` of every revision committed after
        *after_tid* (their references keep objects alive)."""
        return [(oid, _b(state)) for oid, state in session.fetchall(
            'SELECT zoid, state FROM object_state WHERE tid > %s',
            (after_tid,))]

    def deleted_objects(self, session, pack_tid):
        """Oids whose current revision, committed at or before *pack_tid*,
        records a deletion (deleteObject, or an undone creation): packing
        removes them altogether, with or without garbage collection."""
        return [oid for (oid,) in session.fetchall(self.deleted_sql,
                                                   (pack_tid,))]

    # The state a --prepack run leaves for a later --use-prepack-state pack

    def save_prepack(self, session, pack_tid, checked_tid, garbage):
        """Record a pre-pack's result (replacing any earlier one) in the
        transaction open on *session*."""
        self.forget_prepack(session)
        session.executemany('INSERT INTO pack_garbage (zoid) VALUES (%s)',
                            [(oid,) for oid in sorted(garbage)])
        set_meta(session, prepack_tid=pack_tid,
                 prepack_checked_tid=checked_tid)

    def load_prepack(self, session):
        """``(pack_tid, checked_tid, garbage)`` of the last pre-pack, or
        None if there is none (or a pack has used it since)."""
        meta = dict(session.fetchall(
            "SELECT name, value FROM relstorage_meta "
            "WHERE name IN ('prepack_tid', 'prepack_checked_tid')"))
        if len(meta) != 2:
            return None
        garbage = {oid for (oid,) in session.fetchall(
            'SELECT zoid FROM pack_garbage')}
        return (int(meta['prepack_tid']), int(meta['prepack_checked_tid']),
                garbage)

    def forget_prepack(self, session):
        forget_meta(session, ('prepack_tid', 'prepack_checked_tid'))
        if session.table_exists('pack_garbage'):
            session.execute('DELETE FROM pack_garbage')

    # The last pack, for zodbinfo

    def record_pack(self, session, pack_tid):
        """Note, in the transaction of a pack's last batch, that a pack to
        *pack_tid* ended now (replacing the note of an earlier one)."""
        set_meta(session, last_pack_tid=pack_tid,
                 last_pack_time=repr(time.time()))

    def last_pack(self, session):
        """``(pack_tid, unix time it ended)`` of the last pack that
        recorded itself, or None."""
        meta = dict(session.fetchall(
            "SELECT name, value FROM relstorage_meta "
            "WHERE name IN ('last_pack_tid', 'last_pack_time')"))
        if len(meta) != 2:
            return None
        return int(meta['last_pack_tid']), float(meta['last_pack_time'])

    def forget_pack(self, session):
        forget_meta(session, ('last_pack_tid', 'last_pack_time'))

    def remove_objects(self, session, oids):
        """Remove every revision of *oids* and their blobs; return
        ``(revisions, bytes)`` removed."""
        revisions = size = 0
        blob_ids = []
        for chunk in chunks(oids):
            for state_size, blob_id in session.fetchall(
                    'SELECT state_size, blob_id FROM object_state '
                    'WHERE zoid IN %s' % in_list(chunk), chunk):
                revisions += 1
                size += state_size
                if blob_id is not None:
                    blob_ids.append(blob_id)
        delete_blobs(session, blob_ids)
        self.delete_objects(session, oids)
        return revisions, size

    def delete_objects(self, session, oids):
        for chunk in chunks(oids):
            for table in self.object_tables:
                session.execute('DELETE FROM %s WHERE zoid IN %s'
                                % (table, in_list(chunk)), chunk)


class HistoryPreservingPacker(Packer):

    object_tables = ('object_state', 'current_object')
    deleted_sql = (
        'SELECT c.zoid FROM current_object c JOIN object_state s '
        'ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE c.tid <= %s AND s.state IS NULL')
    # The page is chosen inside the aggregate, so each query reads only its
    # own oids (by the primary key), not the whole table; each state is
    # then fetched by its key. (Joined instead, PostgreSQL misjudged the
    # page's size and hashed a scan of the whole table for every page:
    # 19 ms a page at 100,000 objects, growing with the table, against
    # 3.7 ms.)
    states_at_sql = (
        'SELECT k.zoid, (SELECT s.state FROM object_state s '
        'WHERE s.zoid = k.zoid AND s.tid = k.tid) FROM '
        '(SELECT zoid, MAX(tid) AS tid FROM object_state WHERE tid <= %s '
        'AND zoid > %s GROUP BY zoid ORDER BY zoid LIMIT %s) k '
        'ORDER BY k.zoid')

    def last_pack_tid(self, session):
        return session.scalar(
            'SELECT MAX(tid) FROM transactions WHERE packed = %s', (True,))

    def objects_with_old_revisions(self, session, pack_tid):
        """Oids with more than one revision at or before *pack_tid*."""
        return [oid for (oid,) in session.fetchall(
            'SELECT zoid FROM object_state WHERE tid <= %s '
            'GROUP BY zoid HAVING COUNT(*) > 1 ORDER BY zoid', (pack_tid,))]

    def remove_old_revisions(self, session, oids, pack_tid):
        """Drop the revisions of *oids* older than the one current at
        *pack_tid*, and their blobs; return ``(revisions, bytes, keep)``,
        *keep* mapping each oid to the oldest revision kept."""
        revisions = size = 0
        keep = {}
        for chunk in chunks(oids):
            rows = session.fetchall(
                'SELECT zoid, tid, state_size, blob_id FROM object_state '
                'WHERE zoid IN %s AND tid <= %%s' % in_list(chunk),
                list(chunk) + [pack_tid])
            kept = {}
            for oid, tid, _, _ in rows:
                kept[oid] = max(tid, kept.get(oid, tid))
            blob_ids = []
            for oid, tid, state_size, blob_id in rows:
                if tid < kept[oid]:
                    revisions += 1
                    size += state_size
                    if blob_id is not None:
                        blob_ids.append(blob_id)
            delete_blobs(session, blob_ids)
            for part in chunks(sorted(kept.items()), 200):
                # One statement (one round trip) per part: each term is a
                # range of the primary key, which every database can seek.
                session.execute(
                    'DELETE FROM object_state WHERE '
                    + ' OR '.join(['(zoid = %s AND tid < %s)'] * len(part)),
                    [value for pair in part for value in pair])
            keep.update(kept)
        return revisions, size, keep

    def finish(self, session, pack_tid):
        """Mark transactions up to *pack_tid* packed and drop those left
        without any revision (never the newest one); return how many
        transactions went."""
        newest = session.scalar('SELECT MAX(tid) FROM transactions')
        session.execute(
            'UPDATE transactions SET packed = %s WHERE tid <= %s',
            (True, pack_tid))
        empty = ('FROM transactions WHERE tid <= %s AND tid < %s AND NOT '
                 'EXISTS (SELECT 1 FROM object_state s '
                 'WHERE s.tid = transactions.tid)')
        count = int(session.scalar('SELECT COUNT(*) ' + empty,
                                   (pack_tid, newest)))
        session.execute('DELETE ' + empty, (pack_tid, newest))
        return count


class HistoryFreePacker(Packer):

    object_tables = ('object_state',)
    # A deleted object keeps its row, with a NULL state, as a tombstone
    # that tells polls of the deletion; packing removes the tombstones.
    deleted_sql = ('SELECT zoid FROM object_state WHERE state IS NULL '
                   'AND tid <= %s')
    states_at_sql = (
        'SELECT zoid, state FROM object_state WHERE tid <= %s '
        'AND zoid > %s ORDER BY zoid LIMIT %s')

    def last_pack_tid(self, session):
        return None

    def objects_with_old_revisions(self, session, pack_tid):
        return []

    def remove_old_revisions(self, session, oids, pack_tid):
        return 0, 0, {}

    def finish(self, session, pack_tid):
        return 0
