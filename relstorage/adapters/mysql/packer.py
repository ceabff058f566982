"""MySQL's pack: deletions joined from pack_gc so that InnoDB locks only
the rows of the garbage, pages read along the primary key, old revisions
removed through a scratch table, and recursive queries without a bound
on their depth."""
from ..packer import PAGE_COLUMNS
from ..packer import PAGE_JOIN
from ..packer import HistoryFreePacker
from ..packer import HistoryPreservingPacker
from ..packer import checked_columns
from ..packer import removed_rows
from ..sql import SQL


#: Lifts the bound on a recursive query's depth, by whether the server
#: is MariaDB (its variable's name) or MySQL.
RECURSION_LIMIT = SQL('SET SESSION {variable} = 4294967295')
UNLIMITED_RECURSION = {
    True: RECURSION_LIMIT.format(variable='max_recursive_iterations'),
    False: RECURSION_LIMIT.format(variable='cte_max_recursion_depth')}


#: Deletes the rows of {table} whose objects are in pack_gc, between two
#: oids.
DELETE_JOINED = SQL(
    'DELETE t FROM pack_gc g STRAIGHT_JOIN {table} t ON t.zoid = '
    'g.zoid WHERE g.zoid BETWEEN %s AND %s')


class MySQLPackerMixin:
    """InnoDB may answer ``DELETE ... WHERE zoid IN (...)``, or a range of
    the primary key joined to pack_gc, by scanning object rows, locking
    each one it reads: it would wait for a live row that a voting
    committer has locked -- while the pack holds the commit lock that
    committer waits for. The deletes are joined from pack_gc
    (STRAIGHT_JOIN: that order, whatever the optimizer would choose), so
    that InnoDB reads pack_gc's run of oids and locks only the rows of
    those objects (a store session reads committed: no gap locks)."""

    def delete_objects(self, session, oids, tables=None):
        if tables is None:
            tables = self.object_tables
        for table in tables:
            session.execute(DELETE_JOINED.format(table=table),
                            (oids[0], oids[-1]))

    def mark(self, session):
        # A recursive query stops at cte_max_recursion_depth levels on
        # MySQL (1000 by default) and max_recursive_iterations on
        # MariaDB: a long chain of objects must not stop the pack.
        server = self.adapter.server
        session.execute(UNLIMITED_RECURSION[
            server is None or bool(server.mariadb)])
        super().mark(session)


#: Fills the index slot of a statement reading object_state: by its
#: primary key, whatever the optimizer would choose.
ALONG_PRIMARY_KEY = ' FORCE INDEX (PRIMARY)'


#: The revisions older than the oldest one to keep of each object that
#: pack_keep lists: their sizes and blobs, and their deletion.
OLDER_THAN_KEPT = SQL('{what} FROM pack_keep k STRAIGHT_JOIN object_state s '
                      'ON s.zoid = k.zoid AND s.tid < k.tid')
SIZES_OLDER_THAN_KEPT = OLDER_THAN_KEPT.format(
    what='SELECT s.state_size, s.blob_id')
DELETE_OLDER_THAN_KEPT = OLDER_THAN_KEPT.format(what='DELETE s')


#: Whether the kept references r.refs were read from the state s.state
#: (see relstorage.storage.pack.keptrefs and the PostgreSQL adapter's KEPT_OK).
KEPT_OK = ('RIGHT(r.refs, 16) = LEFT(UNHEX(SHA2(CONCAT(s.state, LEFT('
           'r.refs, GREATEST(LENGTH(r.refs) - 16, 0))), 256)), 16)')
CHECKED_COLUMNS = checked_columns(KEPT_OK, "x''")


class MySQLHPPacker(MySQLPackerMixin, HistoryPreservingPacker):
    # By the primary key, in order, so that LIMIT ends the scan: left to
    # itself MariaDB read the tid index's whole range past the last oid,
    # grouped it in a temporary table and sorted it, for every step (0.4
    # s a step at 1,000,000 objects, against 0.03).
    old_after_sql = HistoryPreservingPacker.old_after_template.format(
        index=ALONG_PRIMARY_KEY)
    # The same for the pre-pack's pages. (Older revisions' states are
    # sent too: a derived table of the page, to send them NULL as on
    # PostgreSQL, took MariaDB 2.6 times as long as the plain page.)
    states_at_sql = HistoryPreservingPacker.states_at_template.format(
        columns=PAGE_COLUMNS, index=ALONG_PRIMARY_KEY, join=PAGE_JOIN)
    checked_states_at_sql = HistoryPreservingPacker.states_at_template.format(
        columns=CHECKED_COLUMNS, index=ALONG_PRIMARY_KEY, join=PAGE_JOIN)

    def start_graph(self, session):
        # With the other scratch tables: remove_old_revisions' pairs.
        # (Creating a temporary table does not end the transaction.)
        super().start_graph(session)
        session.execute('CREATE TEMPORARY TABLE IF NOT EXISTS pack_keep '
                        '(zoid BIGINT NOT NULL PRIMARY KEY, '
                        'tid BIGINT NOT NULL)')

    def remove_old_revisions(self, session, keep):
        # The pairs go into pack_keep, joined to object_state as pack_gc
        # is in delete_objects: 1,000,000 objects with history packed in
        # 10.9 s of removal against 12.6 with the base class's ranges
        # (RETURNING the rows).
        session.execute('DELETE FROM pack_keep')
        session.executemany(
            'INSERT INTO pack_keep (zoid, tid) VALUES (%s, %s)', keep)
        rows = session.fetchall(SIZES_OLDER_THAN_KEPT)
        session.execute(DELETE_OLDER_THAN_KEPT)
        return removed_rows(session, rows)


class MySQLHFPacker(MySQLPackerMixin, HistoryFreePacker):
    checked_states_at_sql = HistoryFreePacker.states_at_template.format(
        columns=CHECKED_COLUMNS, join=PAGE_JOIN)
