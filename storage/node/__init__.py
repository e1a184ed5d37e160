"""The storage node: a BookKeeper-style bookie (journal + entry logs + index).

Owns nothing itself; see service.py for how the parts fit together.
"""
