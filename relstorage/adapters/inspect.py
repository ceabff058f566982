"""SQL for looking inside a database (``zodbinfo``, ``zodbcheck``), per
history mode; what the server itself knows (its version, its row
estimates, the size of its tables) is in ``ServerStatistics``, which each
database overrides.

Every method takes the session to run on: a load session's snapshot, so
that all figures of one report describe one moment and nobody waits.
"""
from zope.interface import implementer

from . import blobs
from .components import IInspector
from .sql import SQL


def _int(value):
    return int(value) if value is not None else None


#: Estimated state bytes come from a sample of the rows themselves, not
#: from the size of the table on disk (which keeps what a pack deleted
#: until a VACUUM or OPTIMIZE, and counts indexes and free space): the oid
#: range is cut into SAMPLE_SLICES equal slices and the first SAMPLE_ROWS
#: objects of each are read through the primary key, so the cost stays a
#: few thousand rows however big the database (with history, those
#: objects' revisions too), and a slice that holds fewer objects is
#: counted exactly (a small database is summed exactly).
SAMPLE_SLICES = 32
SAMPLE_ROWS = 64
#: An object of a slice's sample whose state (or whose older revisions)
#: holds more than this share of the sample's bytes is counted as it is,
#: not scaled up to the slice: a few big objects, or objects changed all
#: day long (the root, a container, a catalog's top), would otherwise
#: stand for every object around them.
OUTLIER_SHARE = 1 / 8


def sampled_bytes(session, span_sql, sample_sql, history_sql=None):
    """``(current, historical)``: the estimated bytes of the current
    states and, with *history_sql*, of the older revisions (else 0).
    *span_sql* gives the lowest and highest oid; *sample_sql* ``(zoid,
    state_size)`` of the current states after oid ``%s``, at most ``%s``
    of them, in oid order (a page, as ``Inspector.page_sql``);
    *history_sql* ``(zoid, bytes of all its revisions)`` of the oids from
    ``%s`` to before ``%s``. Each slice counts what its sample covers,
    scaled by the oids of the slice over the oids covered."""
    low, high = session.fetchone(span_sql)
    if low is None:
        return 0, 0
    low, high = int(low), int(high)
    width = -(-(high - low + 1) // SAMPLE_SLICES)
    current = historical = 0.0
    for start in range(low, high + 1, width):
        end = start + width
        rows = {int(zoid): int(size or 0) for zoid, size in
                session.fetchall(sample_sql, (start - 1, SAMPLE_ROWS))
                if zoid < end}
        if len(rows) < SAMPLE_ROWS:  # the whole slice
            stop, scale = end, 1.0
        else:  # the oids before the last one read
            stop = max(rows)
            del rows[stop]
            scale = width / (stop - start)
        current += _scaled(rows.values(), scale)
        if history_sql is not None:
            historical += _scaled(
                [int(total or 0) - rows.get(int(zoid), 0) for zoid, total
                 in session.fetchall(history_sql, (start, stop))], scale)
    return int(current), int(historical)


def _scaled(sizes, scale):
    """The bytes of a slice whose sample has *sizes*: *scale* times
    theirs, but those of the sample's outliers (see OUTLIER_SHARE) once."""
    sizes = list(sizes)
    total = sum(sizes)
    outliers = sum(size for size in sizes if size > OUTLIER_SHARE * total)
    return outliers + scale * (total - outliers)


class ServerStatistics:
    """What a database says about itself without reading its tables: its
    version and, where it keeps statistics, row estimates and sizes on
    disk. None means it cannot say (rows are then counted)."""

    #: The server's name, and the statement that gives its version.
    kind = None
    version_sql = None
    #: Whether its planner joins a page of current_object to object_state
    #: along current_object's primary key, by object_state's, whatever its
    #: statistics say (it has no hash joins there): a page then needs no
    #: subquery, whose result it would sort again (see dbiter).
    joins_along_the_key = False
    #: With history: a statement giving ``(revisions, objects)``, cheap
    #: estimates of object_state's rows and current_object's, or None.
    #: Where it is given, a stream of every current record goes along
    #: object_state's key (each revision looked up in current_object, by
    #: its primary key) when objects have few revisions: one search per
    #: row instead of two (along current_object's, each current revision
    #: looked up in object_state's index, then in the table).
    revision_counts_sql = None
    #: Statements run before such a stream along object_state's key, in
    #: its transaction (the plan to read it so).
    along_revisions_setup = ()

    def __init__(self, adapter):
        self.adapter = adapter

    def version(self, session):
        return '%s %s' % (self.kind, session.scalar(self.version_sql))

    def estimated_rows(self, session, table):
        """The server's estimate of *table*'s rows, or None: count."""
        return None

    def table_bytes(self, session, table):
        """Bytes *table* takes on disk (indexes included), or None."""
        return None

    def database_bytes(self, session):
        """Bytes the whole database takes on disk, or None."""
        return None


class Figures(dict):
    """Figures by name; ``estimated`` names those that are the server's
    estimates rather than counts."""

    def __init__(self):
        super().__init__()
        self.estimated = []

    def put(self, name, value, estimated=False):
        self[name] = value
        if estimated:
            self.estimated.append(name)


@implementer(IInspector)
class Inspector:
    """The figures of ``zodbinfo``; the history mode decides the SQL."""

    #: A page of the current revisions: *columns* of the objects after
    #: oid ``%s``, in oid order, at most ``%s`` of them (a deleted one's
    #: state NULL); their table is ``s``.
    page_sql = None
    #: The table with one row per object.
    objects_table = None
    #: The first and last tid of the transactions there are.
    span_sql = None
    #: The lowest and highest oid of the objects there are.
    oid_span_sql = None

    def __init__(self, adapter):
        self.adapter = adapter
        self.stats = adapter.statistics_class(adapter)
        # The header length is the first parameter.
        self.headers_sql = self.page_sql.format(
            columns='s.state_size, SUBSTR(s.state, 1, %s)')
        self.records_sql = self.page_sql.format(
            columns='s.tid, s.state, s.state_size, s.blob_id')
        # The current states' sizes from the oid given on.
        self.current_sample_sql = self.page_sql.format(
            columns='s.state_size')

    def sampled_current_bytes(self, session):
        """The current states' bytes, estimated from a sample."""
        return sampled_bytes(session, self.oid_span_sql,
                             self.current_sample_sql)[0]

    def server_version(self, session):
        return self.stats.version(session)

    def count(self, session, exact, table, count_sql):
        """``(rows, estimated)``: the server's estimate of *table*'s rows
        unless *exact* or there is none, else *count_sql*'s count."""
        if not exact:
            estimate = self.stats.estimated_rows(session, table)
            if estimate is not None:
                return estimate, True
        return int(session.scalar(count_sql) or 0), False

    def figures(self, session, exact=False):
        """The figures of one database, as a dict; ``estimated`` lists the
        names of those that are the server's estimates."""
        stats = self.stats
        meta = self.adapter.schema.read_meta(session) or {}
        f = Figures()
        f['server'] = self.server_version(session)
        f['schema_version'] = _int(meta.get('schema_version'))
        f['keep_history'] = meta.get('keep_history') == 'true'
        f['database_bytes'] = stats.database_bytes(session)
        f.put('objects', *self.count(session, exact, self.objects_table,
                                     self.adapter.iterator.object_count_sql))
        self.history_figures(session, exact, f)
        first, last = session.fetchone(self.span_sql)
        f['first_tid'], f['last_tid'] = _int(first), _int(last)
        f.put('blob_chunks', *self.count(session, exact, 'blob_chunk',
                                         'SELECT COUNT(*) FROM blob_chunk'))
        if 'blob_chunks' in f.estimated:
            # Counting blobs and their bytes reads every chunk's length.
            f['blobs'] = None
            f.put('blob_bytes', stats.table_bytes(session, 'blob_chunk'),
                  True)
        else:
            f['blobs'], f['blob_bytes'] = blobs.blob_totals(session)
        last_pack = self.adapter.packer.last_pack(session)
        f['last_pack_tid'], f['last_pack_time'] = (
            last_pack if last_pack is not None else (None, None))
        f['prepack_tid'] = _int(meta.get('prepack_tid'))
        f['estimated'] = f.estimated
        return dict(f)

    def headers(self, session, after_oid, limit, length):
        """``[(oid, state_size, header bytes)]`` of the objects after
        *after_oid*: enough of each state to read its class from (None
        for a deleted object)."""
        return [(oid, size, bytes(head) if head is not None else None)
                for oid, size, head in session.fetchall(
                    self.headers_sql, (length, after_oid, limit))]

    def records(self, session, after_oid, limit):
        """``[(oid, tid, state, state_size, blob_id)]`` of the objects
        after *after_oid*, as stored (a deleted object's state None):
        nothing checked, for a checker wants to see damage."""
        return [(oid, tid, bytes(state) if state is not None else None,
                 size, blob_id)
                for oid, tid, state, size, blob_id in session.fetchall(
                    self.records_sql, (after_oid, limit))]

    def blob_chunks(self, session, blob_ids):
        """``{blob_id: (chunks, highest chunk_num)}``, see chunk_counts."""
        return blobs.chunk_counts(session, blob_ids)


class HistoryPreservingInspector(Inspector):

    objects_table = 'current_object'
    span_sql = 'SELECT MIN(tid), MAX(tid) FROM transactions'
    current_bytes_sql = (
        'SELECT SUM(s.state_size) FROM current_object c JOIN object_state s '
        'ON s.zoid = c.zoid AND s.tid = c.tid')
    # The page is chosen in current_object alone, by its primary key,
    # whatever the statistics say: joined first, PostgreSQL merged or
    # hashed everything after the page's start (0.2 s a page at 1,000,000
    # objects), and the pre-pack's aggregate over object_state sorted
    # the rest of the table on disk when the statistics were stale.
    page_sql = SQL(
        'SELECT c.zoid, {columns} FROM '
        '(SELECT zoid, tid FROM current_object WHERE zoid > %s '
        'ORDER BY zoid LIMIT %s) c JOIN object_state s '
        'ON s.zoid = c.zoid AND s.tid = c.tid ORDER BY c.zoid')
    oid_span_sql = 'SELECT MIN(zoid), MAX(zoid) FROM current_object'
    revisions_bytes_sql = (
        'SELECT zoid, SUM(state_size) FROM object_state '
        'WHERE zoid >= %s AND zoid < %s GROUP BY zoid')

    def history_figures(self, session, exact, f):
        f.put('revisions', *self.count(session, exact, 'object_state',
                                       'SELECT COUNT(*) FROM object_state'))
        f.put('transactions', *self.count(
            session, exact, 'transactions',
            'SELECT COUNT(*) FROM transactions'))
        if not exact and 'revisions' in f.estimated:
            # Summing the sizes reads every row: a sample's (the size on
            # disk still holds what a pack deleted, until a VACUUM).
            current, historical = sampled_bytes(
                session, self.oid_span_sql, self.current_sample_sql,
                self.revisions_bytes_sql)
            f.put('current_bytes', current, True)
            f.put('historical_bytes', historical, True)
            return
        total = self.adapter.iterator.size_in_bytes(session)
        current = int(session.scalar(self.current_bytes_sql) or 0)
        f.put('current_bytes', current)
        f.put('historical_bytes', total - current)


class HistoryFreeInspector(Inspector):

    objects_table = 'object_state'
    span_sql = ('SELECT MIN(tid), MAX(tid) FROM object_state '
                'WHERE state IS NOT NULL')
    page_sql = SQL(
        'SELECT s.zoid, {columns} FROM object_state s '
        'WHERE s.zoid > %s ORDER BY s.zoid LIMIT %s')
    oid_span_sql = 'SELECT MIN(zoid), MAX(zoid) FROM object_state'

    def history_figures(self, session, exact, f):
        if not exact and 'objects' in f.estimated:
            # Without history, transactions are only the tids objects
            # still carry, and counting them reads the whole tid index;
            # summing the sizes reads every row: a sample's.
            f.put('transactions', None)
            f.put('current_bytes', self.sampled_current_bytes(session),
                  True)
        else:
            f.put('transactions', int(session.scalar(
                'SELECT COUNT(DISTINCT tid) FROM object_state '
                'WHERE state IS NOT NULL') or 0))
            f.put('current_bytes', self.adapter.iterator.size_in_bytes(
                session))
        f.put('historical_bytes', 0)
