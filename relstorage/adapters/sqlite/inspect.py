"""What SQLite says about itself: no statistics to estimate rows from
(it counts them quickly), the size of the file from its pages."""
from ..inspect import ServerStatistics


class SQLiteStatistics(ServerStatistics):

    kind = 'SQLite'
    joins_along_the_key = True
    version_sql = 'SELECT sqlite_version()'
    # object_state's largest rowid: the revisions ever written (at most
    # more than there are); current_object's count reads its tid index.
    revision_counts_sql = (
        'SELECT (SELECT MAX(rowid) FROM object_state), '
        '(SELECT COUNT(*) FROM current_object)')

    def database_bytes(self, session):
        pages = session.scalar('PRAGMA page_count')
        size = session.scalar('PRAGMA page_size')
        return int(pages) * int(size)
