"""The storage node: a BookKeeper-style bookie whose journal files are also its entry store (+ index).

Owns nothing itself; see service.py for how the parts fit together.
"""
