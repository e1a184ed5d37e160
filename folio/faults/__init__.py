"""Folio's fault suite: a workload over a real local cluster, a seeded nemesis of
real process faults (kill -9, power loss, SIGSTOP, etcd restarts, unloads, a
filling disk), a history of every operation, and the checkers run over it.

``folio faults --duration 1h --seed N`` runs it; ``tests/faults/`` runs a short
seeded run, the checkers' unit tests and the controls that must fail.
"""
