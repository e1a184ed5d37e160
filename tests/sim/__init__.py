"""Seeded deterministic simulation of the storage layer (see world.py)."""
