"""Folio's security layer: bearer tokens, roles and the authorization rules of every route.

See docs/decisions/0009-security-model.md.
"""
