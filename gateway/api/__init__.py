"""HTTP routers of the gateway (FastAPI), one module per area."""
