"""Fixtures shared by relstorage's own tests."""
import pytest

from relstorage.testing.dbs import DATABASES
from relstorage.testing.dbs import DatabaseFactory

MODES = (True, False)


def _ids(param):
    db, keep_history = param
    return '%s-%s' % (db, 'HP' if keep_history else 'HF')


@pytest.fixture(params=[(db, kh) for db in DATABASES for kh in MODES],
                ids=_ids)
def factory(request):
    """A DatabaseFactory for each database and history mode, with the
    main database emptied."""
    db, keep_history = request.param
    f = DatabaseFactory(db, keep_history)
    f.storage(zap=True).close()
    yield f
    f.cleanup()


@pytest.fixture(params=DATABASES)
def hp_factory(request):
    """Like ``factory`` but history-preserving only."""
    f = DatabaseFactory(request.param, True)
    f.storage(zap=True).close()
    yield f
    f.cleanup()
