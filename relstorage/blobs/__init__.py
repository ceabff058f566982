"""Blob support: the blob directory, the local blob cache, blobs kept in
the database (``cached``) or only in a shared directory (``shared``)."""


def make_blobs(options, keep_history, cache_key, open_session, where):
    """The blob helper for *options*, or None without ``blob-dir``;
    *cache_key()* returns the database's cache key, which signs the files
    of a blob cache; *open_session()* opens a load session of the
    database (a blob cache downloads through one when an instance's
    snapshot does not see a revision), which *where* names in errors."""
    if not options.blob_dir:
        return None
    if options.shared_blob_dir:
        from .shared import SharedBlobs
        return SharedBlobs(options.blob_dir)
    from .cached import DatabaseBlobs
    return DatabaseBlobs(options.blob_dir, options, keep_history, cache_key,
                         open_session, where)
