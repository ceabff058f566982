"""What the ``cache-local-dir`` tests share: a database of each kind and
mode, filled with numbered objects, and storages on a cache directory."""
import pytest
import ZODB
from persistent.mapping import PersistentMapping

from relstorage.testing.dbs import DATABASES
from relstorage.testing.dbs import DatabaseFactory
from relstorage.testing.dbs import require


def mode_factories(databases=DATABASES):
    """A fixture giving a DatabaseFactory for each of *databases* in each
    history mode."""
    params = [(db, kh) for db in databases for kh in (True, False)]

    @pytest.fixture(params=params,
                    ids=['%s-%s' % (db, 'HP' if kh else 'HF')
                         for db, kh in params])
    def factory(request):
        db, keep_history = request.param
        require(db)
        f = DatabaseFactory(db, keep_history)
        yield f
        f.cleanup()
    return factory


def open_db(factory, cache_dir, **kw):
    return ZODB.DB(factory.storage(cache_local_dir=str(cache_dir), **kw))


def fill(factory, count):
    """Empty the database, then store ``root['o<n>'] = {'n': n}`` for n
    below *count*."""
    db = ZODB.DB(factory.storage(zap=True))
    with db.transaction() as conn:
        for n in range(count):
            conn.root()['o%d' % n] = PersistentMapping(n=n)
    db.close()


def cached(db):
    """How many objects other than the root the storage's cache holds
    (opening a DB loads the root)."""
    return len([oid for oid in db.storage._cache._entries if oid != 0])
