"""Writing assignments and unload requests (asyncio shell, used by the load manager and admin).

Owns: the writes of ``keys.bundle_assignment`` and ``keys.bundle_unload`` keys.
Rule: both are create-or-compare-and-swap writes under the writer's lease (the
load manager's, or the admin gateway's), so they vanish with their writer and
two writers never overwrite each other blindly. An unload request names the
owner's ownership-key revision; the owner ignores a request for an older
incarnation of its ownership. For a move, the assignment to the destination is
written before the unload request, so the next owner is known before the bundle
is released.
"""

from __future__ import annotations

from coordination.store import MetadataStore
from gateway.ownership.bundles import NamespaceBundle
from gateway.ownership.key_records import (
    Assignment,
    UnloadRequest,
    assignment_key,
    decode_owner,
    owner_key,
    unload_key,
)


async def write_assignment(
    store: MetadataStore, bundle: NamespaceBundle, gateway_id: str, at_ms: int, lease: int
) -> bool:
    """Assign ``bundle`` to ``gateway_id`` (replacing any current assignment); False if it lost a race."""
    key = assignment_key(bundle)
    current = await store.get(key)
    revision = await store.compare_and_swap(
        key, Assignment(gateway_id, at_ms).encode(), current.mod_revision if current else 0, lease=lease
    )
    return revision is not None


async def request_unload(
    store: MetadataStore, bundle: NamespaceBundle, to_gateway: str | None, at_ms: int, lease: int
) -> bool:
    """Ask the current owner of ``bundle`` to unload it (and, with ``to_gateway``, assign it
    there first). False when the bundle is unowned, already moving to ``to_gateway``'s
    owner, or a request is already pending."""
    owner_kv = await store.get(owner_key(bundle))
    owner = decode_owner(owner_kv.value) if owner_kv is not None else None
    if owner_kv is None or owner is None or owner == to_gateway:
        return False
    if to_gateway is not None and not await write_assignment(store, bundle, to_gateway, at_ms, lease):
        return False
    request = UnloadRequest(owner, owner_kv.mod_revision, to_gateway, at_ms)
    return await store.compare_and_swap(unload_key(bundle), request.encode(), 0, lease=lease) is not None
