"""The admin dashboard's browser side: page templates and static files (docs/architecture.md §8).

Owns: ``templates/`` (Jinja page shells) and ``static/`` (the small browser
modules, stylesheet and vendored uPlot + Alpine with their licenses). Rule: this
package is data only - it imports nothing of Folio's; every gateway serves it
(``gateway.dashboard``) and the pages talk to the gateway over HTTP/WebSocket only.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
STATIC = ROOT / "static"
TEMPLATES = ROOT / "templates"

__all__ = ["ROOT", "STATIC", "TEMPLATES"]
