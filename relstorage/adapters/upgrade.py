"""Converting a RelStorage 4 database into this storage's schema, inside
the same database (``relstorage-upgrade``).

The conversion is set-based SQL: every statement moves many rows on the
server (``INSERT ... SELECT``), none goes through Python. It runs as a
sequence of steps, each in a transaction of its own and recorded in
``relstorage_meta`` (``upgrade_step``, and for the big copies the last oid
done), so an interrupted upgrade resumes where it stopped. Until the
``finish`` step marks the schema complete the storage refuses to open the
database and names this command. The last step, ``references``, reads the
upgraded database as a storage (for the references its first pack would
otherwise unpickle: see storage.keptrefs); until it is done a row of
``relstorage_meta`` says so, and a run resumes there.

RelStorage 4's tables are kept, renamed (``rs4_*``) where their names
clash with ours, until ``--drop-old``: a site can go back to RelStorage 4
by restoring those names (``revert``) as long as it has not dropped them.

What differs per database (renaming, locking the old tables, reading
PostgreSQL's large objects, DDL outside transactions on MySQL) is in
each adapter's ``upgrade`` module.
"""
import secrets
import time

from ..exceptions import UpgradeRefused  # re-exported too
from .sql import SQL

#: The steps, in order; each runs in a transaction of its own.
STEPS = ('prepare', 'transactions', 'states', 'current', 'blob map',
         'blobs', 'oids', 'finish', 'references')
#: The step run on the upgraded database opened as a storage, once the
#: others' session has ended.
REFERENCES = STEPS[-1]
#: The relstorage_meta row of a finished schema whose references are
#: still to be kept.
REFERENCES_PENDING = 'upgrade_references_pending'

#: Objects copied per transaction in the big steps.
BATCH_OBJECTS = 20000

# The statements, their {table} one of RelStorage 4's (see old_tables).
COPY_TRANSACTIONS = SQL(
    'INSERT INTO transactions (tid, packed, is_empty, username, '
    'description, extension) SELECT tid, packed, is_empty, '
    'username, description, extension FROM {table} WHERE tid > 0')
#: A batch of revisions, oids in (%s, %s].
COPY_HP_STATES = SQL(
    'INSERT INTO object_state (zoid, tid, prev_tid, '
    'state_size, state) SELECT zoid, tid, prev_tid, '
    'state_size, state FROM {table} '
    'WHERE zoid > %s AND zoid <= %s')
COPY_HF_STATES = SQL(
    'INSERT INTO object_state (zoid, tid, state_size, state) '
    'SELECT zoid, tid, state_size, state FROM {table} '
    'WHERE zoid > %s AND zoid <= %s')
#: The last oid of the next batch after %s, at most %s objects.
BATCH_END = SQL(
    'SELECT MAX(zoid) FROM (SELECT zoid FROM {table} WHERE zoid > %s '
    'ORDER BY zoid LIMIT %s) batch')
#: The chunks of a batch of blobs not copied yet, oids in (%s, %s].
COPY_CHUNKS = SQL(
    'INSERT INTO blob_chunk (blob_id, chunk_num, chunk) '
    'SELECT m.blob_id, c.chunk_num, c.chunk FROM {table} c '
    'JOIN upgrade_blob_map m ON m.zoid = c.zoid AND m.tid = c.tid '
    'WHERE c.zoid > %s AND c.zoid <= %s AND NOT EXISTS (SELECT 1 '
    'FROM blob_chunk b WHERE b.blob_id = m.blob_id)')
COPY_CURRENT = SQL(
    'INSERT INTO current_object (zoid, tid) SELECT zoid, tid FROM {table}')
CREATE_BLOB_MAP = SQL(
    'CREATE TABLE upgrade_blob_map (zoid {bigint} NOT NULL, tid {bigint} NOT '
    'NULL, blob_id {bigint} NOT NULL, PRIMARY KEY (zoid, tid)){suffix}')
#: Numbers the blobs from the start given.
FILL_BLOB_MAP = SQL(
    'INSERT INTO upgrade_blob_map (zoid, tid, blob_id) '
    'SELECT zoid, tid, %s + ROW_NUMBER() OVER (ORDER BY zoid, tid) '
    'FROM (SELECT DISTINCT zoid, tid FROM {table}) blobs')
#: The dry run's survey: {what: (RelStorage 4's table, count)}.
SURVEY = {
    'revisions': ('object_state', SQL('SELECT COUNT(*) FROM {table}')),
    'state bytes': ('object_state', SQL(
        'SELECT COALESCE(SUM(state_size), 0) FROM {table}')),
    'blobs': ('blob_chunk', SQL(
        'SELECT COUNT(*) FROM (SELECT DISTINCT zoid, tid FROM {table}) b')),
    'transactions': ('transaction', SQL(
        'SELECT COUNT(*) FROM {table} WHERE tid > 0')),
}
#: The dry run's sample: the last oid of the first %s objects, a table
#: shaped like ours, and the copy into it.
SAMPLE_END = SQL('SELECT MAX(zoid) FROM (SELECT zoid FROM {table} '
                 'ORDER BY zoid LIMIT %s) batch')
CREATE_SAMPLE = SQL(
    'CREATE TEMPORARY TABLE upgrade_sample (zoid {bigint} NOT NULL, '
    'tid {bigint} NOT NULL, state_size {bigint} NOT NULL, state {blob}, '
    'PRIMARY KEY (zoid, tid))')
COPY_SAMPLE = SQL(
    'INSERT INTO upgrade_sample (zoid, tid, state_size, state) '
    'SELECT zoid, tid, state_size, state FROM {table} WHERE zoid <= %s')


class Upgrade:
    """One upgrade of *adapter*'s database; ``say(text)`` reports
    progress."""

    #: Where the old tables are read from once the upgrade has begun.
    old_tables = {'transaction': 'rs4_transaction',
           'object_state': 'rs4_object_state',
           'current_object': 'rs4_current_object',
           'blob_chunk': 'rs4_blob_chunk'}

    def __init__(self, adapter, say=print, batch=None):
        self.adapter = adapter
        self.keep_history = adapter.keep_history
        self.say = say
        self.batch = batch or BATCH_OBJECTS
        self.chunk_size = adapter.options.blob_chunk_size

    # -- where the database stands ---------------------------------------

    def _meta(self, session):
        if not session.table_exists('relstorage_meta'):
            return None
        return dict(session.fetchall(
            'SELECT name, value FROM relstorage_meta'))

    def status(self, session):
        """``(step, meta)``: the next step to run ('prepare' for a
        RelStorage 4 database not yet touched), or None when the database
        holds this storage's finished schema."""
        meta = self._meta(session)
        if meta is not None and 'upgrade_step' in meta:
            return meta['upgrade_step'], meta
        if meta is not None and 'schema_version' in meta:
            if (REFERENCES_PENDING in meta
                    or self._references_never_kept(session)):
                return REFERENCES, meta
            return None, meta
        mode = self.adapter.schema.relstorage4_mode(session)
        if mode is None and self.renamed(session):
            # Stopped half-way through a prepare that could not be one
            # transaction (MySQL's DDL commits at once): run it again.
            return 'prepare', {}
        if mode is None:
            raise UpgradeRefused(
                '%s holds no RelStorage 4 database: nothing to upgrade'
                % self.adapter.describe())
        wanted = 'history-preserving' if self.keep_history \
            else 'history-free'
        if mode != wanted:
            raise UpgradeRefused(
                '%s holds a %s RelStorage 4 database, but the configuration '
                'says keep-history %s; set keep-history to %s, as the '
                'RelStorage 4 configuration did'
                % (self.adapter.describe(), mode,
                   'true' if self.keep_history else 'false',
                   'true' if mode == 'history-preserving' else 'false'))
        return 'prepare', {}

    def _references_never_kept(self, session):
        """Whether a finished upgrade (its old tables still there) never
        kept any reference: what earlier releases left when keeping them
        failed after the schema was marked complete."""
        return (self.renamed(session) and session.table_exists('state_refs')
                and session.scalar('SELECT COUNT(*) FROM (SELECT 1 FROM '
                                   'state_refs LIMIT 1) kept') == 0
                and session.scalar('SELECT COUNT(*) FROM (SELECT 1 FROM '
                                   'object_state LIMIT 1) held') == 1)

    # -- running -----------------------------------------------------------

    def say_upgraded(self):
        self.say('%s is already upgraded' % self.adapter.describe())

    def next_step(self):
        """The step a run would begin with (None: the database is
        upgraded already), read through a reading session; UpgradeRefused
        where a run would refuse."""
        session = self.reading_session()
        try:
            self.begin(session)
            return self.status(session)[0]
        finally:
            session.rollback_quietly()
            session.close()

    def reading_session(self):
        """A session for what the dry run reads: it creates nothing (no
        file, no table), whatever the database holds."""
        return self.adapter.connect(for_store=False)

    def refuse_missing(self):
        """Where connecting would create the database: UpgradeRefused
        when there is none to upgrade, before anything is created."""

    def run(self, keep_references):
        """Run the remaining steps; returns the seconds each took.
        *keep_references(done)* does the last on the upgraded database
        opened as a storage, calling *done()* once the references are
        kept, before it closes the storage; it returns what to say."""
        self.refuse_missing()
        times = {}
        step = self._run_database_steps(times)
        if step is None:
            self.say_upgraded()
            return times
        self._step(times, REFERENCES, lambda: self.say(
            '  ' + keep_references(self._references_kept)))
        self.say('%s upgraded from RelStorage 4 in %.1f s'
                 % (self.adapter.describe(), sum(times.values())))
        return times

    def _step(self, times, name, run):
        self.say('step %d of %d: %s' % (STEPS.index(name) + 1, len(STEPS),
                                        name))
        started = time.time()
        run()
        times[name] = time.time() - started
        self.say('  %s took %.1f s' % (name, times[name]))

    def _run_database_steps(self, times):
        """Run the remaining steps before REFERENCES in a session of
        their own; the step the run began with (None: nothing was left)."""
        session = self.adapter.connect(for_store=True)
        try:
            self.begin(session)
            step, meta = self.status(session)
            session.commit()
            if step in (None, REFERENCES):
                return step
            self.keep_out()
            self.begin(session)
            for name in STEPS[STEPS.index(step):STEPS.index(REFERENCES)]:
                self._step(times, name, lambda: getattr(
                    self, 'step_' + name.replace(' ', '_'))(session))
            return step
        finally:
            session.rollback_quietly()
            session.close()
            self.release()

    def _references_kept(self):
        """Record that the references are kept: the upgrade is done."""
        session = self.adapter.connect(for_store=True)
        try:
            self.begin(session)
            session.execute('DELETE FROM relstorage_meta WHERE name = %s',
                            (REFERENCES_PENDING,))
            session.commit()
        finally:
            session.rollback_quietly()
            session.close()

    def keep_out(self):
        """Keep RelStorage 4 processes from writing for the whole run,
        where renaming the tables at ``prepare`` does not."""

    def release(self):
        """Let go of what keep_out took."""

    def begin(self, session):
        session.begin()

    def _done(self, session, step, **progress):
        """Record that *step* is next (with *progress*), and commit."""
        values = dict(progress, upgrade_step=step)
        for name, value in values.items():
            session.execute('DELETE FROM relstorage_meta WHERE name = %s',
                            (name,))
            session.execute('INSERT INTO relstorage_meta (name, value) '
                            'VALUES (%s, %s)', (name, str(value)))
        session.commit()
        self.begin(session)

    def _progress(self, session, name, default):
        value = session.scalar('SELECT value FROM relstorage_meta '
                               'WHERE name = %s', (name,))
        return default if value is None else int(value)

    def step_prepare(self, session):
        self.lock_old(session)
        self.rename_old(session)
        self.adapter.schema.create(session, complete=False)
        self._done(session, 'transactions')

    def step_transactions(self, session):
        if self.keep_history:
            # RelStorage 4's transaction 0 stands for "before the first";
            # here no transaction row has that role.
            session.execute(COPY_TRANSACTIONS.format(
                table=self.old_tables['transaction']))
        self._done(session, 'states')

    def _batches(self, session, table, step, progress_name, copy):
        """Run *copy(session, lo, hi)* for runs of oids of *table* in
        ``(lo, hi]``, committing each with its progress."""
        lo = self._progress(session, progress_name, -1)
        while True:
            hi = session.scalar(BATCH_END.format(table=table),
                                (lo, self.batch))
            if hi is None:
                return
            copy(session, lo, hi)
            self._done(session, step, **{progress_name: hi})
            self.say('  objects up to 0x%x' % hi)
            lo = hi

    def _copy_states_sql(self):
        return (COPY_HP_STATES if self.keep_history else COPY_HF_STATES
                ).format(table=self.old_tables['object_state'])

    def step_states(self, session):
        sql = self._copy_states_sql()
        self._batches(session, self.old_tables['object_state'], 'states',
                      'upgrade_states_zoid',
                      lambda session, lo, hi: session.execute(sql, (lo, hi)))
        self._done(session, 'current')

    def step_current(self, session):
        if self.keep_history:
            session.execute(COPY_CURRENT.format(
                table=self.old_tables['current_object']))
        else:
            session.execute(
                'UPDATE last_transaction SET tid = (SELECT COALESCE(MAX(tid), '
                '0) FROM object_state) WHERE id = 0')
        self._done(session, 'blob map')

    def step_blob_map(self, session):
        """Give every blob of the old database (one per revision) a
        blob_id: a run of numbers from a random start, which later random
        ids (63 bits) are as unlikely to meet as each other."""
        session.execute('DROP TABLE IF EXISTS upgrade_blob_map')
        bigint_sql = self.adapter.types.bigint
        session.execute(CREATE_BLOB_MAP.format(
            bigint=bigint_sql, suffix=self.adapter.types.table_suffix))
        start = secrets.randbits(61) + (1 << 61)
        session.execute(FILL_BLOB_MAP.format(
            table=self.old_tables['blob_chunk']), (start,))
        session.execute(
            'UPDATE object_state SET blob_id = (SELECT m.blob_id FROM '
            'upgrade_blob_map m WHERE m.zoid = object_state.zoid AND '
            'm.tid = object_state.tid) WHERE EXISTS (SELECT 1 FROM '
            'upgrade_blob_map m WHERE m.zoid = object_state.zoid AND '
            'm.tid = object_state.tid)')
        self._done(session, 'blobs')

    def step_blobs(self, session):
        self._batches(session, 'upgrade_blob_map', 'blobs',
                      'upgrade_blobs_zoid', self.copy_chunks)
        self._done(session, 'oids')

    def copy_chunks(self, session, lo, hi):
        """Copy the chunks of the blobs of objects in ``(lo, hi]`` that
        the database's own ``cut_blobs`` did not, each old chunk becoming
        one of ours (RelStorage 4 wrote every chunk of a blob full but the
        last); a blob whose last chunk is as long as its first gets the
        empty last chunk this storage ends blobs with (see
        blobs.upload_blob)."""
        self.cut_blobs(session, lo, hi)
        session.execute(COPY_CHUNKS.format(
            table=self.old_tables['blob_chunk']), (lo, hi))
        session.execute(
            'INSERT INTO blob_chunk (blob_id, chunk_num, chunk) '
            'SELECT l.blob_id, l.chunk_num + 1, %s FROM blob_chunk l '
            'JOIN blob_chunk f ON f.blob_id = l.blob_id AND f.chunk_num = 0 '
            'JOIN upgrade_blob_map m ON m.blob_id = l.blob_id '
            'WHERE m.zoid > %s AND m.zoid <= %s AND l.chunk_num > 0 '
            'AND LENGTH(l.chunk) = LENGTH(f.chunk) AND l.chunk_num = '
            '(SELECT MAX(x.chunk_num) FROM blob_chunk x '
            'WHERE x.blob_id = l.blob_id)', (b'', lo, hi))

    def cut_blobs(self, session, lo, hi):
        """Where the database can: cut the blobs of objects in ``(lo,
        hi]`` into chunks of blob-chunk-size (RelStorage 4 keeps some
        whole, in one row or large object)."""

    def step_oids(self, session):
        highest = session.scalar('SELECT MAX(zoid) FROM object_state')
        if highest is not None:
            for sql, params in self.adapter.oids.raise_to(highest):
                session.execute(sql, params)
        self._done(session, 'finish')

    def step_finish(self, session):
        session.execute('DROP TABLE IF EXISTS upgrade_blob_map')
        session.execute('DELETE FROM relstorage_meta WHERE name LIKE %s',
                        ('upgrade%',))
        session.execute('INSERT INTO relstorage_meta (name, value) '
                        'VALUES (%s, %s)', (REFERENCES_PENDING, 'true'))
        self.adapter.schema.mark_complete(session)
        session.commit()

    # -- what each database does its own way -------------------------------

    def lock_old(self, session):
        """Make sure no RelStorage 4 process uses the old tables, and keep
        them from starting until this transaction ends; UpgradeRefused
        otherwise."""

    def rename_old(self, session):
        """Move the old tables out of the way of ours (see ``old``)."""
        raise NotImplementedError

    def renamed(self, session):
        """Whether rename_old has moved the old tables already."""
        return session.table_exists(self.old_tables['object_state'])

    def drop_old(self):
        """Remove RelStorage 4's tables for good, once the upgrade has
        finished."""
        session = self.adapter.connect(for_store=True)
        try:
            self.begin(session)
            self.refuse_unfinished(session)
            self.drop_old_tables(session)
            session.commit()
        finally:
            session.rollback_quietly()
            session.close()

    def refuse_unfinished(self, session):
        step, _ = self.status(session)
        if step is not None:
            raise UpgradeRefused(
                'the upgrade of %s is not finished (next step: %s); finish '
                'it before dropping the old tables'
                % (self.adapter.describe(), step))

    def drop_old_tables(self, session):
        raise NotImplementedError

    # -- reporting ---------------------------------------------------------

    def survey(self):
        """What the old database holds: ``{what: count}`` (before the
        upgrade has begun: see next_step)."""
        session = self.reading_session()
        try:
            self.begin(session)
            original_tables = self.surveyed_tables(session)
            result = {
                what: session.scalar(query.format(
                    table=original_tables[table]))
                for what, (table, query) in SURVEY.items()
                if self.keep_history or what != 'transactions'}
            result['state bytes'] = int(result['state bytes'])
            return result
        finally:
            session.rollback_quietly()
            session.close()

    def sample(self, objects=20000):
        """``(seconds, revisions, bytes)`` of copying the revisions of the
        first *objects* objects into a temporary table (the dry run's
        measure: it takes no lock and changes nothing)."""
        session = self.reading_session()
        try:
            self.begin(session)
            table = self.surveyed_tables(session)['object_state']
            hi = session.scalar(SAMPLE_END.format(table=table), (objects,))
            if hi is None:
                return 0.0, 0, 0
            bigint_sql, blob_sql = (self.adapter.types.bigint,
                                    self.adapter.types.blob)
            # Shaped like ours: the copy's cost is mostly the writing of
            # rows and of the indexes over them.
            session.execute(CREATE_SAMPLE.format(bigint=bigint_sql,
                                                 blob=blob_sql))
            started = time.time()
            session.execute(COPY_SAMPLE.format(table=table), (hi,))
            seconds = time.time() - started
            revisions, size = session.fetchone(
                'SELECT COUNT(*), COALESCE(SUM(state_size), 0) '
                'FROM upgrade_sample')
            session.execute('DROP TABLE upgrade_sample')
            return seconds, revisions, int(size)
        finally:
            session.rollback_quietly()
            session.close()

    def surveyed_tables(self, session):
        """Where the old tables are, for the dry run: renamed already
        when a prepare that could not be one transaction was
        interrupted."""
        return (self.old_tables if self.renamed(session)
                else self.original_names())

    def original_names(self):
        """The old tables' names before the upgrade renames them."""
        return {name: name for name in self.old_tables}
