"""The ``folio`` command line and the local-cluster supervisor. Nothing imports it."""
