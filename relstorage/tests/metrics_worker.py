"""A worker process of the multiprocess metrics test.

    python -m relstorage.tests.metrics_worker DATA_DIR NAME KEY COMMITS

Opens the SQLite database in DATA_DIR with ``metrics true`` under NAME
(PROMETHEUS_MULTIPROC_DIR is set by the test), sets ``n`` of the mapping
``root[KEY]`` COMMITS times, each in a transaction of its own, prints as
JSON what this process counted in plain integers (the loads by source),
and closes.
"""
import json
import sys


def main(data_dir, name, key, commits):
    import ZODB

    from relstorage.adapters.sqlite import SQLiteAdapter
    from relstorage.metrics import recorder
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    storage = RelStorage(SQLiteAdapter(
        data_dir, options=Options(metrics=True, name=name)))
    db = ZODB.DB(storage)
    try:
        for i in range(int(commits)):
            with db.transaction() as conn:
                conn.root()[key]['n'] = i + 1
        counts, _ = recorder.totals()[name]
        print(json.dumps({source: counts[('relstorage_loads', source)]
                          for source in recorder.SOURCES}))
    finally:
        db.close()


if __name__ == '__main__':
    main(*sys.argv[1:])
