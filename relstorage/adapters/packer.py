"""SQL for packing, per history mode.

Every method takes the session to run on. The pre-pack reads run on a
snapshot without any lock; the removals run in short transactions that
hold the commit lock (see relstorage.storage.pack).

A reference graph larger than ``pack-graph-mb`` (see
relstorage.storage.pack) lives in the database, in temporary tables of
the removing session, so that packing a database of any size costs its
process no more memory than a page of states: ``pack_root`` (the root and
whatever was committed after the pack time), ``pack_ref`` (one row per
reference of a state current at the pack time), ``pack_reached`` (what
the roots reach, found by one recursive query) and ``pack_gc`` (the
objects to remove, which the batches then take in oid order; a graph
followed in the packing process fills only this one)."""
import time

from zope.interface import implementer

from .blobs import delete_blobs
from .._util import chunks
from .session import in_list
from .sql import SQL
from .sql import Rows
from .sql import EMPTY_TABLE
from .components import IPacker


def _b(value):
    return bytes(value) if value is not None else None


def _page_row(oid, state, tid, kept_tid, kept):
    """A row of a pre-pack page (see Packer.states_at): the bytes as
    bytes, and no bytes for references kept as NULL (which a pack never
    writes: such a row fails keptrefs.decode, and is read again)."""
    if kept_tid is not None and kept is None:
        kept = b''
    return oid, _b(state), tid, kept_tid, _b(kept)


def removed_rows(session, rows):
    """``(revisions, bytes)`` of the ``(state_size, blob_id)`` *rows* of
    revisions being removed, whose blobs are removed here."""
    delete_blobs(session, [blob for _, blob in rows if blob is not None])
    return len(rows), sum(size for size, _ in rows)


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


#: The pack's scratch tables (see the module's docstring).
#: Puts in pack_gc the objects of *table* (current_object or object_state)
#: not reached, current at the pack time (a parameter).
UNREACHED = SQL(
    'INSERT INTO pack_gc (zoid) SELECT c.zoid FROM {table} c WHERE '
    'c.tid <= %s AND NOT EXISTS (SELECT 1 FROM pack_reached r '
    'WHERE r.zoid = c.zoid)')
#: Narrows the deletions the pre-pack did not read (deleted_template) to
#: the objects reached.
REACHED = ' AND EXISTS (SELECT 1 FROM pack_reached r WHERE r.zoid = c.zoid)'
#: Those of the objects in the list {oids} whose current revision is
#: still the one at or before the pack time.
STILL_DELETED = SQL(
    'SELECT zoid FROM current_object WHERE tid <= %s AND '
    'zoid IN {oids} ORDER BY zoid')
#: The columns and the join a pre-pack page reads from object_state
#: (as ``s``) and state_refs (as ``r``): see Packer.states_at. The join
#: bounds state_refs by the oid the page starts after (its first
#: parameter), else PostgreSQL's merge join read state_refs from its
#: first row for every page (a 100,000-object pre-pack took 35% longer).
#: {state} is the state column: the state, or in a page read checked,
#: CHECKED_STATE.
PAGE_COLUMNS_TEMPLATE = SQL('s.zoid, {state}, s.tid, r.tid AS kept_tid, '
                            'r.refs AS kept')
PAGE_COLUMNS = PAGE_COLUMNS_TEMPLATE.format(state='s.state')
#: The state column of a page read checked: empty ({empty}, the
#: database's spelling) where the references kept for the object were
#: read from this very state, as the database finds with {kept_ok} (see
#: relstorage.storage.pack.keptrefs).
CHECKED_STATE = SQL('CASE WHEN r.tid = s.tid AND {kept_ok} THEN {empty} '
                    'ELSE s.state END AS state')


def checked_columns(kept_ok, empty):
    """PAGE_COLUMNS for a page read checked, with the database's test
    *kept_ok* and its empty bytes *empty* (see CHECKED_STATE)."""
    return PAGE_COLUMNS_TEMPLATE.format(
        state=CHECKED_STATE.format(kept_ok=kept_ok, empty=empty))


PAGE_JOIN = ' LEFT JOIN state_refs r ON r.zoid = s.zoid AND r.zoid > %s'
#: The join of one object's rows (state_at_sql).
ONE_JOIN = ' LEFT JOIN state_refs r ON r.zoid = s.zoid'
PACK_TABLES = ('pack_root', 'pack_ref', 'pack_reached', 'pack_gc')
#: The scratch tables, with a slot for their {kind}: TEMPORARY (the
#: removing session's own), or UNLOGGED where no session outlives a
#: transaction (behind a transaction pooler: adapters.postgresql.pooler).
PACK_TABLES_TEMPLATE = (
    SQL('CREATE {kind} TABLE IF NOT EXISTS pack_root '
        '(zoid BIGINT NOT NULL PRIMARY KEY)'),
    SQL('CREATE {kind} TABLE IF NOT EXISTS pack_ref (zoid BIGINT NOT NULL, '
        'to_zoid BIGINT NOT NULL, PRIMARY KEY (zoid, to_zoid))'),
    SQL('CREATE {kind} TABLE IF NOT EXISTS pack_reached '
        '(zoid BIGINT NOT NULL PRIMARY KEY)'),
    SQL('CREATE {kind} TABLE IF NOT EXISTS pack_gc '
        '(zoid BIGINT NOT NULL PRIMARY KEY)'),
)
PACK_TABLES_DDL = tuple(ddl.format(kind='TEMPORARY')
                        for ddl in PACK_TABLES_TEMPLATE)

#: pack_gc's oids from the first to the last of a run taken in order
#: (a range of the primary key, which every database can seek).
GARBAGE_RANGE = ('zoid BETWEEN %s AND %s AND zoid IN '
                 '(SELECT zoid FROM pack_gc WHERE zoid BETWEEN %s AND %s)')
#: The transactions up to a pack tid, but the newest, left without any
#: revision; counted, then deleted.
EMPTY_TRANSACTIONS = SQL(
    '{verb} FROM transactions WHERE tid <= %s AND tid < %s AND NOT '
    'EXISTS (SELECT 1 FROM object_state s WHERE s.tid = transactions.tid)')
COUNT_EMPTY = EMPTY_TRANSACTIONS.format(verb='SELECT COUNT(*)')
DELETE_EMPTY = EMPTY_TRANSACTIONS.format(verb='DELETE')
#: Deletes a table's rows in a GARBAGE_RANGE.
DELETE_GARBAGE = SQL('DELETE FROM {table} WHERE {range}')
#: The sizes and blobs of the revisions in a GARBAGE_RANGE.
GARBAGE_SIZES = SQL(
    'SELECT state_size, blob_id FROM object_state WHERE {range}').format(
        range=GARBAGE_RANGE)


#: The revisions older than the oldest to keep of each object in a list
#: of ``(zoid, tid)``: each term is a range of the primary key, which
#: every database can seek.
OLDER_THAN = SQL('{what} FROM object_state WHERE {rows}')
SIZES_OLDER_THAN = Rows(OLDER_THAN, '(zoid = %s AND tid < %s)', ' OR ',
                        what='SELECT state_size, blob_id')
DELETE_OLDER_THAN = Rows(OLDER_THAN, '(zoid = %s AND tid < %s)', ' OR ',
                         what='DELETE')


@implementer(IPacker)
class Packer:

    #: Creates the scratch tables (if they do not exist).
    scratch_ddl = PACK_TABLES_DDL
    #: The page's statement when read checked, where the database checks
    #: kept references itself (see states_at); None where it does not.
    checked_states_at_sql = None

    def __init__(self, adapter):
        self.adapter = adapter

    @property
    def checks_kept_references(self):
        return self.checked_states_at_sql is not None

    def page_sql(self, checked):
        """The statement of a page (see states_at)."""
        if checked and self.checked_states_at_sql is not None:
            return self.checked_states_at_sql
        return self.states_at_sql

    def states_at(self, session, pack_tid, after_oid, limit, deleted=None,
                  checked=False):
        """``[(oid, state, tid, kept_tid, kept)]`` current as of
        *pack_tid*, oid order, a page of at most *limit* rows read
        (objects created after *pack_tid* are not among them): each
        object's state and its tid, and the references kept for the
        object in state_refs with the tid they were read from (None, None
        when none are kept; see keep_references). The oids of the page's
        objects whose revision current at *pack_tid* records a deletion,
        still current, are appended to the list *deleted* if one is given
        (what deleted_template finds, found on the way). With *checked*, where
        the database checks kept references (checks_kept_references),
        the state is empty bytes for each row whose kept references it
        found were read from that very state."""
        rows = session.fetchall(self.page_sql(checked),
                                (after_oid, pack_tid, after_oid, limit))
        if deleted is not None:
            deleted.extend([row[0] for row in rows
                            if row[1] is None and row[2] <= pack_tid])
        return [_page_row(*row) for row in rows]

    def states_after(self, session, after_tid):
        """``[(oid, state)]`` of every revision committed after
        *after_tid* (their references keep objects alive)."""
        return [(oid, _b(state)) for oid, state in session.fetchall(
            'SELECT zoid, state FROM object_state WHERE tid > %s',
            (after_tid,))]

    # The graph, in the removing session's scratch tables

    def start_graph(self, session):
        """Create (or empty) the scratch tables, in the transaction open
        on *session*."""
        for ddl in self.scratch_ddl:
            session.execute(ddl)
        for table in PACK_TABLES:
            session.execute(EMPTY_TABLE.format(table=table))

    def add_roots(self, session, oids):
        session.executemany('INSERT INTO pack_root (zoid) VALUES (%s)',
                            [(oid,) for oid in sorted(oids)])

    def add_references(self, session, pairs):
        """Add ``(oid, oid it refers to)`` *pairs*, each at most once."""
        session.executemany(
            'INSERT INTO pack_ref (zoid, to_zoid) VALUES (%s, %s)', pairs)

    def keep_references(self, session, rows, stale=()):
        """Keep in state_refs the references ``(oid, tid, refs)`` of
        *rows* (refs: see STATE_REFS_TABLE), replacing those kept for
        the oids *stale* (read from older revisions), in the transaction
        open on *session*."""
        self.forget_kept(session, stale)
        session.executemany(
            'INSERT INTO state_refs (zoid, tid, refs) VALUES (%s, %s, %s)',
            rows)

    def forget_kept(self, session, oids):
        """Remove the references kept for *oids*."""
        for chunk in chunks(sorted(oids)):
            session.execute('DELETE FROM state_refs WHERE zoid IN %s'
                            % in_list(chunk), chunk)

    def add_garbage(self, session, oids):
        """Add *oids* to pack_gc (each once; found by the pre-pack's own
        walk of the graph, instead of mark() and find_garbage())."""
        session.executemany('INSERT INTO pack_gc (zoid) VALUES (%s)',
                            [(oid,) for oid in oids])

    def mark(self, session):
        """Fill pack_reached with what pack_root reaches through
        pack_ref (UNION, not UNION ALL: each object is visited once, so
        cycles end and shared objects cost nothing more)."""
        session.execute(
            'INSERT INTO pack_reached (zoid) WITH RECURSIVE reached (zoid) '
            'AS (SELECT zoid FROM pack_root UNION SELECT p.to_zoid FROM '
            'pack_ref p JOIN reached r ON p.zoid = r.zoid) '
            'SELECT zoid FROM reached')

    def find_garbage(self, session, pack_tid, gc, deleted=None):
        """Fill pack_gc with the objects to remove: those current at
        *pack_tid* that the roots do not reach (with *gc*; mark() ran),
        and those whose revision current at *pack_tid* records a deletion
        (deleteObject, or an undone creation), which go with or without
        garbage collection: the oids *deleted*, when the pre-pack read
        them with the states (states_at), else found by deleted_template (a
        look at every current object's row). Returns how many."""
        reached_clause = ''
        if gc:
            # Two statements: with the deletions in an OR, PostgreSQL ran
            # a subquery per object instead of one anti-join.
            session.execute(UNREACHED.format(table=self.current_table),
                            (pack_tid,))
            if deleted is not None:
                for oids in chunks(deleted):
                    session.execute(
                        'INSERT INTO pack_gc (zoid) SELECT zoid FROM '
                        'pack_reached WHERE zoid IN %s' % in_list(oids),
                        oids)
                return self.garbage_count(session)
            reached_clause = REACHED
        session.execute(self.deleted_template.format(reached=reached_clause),
                        (pack_tid,))
        return self.garbage_count(session)

    def garbage_count(self, session):
        return int(session.scalar('SELECT COUNT(*) FROM pack_gc'))

    def garbage_after(self, session, after, limit):
        """The next *limit* oids of pack_gc after *after*, in order."""
        return [oid for (oid,) in session.fetchall(
            'SELECT zoid FROM pack_gc WHERE zoid > %s ORDER BY zoid '
            'LIMIT %s', (after, limit))]

    def still_garbage(self, session, oids):
        """Those of *oids* that pack_gc holds."""
        found = []
        for chunk in chunks(sorted(oids)):
            found.extend(oid for (oid,) in session.fetchall(
                'SELECT zoid FROM pack_gc WHERE zoid IN %s'
                % in_list(chunk), chunk))
        return found

    def spare(self, session, oids):
        """Take *oids* out of pack_gc."""
        for chunk in chunks(sorted(oids)):
            session.execute('DELETE FROM pack_gc WHERE zoid IN %s'
                            % in_list(chunk), chunk)

    # The state a --prepack run leaves for a later --use-prepack-state pack

    def save_prepack(self, session, pack_tid, checked_tid):
        """Keep pack_gc (replacing any earlier pre-pack's result), in the
        transaction open on *session*."""
        self.forget_prepack(session)
        session.execute('INSERT INTO pack_garbage (zoid) '
                        'SELECT zoid FROM pack_gc')
        set_meta(session, prepack_tid=pack_tid,
                 prepack_checked_tid=checked_tid)

    def load_prepack(self, session):
        """``(pack_tid, checked_tid)`` of the last pre-pack, its garbage
        put in pack_gc (start_graph() ran), or None if there is none (or
        a pack has used it since)."""
        meta = dict(session.fetchall(
            "SELECT name, value FROM relstorage_meta "
            "WHERE name IN ('prepack_tid', 'prepack_checked_tid')"))
        if len(meta) != 2:
            return None
        session.execute('INSERT INTO pack_gc (zoid) '
                        'SELECT zoid FROM pack_garbage')
        return int(meta['prepack_tid']), int(meta['prepack_checked_tid'])

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

    def remove_garbage(self, session, oids):
        """Remove every revision of *oids*, a run of pack_gc's oids taken
        in order (garbage_after), and their blobs; return ``(revisions,
        bytes)`` removed."""
        removed = removed_rows(session, session.fetchall(
            GARBAGE_SIZES, (oids[0], oids[-1]) * 2))
        self.delete_objects(session, oids)
        return removed

    def delete_objects(self, session, oids, tables=None):
        """Delete the rows of *oids* from *tables* (all the object
        tables by default)."""
        bounds = (oids[0], oids[-1]) * 2
        for table in (self.object_tables if tables is None else tables):
            session.execute(DELETE_GARBAGE.format(table=table,
                                                  range=GARBAGE_RANGE),
                            bounds)


class HistoryPreservingPacker(Packer):

    object_tables = ('object_state', 'current_object', 'state_refs')
    current_table = 'current_object'
    #: Puts in pack_gc the objects whose revision current at the pack time
    #: records a deletion.
    deleted_template = SQL(
        'INSERT INTO pack_gc (zoid) SELECT c.zoid FROM current_object c '
        'JOIN object_state s ON s.zoid = c.zoid AND s.tid = c.tid '
        'WHERE c.tid <= %s AND s.state IS NULL{reached}')
    # A page is a run of object_state's primary key: every revision at or
    # before the pack time, the newest of each object kept here
    # (states_at). The database reads the rows one after another instead
    # of finding each object's newest revision with a search of its own:
    # the 1,067,203 objects of a 1,000,000-object benchmark database with
    # history read in 1.4 s against 2.3-2.5 on PostgreSQL, 1.7 against
    # 2.7-2.8 on MariaDB. Older revisions come too (their states NULL on
    # PostgreSQL, see its packer).
    #: states_at_sql with a slot for an index hint after the table.
    states_at_template = SQL(
        'SELECT {columns} FROM object_state s{index}{join} WHERE '
        's.tid <= %s AND s.zoid > %s ORDER BY s.zoid, s.tid LIMIT %s')
    states_at_sql = states_at_template.format(
        columns=PAGE_COLUMNS, index='', join=PAGE_JOIN)
    #: One object's row current at the pack time (a page holding nothing
    #: but revisions of one object).
    state_at_sql = SQL(
        'SELECT {columns} FROM object_state s{join} WHERE s.zoid = %s AND '
        's.tid <= %s ORDER BY s.tid DESC LIMIT 1').format(
            columns=PAGE_COLUMNS, join=ONE_JOIN)

    def states_at(self, session, pack_tid, after_oid, limit, deleted=None,
                  checked=False):
        rows = session.fetchall(self.page_sql(checked),
                                (after_oid, pack_tid, after_oid, limit))
        # In (oid, tid) order: each object's first place, its last row.
        newest = {row[0]: row for row in rows}
        if len(rows) >= limit:
            # The page may end before the last object's newest revision:
            # that object starts the next page, unless it is all there is.
            last = rows[-1][0]
            if len(newest) > 1:
                del newest[last]
            else:
                newest[last] = session.fetchone(self.state_at_sql,
                                                (last, pack_tid))
        if deleted is not None:
            gone = [oid for oid, row in newest.items() if row[1] is None]
            if gone:
                # A deletion current at the pack time that is still the
                # object's current revision (not undone since).
                deleted.extend(oid for (oid,) in session.fetchall(
                    STILL_DELETED.format(oids=in_list(gone)),
                    [pack_tid] + gone))
        return [_page_row(*row) for row in newest.values()]

    def last_pack_tid(self, session):
        return session.scalar(
            'SELECT MAX(tid) FROM transactions WHERE packed = %s', (True,))

    count_old_sql = (
        'SELECT COUNT(*) FROM (SELECT zoid FROM object_state WHERE '
        'tid <= %s GROUP BY zoid HAVING COUNT(*) > 1) k')
    #: old_after_sql with a slot for an index hint after the table.
    old_after_template = SQL(
        'SELECT zoid, MAX(tid) FROM object_state{index} WHERE tid <= %s AND '
        'zoid > %s GROUP BY zoid HAVING COUNT(*) > 1 ORDER BY zoid LIMIT %s')
    old_after_sql = old_after_template.format(index='')

    def count_old_revisions(self, session, pack_tid):
        """How many objects have more than one revision at or before
        *pack_tid*."""
        return int(session.scalar(self.count_old_sql, (pack_tid,)))

    def old_revisions_after(self, session, pack_tid, after, limit):
        """``[(oid, tid)]`` for the next *limit* oids after *after* with
        more than one revision at or before *pack_tid*, in order, each
        with its revision current at *pack_tid* (the oldest to keep)."""
        return session.fetchall(self.old_after_sql, (pack_tid, after, limit))

    def remove_old_revisions(self, session, keep):
        """Drop the revisions older than *keep*'s, ``[(oid, oldest tid
        to keep)]``, and their blobs; return ``(revisions, bytes)``."""
        revisions = size = 0
        for part in chunks(keep, 200):
            params = [value for pair in part for value in pair]
            rows = session.fetchall(SIZES_OLDER_THAN.text(len(part)), params)
            session.execute(DELETE_OLDER_THAN.text(len(part)), params)
            part_revisions, part_size = removed_rows(session, rows)
            revisions += part_revisions
            size += part_size
        return revisions, size

    def finish(self, session, pack_tid):
        """Mark transactions up to *pack_tid* packed and drop those left
        without any revision (never the newest one); return how many
        transactions went."""
        newest = session.scalar('SELECT MAX(tid) FROM transactions')
        session.execute(
            'UPDATE transactions SET packed = %s WHERE tid <= %s',
            (True, pack_tid))
        count = int(session.scalar(COUNT_EMPTY, (pack_tid, newest)))
        session.execute(DELETE_EMPTY, (pack_tid, newest))
        return count


class HistoryFreePacker(Packer):

    object_tables = ('object_state', 'state_refs')
    current_table = 'object_state'
    # A deleted object keeps its row, with a NULL state, as a tombstone
    # that tells polls of the deletion; packing removes the tombstones.
    deleted_template = SQL(
        'INSERT INTO pack_gc (zoid) SELECT c.zoid FROM object_state c '
        'WHERE c.tid <= %s AND c.state IS NULL{reached}')

    states_at_template = SQL(
        'SELECT {columns} FROM object_state s{join} WHERE s.tid <= %s '
        'AND s.zoid > %s ORDER BY s.zoid LIMIT %s')
    states_at_sql = states_at_template.format(columns=PAGE_COLUMNS,
                                              join=PAGE_JOIN)

    def last_pack_tid(self, session):
        return None

    def count_old_revisions(self, session, pack_tid):
        return 0

    def old_revisions_after(self, session, pack_tid, after, limit):
        return []

    def remove_old_revisions(self, session, keep):
        return 0, 0

    def finish(self, session, pack_tid):
        return 0
