"""Handing out new oids in blocks, without a global bottleneck."""

from zope.interface import implementer

from .components import IOIDAllocator

#: Oids handed out per trip to the database.
OID_BLOCK = 16


@implementer(IOIDAllocator)
class OIDAllocator:
    """Base: ``new_blocks`` reserves blocks of OID_BLOCK consecutive oids,
    as many as asked for in one round trip (a storage that creates many
    objects asks for more at a time)."""

    def __init__(self, adapter):
        self.adapter = adapter

    def new_blocks(self, session, blocks):
        """Reserve *blocks* blocks; return ``[(first_oid, count)]``."""
        raise NotImplementedError

    def raise_to(self, max_oid):
        """Statements that make sure no oid <= *max_oid* is handed out
        later (after objects were stored with explicit oids, e.g. by
        restore); they run in the commit's transaction."""
        raise NotImplementedError

    def reset(self, session):
        raise NotImplementedError

    def reset_after_drop(self):
        """Forget anything kept outside the main tables."""


class SequenceOIDAllocator(OIDAllocator):
    """Oids from a database sequence that steps by OID_BLOCK: each value
    starts a block, and a sequence hands out values without waiting for
    any transaction."""

    #: Takes ``%s`` values of the sequence, one ``(value,)`` row each.
    next_values_sql = None

    def new_blocks(self, session, blocks):
        rows = session.fetchall(self.next_values_sql, (blocks,))
        return [(first, OID_BLOCK) for (first,) in rows]
