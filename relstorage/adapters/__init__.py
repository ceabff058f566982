"""Database adapters: the modules every database shares, and a package
per database (postgresql, mysql, oracle, sqlite) holding what differs."""
