"""Every statement the Oracle adapter can send, checked against Oracle's
grammar without an Oracle server.

The statements are gathered by running the adapter's own code paths
(``oracle_statements.collect``), in both history modes, with and without
blobs in the database, and each is parsed by sqlglot's Oracle dialect
with errors raised. A statement the parser cannot check (it fails to
parse, or parses only as an opaque ``Command``: PL/SQL blocks, LOCK
TABLE, ALTER SEQUENCE) must be one of ``REVIEWED``, word for word.
sqlglot accepts some spellings Oracle does not (``LIMIT``, ``IF
EXISTS``, a SELECT without FROM, boolean literals, ``DEFAULT`` after
``NOT NULL``); those are checked on the parsed tree as well.
"""
import re

import pytest
import sqlglot
from sqlglot import exp

from relstorage.adapters.oracle import locker as oracle_locker
from relstorage.adapters.oracle import schema as oracle_schema
from relstorage.adapters.oracle import session as oracle_session
from relstorage.adapters.sql import named_binds
from relstorage.adapters.session import in_list

from .oracle_statements import RecordingOracleAdapter
from .oracle_statements import Recorder
from .oracle_statements import collect

#: Statements the parser cannot check, each read against Oracle's
#: documentation: the snapshot, lock and release PL/SQL blocks, the
#: LOCK TABLE fallback of the commit and pack locks (commit-lock-timeout
#: 30 s, the default), and the ALTER SEQUENCE that raises the oid
#: sequence past a restored oid (1000 in the gathering run) and back.
REVIEWED = (
    'BEGIN ROLLBACK; SET TRANSACTION READ ONLY; END;',
    'BEGIN :status := DBMS_LOCK.REQUEST(id => :lock_id, '
    'lockmode => DBMS_LOCK.X_MODE, timeout => :timeout, '
    'release_on_commit => TRUE); END;',
    'BEGIN :status := DBMS_LOCK.REQUEST(id => :lock_id, '
    'lockmode => DBMS_LOCK.X_MODE, timeout => :timeout, '
    'release_on_commit => FALSE); END;',
    'BEGIN :status := DBMS_LOCK.RELEASE(id => :lock_id); END;',
    'LOCK TABLE commit_lock IN EXCLUSIVE MODE WAIT 30',
    'LOCK TABLE commit_lock IN EXCLUSIVE MODE NOWAIT',
    'LOCK TABLE pack_lock IN EXCLUSIVE MODE NOWAIT',
    'ALTER SEQUENCE zoid_seq INCREMENT BY 1008',
    'ALTER SEQUENCE zoid_seq INCREMENT BY 16',
)

MODES = [(True, True), (True, False), (False, True), (False, False)]

#: Oracle allows at most this many expressions in one IN list.
MAX_IN_LIST = 1000

_TABLE_AS_ALIAS = re.compile(r'\b(FROM|JOIN)\s+\w+\s+AS\s+\w+', re.I)


def problems(sql):
    """What keeps *sql* from being a statement Oracle (12c and later)
    accepts, as far as the parser and the tree can tell; [] when
    nothing."""
    found = []
    if '%s' in sql or re.search(r'\bLIMIT\b', sql):
        found.append('not translated for Oracle (%s or LIMIT)')
    try:
        tree = sqlglot.parse_one(sql, read='oracle',
                                 error_level=sqlglot.ErrorLevel.RAISE)
    except sqlglot.errors.ParseError as e:
        return found + ['does not parse: %s' % str(e).splitlines()[0]]
    if isinstance(tree, exp.Command):
        return found + ['parses only as an unchecked Command']
    if sql.rstrip().endswith(';'):
        found.append('a SQL statement (not PL/SQL) ends with ";"')
    for select in tree.find_all(exp.Select):
        if select.args.get('from_') is None:
            found.append('SELECT without FROM (Oracle needs FROM DUAL)')
    if any(True for _ in tree.find_all(exp.Boolean)):
        found.append('boolean literal (no SQL BOOLEAN before Oracle 23)')
    if isinstance(tree, (exp.Create, exp.Drop)) and tree.args.get('exists'):
        found.append('IF [NOT] EXISTS (not before Oracle 23)')
    for column in tree.find_all(exp.ColumnDef):
        kinds = [type(c.args.get('kind')).__name__
                 for c in column.args.get('constraints') or ()]
        if ('DefaultColumnConstraint' in kinds
                and 'NotNullColumnConstraint' in kinds
                and kinds.index('NotNullColumnConstraint')
                < kinds.index('DefaultColumnConstraint')):
            found.append('column %s: DEFAULT must come before NOT NULL'
                         % column.name)
    for in_ in tree.find_all(exp.In):
        if len(in_.expressions) > MAX_IN_LIST:
            found.append('IN list of more than %d values' % MAX_IN_LIST)
    if _TABLE_AS_ALIAS.search(sql):
        found.append('AS before a table alias')
    return found


def check(sql):
    """Problems of *sql* that make the test fail: all of them, unless
    the statement is one of the reviewed ones."""
    if sql in REVIEWED:
        return []
    return problems(sql)


@pytest.fixture(scope='module')
def gathered():
    return {mode: collect(*mode) for mode in MODES}


@pytest.mark.parametrize('keep_history, blobs', MODES,
                         ids=['HP-blobs', 'HP', 'HF-blobs', 'HF'])
def test_every_statement_is_oracle(gathered, keep_history, blobs):
    statements = sorted(set(gathered[keep_history, blobs]))
    assert len(statements) > 60
    failures = {}
    for sql in statements:
        found = check(sql)
        if found:
            failures[sql] = found
    assert not failures, '\n'.join(
        '%s\n    %s' % (sql, '; '.join(why)) for sql, why in failures.items())


def test_every_statement_family_is_gathered(gathered):
    seen = set().union(*gathered.values())
    families = {
        'schema': ('CREATE TABLE ', 'CREATE GLOBAL TEMPORARY TABLE ',
                   'CREATE INDEX ', 'CREATE SEQUENCE ', 'DROP TABLE ',
                   'DROP SEQUENCE ', 'ALTER SEQUENCE '),
        'rows': ('SELECT ', 'INSERT INTO ', 'UPDATE ', 'DELETE FROM ',
                 'MERGE INTO '),
        'locks': ('LOCK TABLE ', 'BEGIN :status := DBMS_LOCK.'),
        'snapshot': ('BEGIN ROLLBACK; SET TRANSACTION READ ONLY',),
    }
    for name, prefixes in families.items():
        for prefix in prefixes:
            assert any(s.lstrip().startswith(prefix) for s in seen), (
                name, prefix)
    assert any(s.endswith('FOR UPDATE WAIT 30') for s in seen)
    assert any('NEXTVAL' in s for s in seen)
    assert any('FETCH FIRST' in s for s in seen)
    assert any('blob_chunk' in s and s.startswith('INSERT') for s in seen)


def _sql_attributes(adapter):
    """The statements the adapter's pieces keep as attributes (the
    ``*_sql`` ones, the schema's DDL) and the module's constants."""
    found = {}
    for owner in (adapter, adapter.mover, adapter.iterator, adapter.packer,
                  adapter.schema):
        for name in dir(owner):
            if name.endswith('_sql') or name in ('ddl', 'extra_ddl'):
                value = getattr(owner, name)
                values = value if isinstance(value, (list, tuple)) else [value]
                for i, text in enumerate(values):
                    if isinstance(text, str):
                        found['%s.%s[%d]' % (type(owner).__name__, name,
                                             i)] = text
    for module, names in (
            (oracle_schema, ('CREATE_SEQUENCE', 'TEMP_STORE_DDL')),
            (oracle_session, ('BEGIN_SNAPSHOT',)),
            (oracle_locker, ('REQUEST_COMMIT_LOCK', 'REQUEST_PACK_LOCK',
                             'RELEASE_LOCK'))):
        for name in names:
            found[name] = getattr(module, name)
    return found


@pytest.mark.parametrize('keep_history', [True, False])
def test_statements_kept_as_attributes_are_all_sent(gathered, keep_history):
    # The gathering reaches every statement the code keeps by name; if a
    # new one is added and never run by collect(), this fails.
    sent = set(gathered[keep_history, True])
    adapter = RecordingOracleAdapter(Recorder(), keep_history)
    missing = {name: text for name, text in _sql_attributes(adapter).items()
               # Oracle sends no BEGIN: its transactions begin by themselves.
               if text != 'BEGIN' and not sent & set(_as_sent(text))}
    assert not missing


def _as_sent(template):
    """*template* as it may be sent: an ``IN %s`` filled with one to
    three values (see session.in_list), binds named."""
    if 'IN %s' not in template:
        return [named_binds(template)]
    return [named_binds(template.replace('IN %s', 'IN ' + in_list(range(n))))
            for n in (1, 2, 3)]


def test_reviewed_statements_are_sent_and_need_review(gathered):
    sent = set().union(*gathered.values())
    for sql in REVIEWED:
        assert sql in sent, 'stale entry: %s' % sql
        assert problems(sql), 'the parser checks it now: %s' % sql


@pytest.mark.parametrize('sql, why', [
    ('SELEC zoid FROM object_state WHERE zoid = :p1', 'does not parse'),
    ('SELECT zoid FROM object_state WHERE zoid IN (:p1, :p2',
     'does not parse'),
    # Positional binds inside IN: the reason the adapter names its binds.
    ('SELECT zoid FROM object_state WHERE zoid IN (:1, :2)',
     'does not parse'),
    ('SELECT zoid FROM object_state ORDER BY zoid LIMIT 5', 'LIMIT'),
    ('SELECT zoid FROM object_state WHERE zoid = %s', 'not translated'),
    ('SELECT -1, (SELECT MAX(tid) FROM transactions) UNION ALL '
     'SELECT zoid, tid FROM object_state', 'without FROM'),
    ('UPDATE transactions SET packed = TRUE WHERE tid = :p1', 'boolean'),
    ('DROP TABLE IF EXISTS object_state', 'IF [NOT] EXISTS'),
    ('CREATE TABLE t (packed NUMBER(1) NOT NULL DEFAULT 0)',
     'DEFAULT must come before NOT NULL'),
    ('SELECT zoid FROM object_state WHERE zoid = :p1;', 'ends with'),
    ('SELECT s.zoid FROM object_state AS s', 'AS before a table alias'),
    ('LOCK TABLE commit_lock IN EXCLUSIVE MODE WAIT 31', 'does not parse'),
    ('ALTER SEQUENCE zoid_seq INCREMENT BY 17', 'Command'),
    ('SELECT zoid FROM object_state WHERE zoid IN (%s)'
     % ', '.join(':p%d' % i for i in range(1, 1002)), 'IN list'),
])
def test_the_check_fails_on_what_oracle_refuses(sql, why):
    found = check(sql)
    assert found and any(why in text for text in found), found


def test_a_typo_in_a_sent_statement_fails(gathered):
    # Each statement the adapter sends, broken the way a slip of the
    # keyboard would, fails the check: its first word misspelt, or its
    # last parenthesis missing.
    broken = 0
    for sql in sorted(set(gathered[True, True])):
        if sql in REVIEWED:
            continue
        text = sql.strip()
        first, rest = text.split(None, 1)
        assert check(first[:-1] + ' ' + rest), sql
        if ')' in text:
            at = text.rindex(')')
            assert check(text[:at] + text[at + 1:]), sql
        broken += 1
    assert broken > 60
