"""What the tests and the speed test share: where the test databases are
and how to build adapters and storages on them (``dbs``), private
throw-away servers and replicated pairs of them (``private_servers``,
``replica_pairs``), and the RelStorage 4 workload (``rs4_workload``).

Nothing here is imported by the storage itself. The RELSTORAGE_TEST_*
environment variables that ``dbs`` reads are test configuration: they
choose the servers the tests and the speed test use, never how a storage
behaves.
"""
