"""The pack's ZODB-side policy: which revisions and objects go (pack),
read from the database a page at a time (prepackio) into a reference
graph in bounded memory (graph), with the references unpickled by
worker processes (workers) and kept for the next pack (keptrefs), and
several databases of a multi-database packed together (multidb). What
runs in the database is behind adapters.pack_interfaces.IPackWriter."""
