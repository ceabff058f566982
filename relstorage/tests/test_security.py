"""Security: values reach the database only as bound parameters (no SQL
text is built from values; the one exception, MySQL's upload, writes
integers and hex digits only, see test_mysql), and data and blob directories are created
readable by their owner only. (That passwords never show is tested in
test_errors.)"""
import ast
import os
import pathlib
import re
import stat

import relstorage

SOURCE = pathlib.Path(relstorage.__file__).parent
SQL = re.compile(r'\b(SELECT|INSERT|UPDATE|DELETE|DROP|CREATE|ANALYZE|'
                 r'PRAGMA|SET|DO|WHERE|FROM)\b')

#: What may be formatted into SQL text: identifiers, placeholder lists and
#: fixed fragments, never values.
SAFE_NAMES = re.compile(
    r'^(table|tables|name|stmt|clause|empty|sets|key|cols|col|last|'
    r'[A-Z_]+|.*_(sql|table|tables|clause|suffix|ddl|where))$')
SAFE_CALLS = {'in_list', 'join', 'upsert', 'format'}


def _safe(node):
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return bool(SAFE_NAMES.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(SAFE_NAMES.match(node.attr))
    if isinstance(node, ast.IfExp):
        return _safe(node.body) and _safe(node.orelse)
    if isinstance(node, ast.Tuple):
        return all(_safe(e) for e in node.elts)
    if isinstance(node, ast.Call):
        func = node.func
        name = getattr(func, 'attr', getattr(func, 'id', None))
        if name == 'in_list':  # placeholders only
            return True
        if name == 'join':
            # ', '.join(placeholders or identifiers)
            return all(_safe_iterable(a) for a in node.args)
        return name in SAFE_CALLS and all(_safe_iterable(a)
                                          for a in node.args)
    if isinstance(node, ast.BinOp):
        return _safe(node.left) and _safe(node.right)
    if isinstance(node, ast.Subscript):
        return _safe(node.value)
    return False


def _safe_iterable(node):
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_safe(e) for e in node.elts)
    if isinstance(node, (ast.GeneratorExp, ast.ListComp)):
        return _safe(node.elt)
    if isinstance(node, ast.BinOp):  # ['(%s, %s)'] * n
        return _safe_iterable(node.left) or _safe(node.left)
    return _safe(node)


#: Formatting sites checked by hand, with the reason each is safe.
REVIEWED = {
    # pragma names and values are checked against strict patterns when the
    # adapter is built (an invalid one is a ConfigurationError).
    ('adapters/sqlite/files.py', 'PRAGMA.format(name=name, value=str(value))'),
    # a class constant (an int): the store session's page cache, small so
    # that a vote writes what the COMMIT would otherwise write.
    ('adapters/sqlite/adapter.py',
     "'PRAGMA cache_size = %d' % self.store_cache_pages"),
    # an int(), restoring the busy timeout after BEGIN IMMEDIATE's tries.
    ('adapters/sqlite/session.py', "'PRAGMA busy_timeout = %d' % ms"),
}


def _sql_formatting():
    """(file, source) of every place that formats something into SQL."""
    found = []
    for path in sorted(SOURCE.rglob('*.py')):
        # The tests and their support (relstorage.testing) create and
        # drop test databases by name through admin connections.
        if {'tests', 'testing'} & set(path.parts):
            continue
        rel = path.relative_to(SOURCE).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            template = values = None
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                template, values = node.left, [node.right]
            elif (isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Attribute)
                  and node.func.attr == 'format'):
                template = node.func.value
                values = list(node.args) + [k.value for k in node.keywords]
            elif isinstance(node, ast.JoinedStr):
                template = node
                values = [v.value for v in node.values
                          if isinstance(v, ast.FormattedValue)]
            if template is None:
                continue
            text = ast.unparse(template)
            if not (SQL.search(text) or text.endswith('_sql')):
                continue
            found.append((rel, node, values))
    return found


def test_no_value_is_formatted_into_sql():
    found = _sql_formatting()
    assert len(found) > 15  # the scan does see the adapters' SQL
    # Every reviewed place is still there (one that moved is reviewed
    # again where it went).
    assert REVIEWED <= {(rel, ast.unparse(node)) for rel, node, _ in found}
    unsafe = []
    for rel, node, values in found:
        source = ast.unparse(node)
        if (rel, source) in REVIEWED:
            continue
        if not all(_safe(v) for v in values):
            unsafe.append('%s:%d: %s' % (rel, node.lineno, source))
    assert unsafe == []


def test_the_scan_catches_a_value_formatted_into_sql():
    tree = ast.parse("sql = 'SELECT state FROM object_state WHERE zoid = %s'"
                     " % oid")
    node = tree.body[0].value
    assert not _safe(node.right)
    assert _safe(ast.parse("in_list(chunk)").body[0].value)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_data_and_blob_directories_are_private(tmp_path):
    import ZODB
    from ZODB.blob import Blob

    from relstorage.adapters.sqlite import SQLiteAdapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    old = os.umask(0o022)
    try:
        data_dir = tmp_path / 'data' / 'db'
        blob_dir = tmp_path / 'blobs'
        db = ZODB.DB(RelStorage(SQLiteAdapter(str(data_dir), options=Options(
            blob_dir=str(blob_dir), shared_blob_dir=True))))
        try:
            with db.transaction() as conn:
                blob = conn.root()['b'] = Blob()
                with blob.open('w') as f:
                    f.write(b'secret')
        finally:
            db.close()
    finally:
        os.umask(old)
    assert _mode(data_dir) == 0o700
    assert _mode(blob_dir) == 0o700
    dirs = [p for p in blob_dir.rglob('*') if p.is_dir()]
    assert dirs
    assert {d: _mode(d) for d in dirs} == {d: 0o700 for d in dirs}
