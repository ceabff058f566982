"""Fixtures shared by relstorage's own tests."""
import logging

import pytest

import relstorage.options
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


@pytest.fixture
def warnings(caplog):
    """The WARNING records of the test, each option warning (said once per
    process) said again."""
    relstorage.options._warned.clear()
    with caplog.at_level(logging.WARNING):
        yield caplog
    relstorage.options._warned.clear()
