"""Counts in the tools' and the logs' messages take the number they
say: ``1 batch``, ``2 batches``, never ``1 batches``."""
import io

from relstorage import zodbconvert
from relstorage import zodbinfo
from relstorage import zodbpack
from relstorage.wording import counted


def test_counted():
    assert counted(1, 'batch') == '1 batch'
    assert counted(0, 'batch') == '0 batches'
    assert counted(2, 'batch') == '2 batches'
    assert counted(1, 'worker process') == '1 worker process'
    assert counted(3, 'worker process') == '3 worker processes'
    assert counted(1, 'dangling reference') == '1 dangling reference'
    assert counted(2500, 'object record') == '2500 object records'
    assert counted(2500, 'object', grouped=True) == '2,500 objects'


def test_pack_summary_of_one_of_each():
    result = dict(transactions_removed=1, revisions_removed=1,
                  objects_removed=1, bytes_removed=1, batches=1,
                  busy_seconds=0.0, prepack_seconds=0.5, prepack_workers=1,
                  prepack_unpickled=1, prepack_refs_kept=0)
    assert zodbpack.describe(result) == (
        'removed 1 transaction, 1 revision, 1 object; 1 byte of state '
        'freed')
    out = io.StringIO()
    zodbpack.report(result, 0, 0, out)
    text = out.getvalue()
    assert 'then 1 batch;' in text
    assert 'with 1 worker process,' in text
    assert ', 1 state unpickled,' in text
    assert 'batches' not in text and 'processes' not in text
    assert zodbinfo.size(1) == '1 byte'
    assert zodbinfo.size(138) == '138 bytes'


def test_copy_summary_of_one_of_each():
    text = zodbconvert.summary(dict(
        transactions=1, records=1, blobs=1, bytes=10, seconds=1.0,
        missing_blobs=1), dry_run=False)
    assert text.startswith('copied 1 transaction, 1 object record, 1 blob,')
    assert '; 1 blob record had no blob file in the source and was ' \
        'copied without one' in text
    text = zodbconvert.summary(dict(
        transactions=2, records=3, blobs=0, bytes=10, seconds=1.0,
        missing_blobs=2), dry_run=True)
    assert text.startswith('would copy 2 transactions, 3 object records, '
                           '0 blobs,')
    assert '2 blob records had no blob file in the source and were ' in text
