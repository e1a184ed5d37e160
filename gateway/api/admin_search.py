"""Admin REST (Folio): message search over a topic's log, one bounded page at a time.

Owns: the HTTP shape of ``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/search``
(thin asyncio shell over the pure ``gateway.api.message_search``). Rules
(docs/decisions/0016):
- served by the topic's owner (forwarded once), never auto-creating it; a
  partitioned topic is searched one partition at a time (400 says so);
- a page reads entries from ``start`` (else the first entry, or the first
  published at ``after`` or later) until its bytes, its time or its matches are
  spent or the log ends - each capped server-side whatever is asked - and answers
  what it scanned and where to resume (``next``); entries are decoded here, not
  through the topic's shared cache, so a search does not push out what consumers read;
- a search is cancelled by not asking for the next page.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from gateway.api import errors
from gateway.api.admin_bodies import message_fields, shown_message_id
from gateway.api.admin_common import TOPIC, AdminRoute, json_response, on_owner, partition_count, topic_name
from gateway.api.message_search import (
    FILTER_TEXT_MAX,
    JSON_PATTERN,
    MATCHES_MAX,
    PAYLOAD_PREVIEW_BYTES,
    PROPERTY_PATTERN,
    SCAN_BYTES_MAX,
    START_PATTERN,
    TIME_LIMIT_MS_MAX,
    ScanBounds,
    SearchFilter,
    StoppedBy,
    matches,
    parse_resume,
    resume_text,
)
from gateway.api.route_docs import Namespace, Tenant, TopicPart
from gateway.broker.topic import Topic
from gateway.meta.errors import InvalidArgument
from gateway.meta.schema_types import display_value
from storage.formats.entry_format import EntryMessage, decode_entry
from storage.formats.positions import EARLIEST, MessagePosition, Position

if TYPE_CHECKING:
    from gateway.process import Gateway

READ_ENTRIES = 64  # entries asked of the log at once
Text = Annotated[str | None, Query(max_length=FILTER_TEXT_MAX)]


def _item(entry: Position, index: int, message: EntryMessage, size: int, partition: int) -> dict[str, Any]:
    batched = size > 1
    position = MessagePosition(entry.ledger_id, entry.entry_id, index)
    payload = message.payload[:PAYLOAD_PREVIEW_BYTES]
    return {
        "messageId": shown_message_id(position, size, partition).to_base64(),
        "position": f"{entry.ledger_id}:{entry.entry_id}" + (f":{index}" if batched else ""),
        **message_fields(message),
        "payload": base64.b64encode(payload).decode(),
        "payloadSize": len(message.payload),
        "payloadTruncated": len(payload) < len(message.payload),
        "schemaVersion": message.schema_version,
    }


async def _start(topic: Topic, start: str | None, search: SearchFilter) -> tuple[Position | None, int]:
    """The entry to read first (None: nothing to read) and the message index in it."""
    if start:
        return parse_resume(start)
    if search.after_ms is not None:
        return await topic.first_position_at_or_after(search.after_ms), 0
    return topic.log.layout.next_position(EARLIEST), 0


async def search_page(
    topic: Topic, search: SearchFilter, bounds: ScanBounds, start: str | None, clock: Callable[[], float]
) -> dict[str, Any]:
    """One page of a search of ``topic``'s log (``clock``: monotonic seconds)."""
    began = clock()
    deadline = began + bounds.time_limit_ms / 1000
    position, first_index = await _start(topic, start, search)
    found: list[tuple[Position, int, EntryMessage, int]] = []
    scanned_bytes = scanned_entries = scanned_messages = 0
    stopped, resume = StoppedBy.END, None
    while position is not None:
        if scanned_bytes >= bounds.max_bytes or clock() >= deadline:
            stopped = StoppedBy.BYTES if scanned_bytes >= bounds.max_bytes else StoppedBy.TIME
            resume = resume_text(position, first_index)
            break
        batch = await topic.log.read(position, READ_ENTRIES)
        if not batch:
            break
        next_position: Position | None = None
        for entry, payload in batch:
            next_position = topic.log.layout.next_position(entry)
            messages = decode_entry(payload)
            scanned_bytes += len(payload)
            scanned_entries += 1
            for index in range(first_index, len(messages)):
                message = messages[index]
                scanned_messages += 1
                if search.before_ms is not None and message.publish_time_ms >= search.before_ms:
                    stopped = StoppedBy.BEFORE
                    break
                if matches(search, message):
                    found.append((entry, index, message, len(messages)))
                    if len(found) >= bounds.limit:
                        stopped = StoppedBy.MATCHES
                        if index + 1 < len(messages):
                            resume = resume_text(entry, index + 1)
                        elif next_position is not None:
                            resume = resume_text(next_position)
                        break
            first_index = 0
            if stopped in (StoppedBy.BEFORE, StoppedBy.MATCHES):
                break
            if scanned_bytes >= bounds.max_bytes or clock() >= deadline:
                break  # the loop's head says which bound, and resumes at the next entry
        if stopped in (StoppedBy.BEFORE, StoppedBy.MATCHES):
            break
        position = next_position
    items = [_item(e, i, m, size, topic.partition) for e, i, m, size in found]
    return {
        "messages": items,
        "scannedBytes": scanned_bytes,
        "scannedEntries": scanned_entries,
        "scannedMessages": scanned_messages,
        "elapsedMs": round((clock() - began) * 1000),
        "next": resume,
        "stoppedBy": stopped.value,
        "done": resume is None,
        "bounds": bounds.to_json(),
        "filter": search.describe(),
    }


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(prefix="", tags=["admin-topics"], route_class=AdminRoute)

    @router.get(
        f"{TOPIC}/search",
        summary="Search messages by key, property, payload text, JSON field and publish time (Folio)",
        responses=errors.responses(400, 404, 412),
    )
    async def search_messages(
        tenant: Tenant,
        namespace: Namespace,
        topic: TopicPart,
        request: Request,
        key: Annotated[Text, Query(description="the message key, exactly")] = None,
        property: Annotated[
            Text,
            Query(json_schema_extra={"pattern": PROPERTY_PATTERN}, description="a property, as name=value"),
        ] = None,
        text: Annotated[Text, Query(description="text the payload contains (case-sensitive)")] = None,
        json: Annotated[
            Text,
            Query(
                json_schema_extra={"pattern": JSON_PATTERN},
                description="a JSON payload's field, as dotted.path=value",
            ),
        ] = None,
        after: Annotated[int | None, Query(ge=0, description="published at or after (epoch ms)")] = None,
        before: Annotated[int | None, Query(ge=0, description="published before (epoch ms)")] = None,
        start: Annotated[
            str | None,
            Query(
                max_length=64,
                json_schema_extra={"pattern": START_PATTERN},
                description="resume here: a previous page's next",
            ),
        ] = None,
        maxBytes: Annotated[
            int | None,
            Query(ge=1, description=f"entry bytes to read in this page (capped at {SCAN_BYTES_MAX})"),
        ] = None,
        timeoutMs: Annotated[
            int | None,
            Query(ge=1, description=f"time to spend on this page (capped at {TIME_LIMIT_MS_MAX} ms)"),
        ] = None,
        limit: Annotated[
            int | None, Query(ge=1, description=f"matches per page (capped at {MATCHES_MAX})")
        ] = None,
    ) -> Response:
        """One page of a bounded scan: the matching messages (payloads cut at 16 KiB),
        ``scannedBytes`` / ``scannedEntries`` / ``scannedMessages``, ``next`` (ask again
        with ``start=next`` to go on; null when done) and ``stoppedBy`` (end, before,
        bytes, time, matches)."""
        gateway = get_gateway()
        name = topic_name(tenant, namespace, topic)
        search = SearchFilter.parse(key, property, text, json, after, before)
        bounds = ScanBounds.capped(maxBytes, timeoutMs, limit)
        if start:
            parse_resume(start)  # a bad one is refused before any forwarding
        count = await partition_count(gateway, name)
        if count:
            raise InvalidArgument(
                f"{name} is partitioned: search one partition at a time ({name}-partition-0 … -{count - 1})"
            )

        async def serve(t: Topic) -> Response:
            page = await search_page(t, search, bounds, start, time.monotonic)
            await _decode_values(gateway, t, page)
            return json_response(page)

        return await on_owner(gateway, request, name, serve)

    return router


async def _decode_values(gateway: Gateway, topic: Topic, page: dict[str, Any]) -> None:
    """A match written with a schema also carries its decoded ``value`` (as the browse routes do)."""
    versions = {m["schemaVersion"] for m in page["messages"]} - {None}
    if not versions:
        return
    known = {v.version: v.info for v in await gateway.schemas.versions(topic.name) if not v.deleted}
    for item in page["messages"]:
        info = known.get(item["schemaVersion"])
        if info is not None and not item["payloadTruncated"]:
            item["value"] = display_value(info, base64.b64decode(item["payload"]))
