"""Oids from a sequence that only DDL moves."""
from ..oidallocator import OID_BLOCK
from ..oidallocator import SequenceOIDAllocator
from .schema import CREATE_SEQUENCE


class OracleOIDAllocator(SequenceOIDAllocator):

    next_values_sql = (
        'SELECT zoid_seq.NEXTVAL FROM DUAL CONNECT BY LEVEL <= %s')

    def raise_to(self, max_oid):
        # A sequence is moved only by DDL, which would commit the
        # transaction it runs in: raised now, on a connection of its
        # own (raising it early is harmless).
        session = self.adapter.connect(for_store=True)
        try:
            self.move_past(session, max_oid)
        finally:
            session.close()
        return []

    def move_past(self, session, max_oid):
        """Make every later block start above *max_oid*. Other processes
        taking values meanwhile get larger ones: still unique."""
        current = session.scalar('SELECT zoid_seq.NEXTVAL FROM DUAL')
        if current > max_oid:
            return
        step = -(-(max_oid + 1 - current) // OID_BLOCK) * OID_BLOCK
        session.execute('ALTER SEQUENCE zoid_seq INCREMENT BY %d' % step)
        try:
            session.scalar('SELECT zoid_seq.NEXTVAL FROM DUAL')
        finally:
            session.execute('ALTER SEQUENCE zoid_seq INCREMENT BY %d'
                            % OID_BLOCK)

    def reset(self, session):
        session.execute('DROP SEQUENCE zoid_seq')
        session.execute(CREATE_SEQUENCE)
