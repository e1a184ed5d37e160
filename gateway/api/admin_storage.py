"""Admin REST v2: decommissioning storage nodes, with progress.

Owns: the HTTP shape of ``/admin/v2/storage/nodes/{node_id}/decommission`` and
``/admin/v2/storage/decommissions`` (thin asyncio shell over etcd: the drain
record's rules are in ``storage.drain``, the keys in docs/decisions/0020).
Rules:
- a decommission writes the node's drain record once ("must not exist"): asking
  again answers the drain under way; a node neither registered nor known is 404;
- it is refused (409) when the nodes left writable would be fewer than the
  gateway's ensemble size: new ledgers and re-replication need E other nodes;
- progress is computed from ledger metadata at the time of the request (the
  auditor writes it into the record after each pass as well);
- DELETE cancels a drain under way (the node takes ledgers again) or clears the
  record of a node that has left; a drained node still registered is leaving:
  409 until it is gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import orjson
from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from coordination import keys
from coordination.store import MetadataStore
from gateway.api import errors
from gateway.api.admin_models import NodeIdPath
from gateway.meta.errors import Conflict, NotFound
from storage import drain
from storage.drain import DrainRecord, DrainState
from storage.types import LedgerMetadata, NodeInfo

if TYPE_CHECKING:
    from gateway.process import Gateway

TAGS: list[str | Any] = ["admin-cluster"]


class DecommissionView(BaseModel):
    nodeId: str
    state: Literal["draining", "drained", "left"] = Field(
        description="draining: its ledgers are being copied to other nodes; drained: no ledger "
        "names it, it is leaving; left: drained and no longer registered (its data dir may be deleted)"
    )
    registered: bool = Field(description="the node is registered (running) now")
    ledgersTotal: int
    ledgersDone: int = Field(description="ledgers no longer placed on it (copied elsewhere, or deleted)")
    bytesTotal: int = Field(
        description="bytes of closed ledgers it held (open ledgers add theirs once closed)"
    )
    bytesDone: int
    requestedMs: int
    updatedMs: int
    drainedMs: int = Field(description="when the auditor found it drained (0: not yet)")
    next: str = Field(description="what happens next, in a sentence")


_NEXT = {
    "draining": "the auditor copies its ledgers to other nodes; it takes no new ledgers meanwhile",
    "drained": "every ledger it held is on other nodes; the node deregisters and stops by itself",
    "left": "the node has left; its data dir may be deleted, and DELETE clears this record",
}


class StorageMembership:
    """The reads and writes behind the routes (etcd through a narrow store port)."""

    def __init__(self, store: MetadataStore, now_ms: Callable[[], int], ensemble_size: int) -> None:
        self.store = store
        self.now_ms = now_ms
        self.ensemble_size = ensemble_size

    async def _ledgers(self) -> list[LedgerMetadata]:
        out = []
        for kv in await self.store.list_prefix(keys.LEDGERS):
            with contextlib.suppress(ValueError, KeyError, AssertionError, orjson.JSONDecodeError):
                out.append(LedgerMetadata.from_json(kv.value))
        return out

    async def _live(self) -> dict[str, NodeInfo]:
        out = {}
        for kv in await self.store.list_prefix(keys.NODES):
            with contextlib.suppress(ValueError, KeyError, orjson.JSONDecodeError):
                info = NodeInfo.from_json(kv.value)
                out[info.node_id] = info
        return out

    async def _records(self) -> dict[str, DrainRecord]:
        out = {}
        for kv in await self.store.list_prefix(keys.DRAINS):
            with contextlib.suppress(ValueError, KeyError, TypeError, orjson.JSONDecodeError):
                record = DrainRecord.from_json(kv.value)
                out[record.node_id] = record
        return out

    def _view(self, record: DrainRecord, ledgers: list[LedgerMetadata], registered: bool) -> dict[str, Any]:
        if record.state is DrainState.DRAINING:
            record = drain.progress(record, drain.holdings(ledgers, record.node_id), self.now_ms())
        state = record.state.value if registered or record.state is DrainState.DRAINING else "left"
        return {
            "nodeId": record.node_id,
            "state": state,
            "registered": registered,
            "ledgersTotal": record.ledgers_total,
            "ledgersDone": record.ledgers_done,
            "bytesTotal": record.bytes_total,
            "bytesDone": record.bytes_done,
            "requestedMs": record.requested_ms,
            "updatedMs": record.updated_ms,
            "drainedMs": record.drained_ms,
            "next": _NEXT[state],
        }

    async def decommission(self, node_id: str) -> tuple[dict[str, Any], bool]:
        """Start draining ``node_id``; (its view, True if this request started it)."""
        live, records = await self._live(), await self._records()
        ledgers = await self._ledgers()
        if node_id in records:
            return self._view(records[node_id], ledgers, node_id in live), False
        if node_id not in live and await self.store.get(keys.node_known(node_id)) is None:
            raise NotFound(f"storage node {node_id} is not known: list them with GET /admin/v2/storage/nodes")
        writable = [
            n for n in live.values() if n.node_id != node_id and not n.read_only and n.node_id not in records
        ]
        if len(writable) < self.ensemble_size:
            raise Conflict(
                f"decommissioning {node_id} would leave {len(writable)} writable storage nodes, fewer than "
                f"the ensemble size {self.ensemble_size} new ledgers need: add a node first"
            )
        record = drain.start(node_id, drain.holdings(ledgers, node_id), self.now_ms())
        if await self.store.compare_and_swap(keys.drain(node_id), record.to_json(), 0) is None:
            return await self.progress(node_id), False  # another request started it meanwhile
        return self._view(record, ledgers, node_id in live), True

    async def progress(self, node_id: str) -> dict[str, Any]:
        kv = await self.store.get(keys.drain(node_id))
        if kv is None:
            raise NotFound(f"storage node {node_id} is not being decommissioned")
        registered = await self.store.get(keys.node(node_id)) is not None
        return self._view(DrainRecord.from_json(kv.value), await self._ledgers(), registered)

    async def all(self) -> list[dict[str, Any]]:
        live, records, ledgers = await self._live(), await self._records(), await self._ledgers()
        return [self._view(records[n], ledgers, n in live) for n in sorted(records)]

    async def cancel_or_clear(self, node_id: str) -> None:
        kv = await self.store.get(keys.drain(node_id))
        if kv is None:
            raise NotFound(f"storage node {node_id} is not being decommissioned")
        record = DrainRecord.from_json(kv.value)
        if record.state is DrainState.DRAINED and await self.store.get(keys.node(node_id)) is not None:
            raise Conflict(
                f"storage node {node_id} is drained and leaving: wait until it has deregistered, "
                "then clear the record"
            )
        if not await self.store.compare_and_delete(keys.drain(node_id), kv.mod_revision):
            raise Conflict(f"the decommission of {node_id} changed meanwhile: read it and try again")


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(prefix="/admin/v2/storage", tags=TAGS)
    gateway = get_gateway()
    membership = StorageMembership(gateway.store, gateway.clock.now_ms, gateway.config.log.ensemble_size)

    @router.post(
        "/nodes/{node_id}/decommission",
        status_code=202,
        summary="Decommission a storage node: no new ledgers, its ledgers copied elsewhere, then it leaves",
        responses=errors.responses(404, 409),
        response_model=DecommissionView,
    )
    async def decommission_storage_node(node_id: NodeIdPath, response: Response) -> dict[str, Any]:
        view, started = await membership.decommission(node_id)
        if not started:
            response.status_code = 200
        return view

    @router.get(
        "/nodes/{node_id}/decommission",
        summary="Progress of a storage node's decommission (ledgers and bytes done of total)",
        responses=errors.responses(404),
        response_model=DecommissionView,
    )
    async def get_storage_node_decommission(node_id: NodeIdPath) -> dict[str, Any]:
        return await membership.progress(node_id)

    @router.delete(
        "/nodes/{node_id}/decommission",
        status_code=204,
        summary="Cancel a decommission under way, or clear the record of a node that has left",
        responses=errors.responses(404, 409),
    )
    async def cancel_storage_node_decommission(node_id: NodeIdPath) -> Response:
        await membership.cancel_or_clear(node_id)
        return Response(status_code=204)

    @router.get(
        "/decommissions",
        summary="Every storage node being decommissioned, drained, or left",
        responses=errors.responses(),
        response_model=list[DecommissionView],
    )
    async def list_storage_decommissions() -> list[dict[str, Any]]:
        return await membership.all()

    return router
