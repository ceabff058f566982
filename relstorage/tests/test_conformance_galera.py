"""ZODB's storage conformance suites on a private three-node MariaDB
Galera cluster (galera_cluster), both history modes: with the storage on
node 1 alone, and with its stores on node 1 and its loads from node 2
(``ro-replica-conf``), which applies node 1's commits a moment later."""
from .conformance import CLUSTER_LAYOUTS
from .conformance import make_classes

for _layout in CLUSTER_LAYOUTS:
    globals().update(make_classes('mysql', cluster=_layout))
del _layout
