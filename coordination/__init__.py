"""Coordination: the metadata-store port and its etcd / in-memory implementations,
leases, watches, leader election and membership. Imports nothing else of Folio."""
