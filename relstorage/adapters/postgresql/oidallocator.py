"""Oids from a sequence, which only ever moves forward."""
from ..oidallocator import SequenceOIDAllocator


class PostgreSQLOIDAllocator(SequenceOIDAllocator):

    next_values_sql = (
        "SELECT nextval('zoid_seq') FROM generate_series(1, %s)")

    def raise_to(self, max_oid):
        # Only ever moves the sequence forward.
        return [("SELECT setval('zoid_seq', %s) FROM zoid_seq "
                 "WHERE last_value < %s", (max_oid, max_oid))]

    def reset(self, session):
        session.execute("ALTER SEQUENCE zoid_seq RESTART WITH 1")
