"""The process-wide pickle cache shared by all connections of a storage.

See :class:`StorageCache`; :mod:`.index` explains how the cache knows that
a state it holds is still current for a given view, and :mod:`.lru` how it
stays within its byte limit.
"""
from .storage_cache import StorageCache

__all__ = ['StorageCache']
