"""The admin dashboard every gateway serves at ``/`` and under ``/ui/`` (docs/architecture.md §8).

Owns: the gateway's side of the dashboard: the page catalogue (``pages``) and
the router (``routes.make_router``) that renders the page shells and serves the
static files kept in the top-level ``web_ui`` package. Rule: build-less and offline -
pages get all their data from the same public admin/REST/WebSocket APIs scripts
use; nothing here reads gateway internals except the gateway's own id.
"""

from gateway.dashboard.routes import make_router

__all__ = ["make_router"]
