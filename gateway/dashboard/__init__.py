"""The admin dashboard every gateway serves at ``/`` and under ``/ui/`` (DESIGN.md §8).

Owns: the dashboard package: server-rendered page shells (``templates/``), the
small browser modules and vendored libraries they load (``static/``), and the
router that serves both (``routes.make_router``). Rule: build-less and offline -
pages get all their data from the same public admin/REST/WebSocket APIs scripts
use; nothing here reads gateway internals except the gateway's own id.
"""

from gateway.dashboard.routes import make_router

__all__ = ["make_router"]
