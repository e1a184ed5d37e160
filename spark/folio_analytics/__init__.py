"""Topic statistics computed by Spark from the log (docs/architecture.md §9).

Owns: the pure statistics core (``grid``, ``sketches``, ``profile``,
``keyshare``, ``backlog``, ``results``) and the ``folio analytics`` service
that runs it on Spark. Rule: statistics come from the storage nodes through
the ``folio`` data source, never through the gateways; results go to etcd.
"""
