"""``MetadataStore`` over a real etcd v3 cluster, through aetcd's gRPC stubs.

Owns: the translation of etcd requests/responses into the store protocol; the
connection itself (endpoints, gRPC channel, failures -> ``Unavailable``) is the
``EtcdChannel`` it shares with its watches (etcd_channel.py).
Rule: same semantics as ``MemoryStore`` (one contract suite runs against both):

- compare-and-swap is one etcd transaction: ``mod_revision(key) == expected``
  (``version(key) == 0`` when expected is 0, i.e. "must not exist") -> put;
- listings are paginated (``list_page_size`` keys per request) at one pinned
  revision, so a large prefix never exceeds gRPC message limits and is still a
  consistent snapshot;
- a watch resumes by itself after a broken stream, from the revision after the
  last event it queued, retrying for ``watch_reconnect_s``; it then ends with
  ``Unavailable`` (etcd_watch.py). Overflow/compaction end it as in watch_stream.py;
- writes are never retried here (a retried CAS whose first attempt landed would
  report a false conflict); the caller sees ``Unavailable`` and decides. With
  several endpoints the client moves to the next one after an ``Unavailable``.

``namespace`` (e.g. ``"/t-1234"``) is prepended to every key and stripped from
results, so tests - or two Folio clusters - can share one etcd. No namespace in
use may be a prefix of another (``/a`` vs ``/ab``); ``/t-000001``-style names are safe.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from aetcd import rpc

from coordination.errors import Compacted, CoordinationError, LeaseLost, Unavailable
from coordination.etcd_channel import DEFAULT_TIMEOUT_S, EtcdChannel
from coordination.etcd_watch import EtcdWatch
from coordination.store import KeyValue, WatchEvent
from coordination.watch_stream import WATCH_QUEUE_SIZE

LIST_PAGE_SIZE = 1000  # keys per Range request when listing a prefix
LIST_ATTEMPTS = 3  # a paginated listing restarts if its pinned revision gets compacted
WATCH_RECONNECT_S = 30.0  # how long a watch keeps trying to re-subscribe before Unavailable


@dataclass(frozen=True, slots=True)
class EtcdMember:
    """One member of the etcd cluster, as its member list and status report it."""

    member_id: int
    name: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_leader: bool
    db_size: int | None  # bytes; only known for the member that answered the status call

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": f"{self.member_id:x}",
            "name": self.name,
            "peerUrls": list(self.peer_urls),
            "clientUrls": list(self.client_urls),
            "isLeader": self.is_leader,
        }
        if self.db_size is not None:
            out["dbSize"] = self.db_size
        return out


def parse_endpoints(endpoints: str) -> list[tuple[str, int]]:
    """``"host:port[,host:port...]"`` (an ``http://`` prefix and ``[v6]`` hosts allowed)."""
    out = []
    for raw in endpoints.split(","):
        item = raw.strip().removeprefix("http://").removeprefix("https://").rstrip("/")
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bad etcd endpoint {raw!r}: want host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no etcd endpoints given")
    return out


class EtcdStore:
    """A ``MetadataStore`` on etcd; create it with ``await connect(...)``."""

    def __init__(
        self,
        endpoints: list[tuple[str, int]],
        *,
        namespace: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        watch_queue_size: int = WATCH_QUEUE_SIZE,
        list_page_size: int = LIST_PAGE_SIZE,
        watch_reconnect_s: float = WATCH_RECONNECT_S,
    ) -> None:
        if list_page_size < 1:
            raise ValueError("list_page_size must be >= 1")
        self._channel = EtcdChannel(endpoints, namespace=namespace, timeout_s=timeout_s)
        self.watch_queue_size = watch_queue_size
        self.list_page_size = list_page_size
        self.watch_reconnect_s = watch_reconnect_s
        self._watches: list[EtcdWatch] = []

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return self._channel.endpoints

    @property
    def namespace(self) -> str:
        return self._channel.namespace

    @property
    def timeout_s(self) -> float:
        return self._channel.timeout_s

    @property
    def closed(self) -> bool:
        return self._channel.closed

    @property
    def endpoint(self) -> str:
        return self._channel.endpoint

    # -- plumbing ---------------------------------------------------------------------------

    def _kv(self, kv: Any) -> KeyValue:
        return KeyValue(
            key=self._channel.strip(kv.key),
            value=bytes(kv.value),
            create_revision=int(kv.create_revision),
            mod_revision=int(kv.mod_revision),
            version=int(kv.version),
            lease=int(kv.lease),
        )

    async def _call(self, stub_name: str, method: str, request: Any) -> Any:
        return await self._channel.call(stub_name, method, request)

    # -- MetadataStore ------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        resp = await self._call("kvstub", "Range", rpc.RangeRequest(key=self._channel.key(key)))
        return self._kv(resp.kvs[0]) if resp.kvs else None

    async def list_prefix(self, prefix: str) -> list[KeyValue]:
        return (await self.list_prefix_at(prefix))[0]

    async def list_prefix_at(self, prefix: str) -> tuple[list[KeyValue], int]:
        """The listing plus the revision it reflects (watch from revision + 1)."""
        for attempt in range(LIST_ATTEMPTS):
            try:
                return await self._list_once(prefix)
            except Compacted:
                if attempt == LIST_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def _list_once(self, prefix: str) -> tuple[list[KeyValue], int]:
        start, end = self._channel.key_range(prefix)
        out: list[KeyValue] = []
        revision = 0
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, limit=self.list_page_size, revision=revision)
            resp = await self._call("kvstub", "Range", req)
            if revision == 0:
                revision = int(resp.header.revision)
            out.extend(self._kv(kv) for kv in resp.kvs)
            if not resp.more or not resp.kvs:
                return out, revision
            start = bytes(resp.kvs[-1].key) + b"\0"

    async def revision(self) -> int:
        return await self._channel.revision()

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        req = rpc.PutRequest(key=self._channel.key(key), value=value, lease=lease)
        return int((await self._call("kvstub", "Put", req)).header.revision)

    async def delete(self, key: str) -> bool:
        resp = await self._call("kvstub", "DeleteRange", rpc.DeleteRangeRequest(key=self._channel.key(key)))
        return int(resp.deleted) > 0

    async def delete_prefix(self, prefix: str) -> int:
        start, end = self._channel.key_range(prefix)
        resp = await self._call("kvstub", "DeleteRange", rpc.DeleteRangeRequest(key=start, range_end=end))
        return int(resp.deleted)

    def _compare(self, key: bytes, expected_mod_revision: int) -> Any:
        if expected_mod_revision == 0:
            return rpc.Compare(key=key, target=rpc.Compare.VERSION, result=rpc.Compare.EQUAL, version=0)
        return rpc.Compare(
            key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=expected_mod_revision
        )

    async def compare_and_swap(
        self, key: str, value: bytes, expected_mod_revision: int, lease: int = 0
    ) -> int | None:
        k = self._channel.key(key)
        put = rpc.RequestOp(request_put=rpc.PutRequest(key=k, value=value, lease=lease))
        req = rpc.TxnRequest(compare=[self._compare(k, expected_mod_revision)], success=[put], failure=[])
        resp = await self._call("kvstub", "Txn", req)
        return int(resp.header.revision) if resp.succeeded else None

    async def put_guarded(self, key: str, value: bytes, guards: Sequence[tuple[str, int]]) -> int | None:
        put = rpc.RequestOp(request_put=rpc.PutRequest(key=self._channel.key(key), value=value))
        compares = [self._compare(self._channel.key(k), revision) for k, revision in guards]
        resp = await self._call("kvstub", "Txn", rpc.TxnRequest(compare=compares, success=[put], failure=[]))
        return int(resp.header.revision) if resp.succeeded else None

    async def compare_and_delete(self, key: str, expected_mod_revision: int) -> bool:
        if expected_mod_revision <= 0:
            return False  # "must not exist": there is nothing to delete
        k = self._channel.key(key)
        delete = rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=k))
        req = rpc.TxnRequest(compare=[self._compare(k, expected_mod_revision)], success=[delete], failure=[])
        resp = await self._call("kvstub", "Txn", req)
        return bool(resp.succeeded) and int(resp.responses[0].response_delete_range.deleted) > 0

    async def grant_lease(self, ttl_s: int) -> int:
        if ttl_s < 1:
            raise ValueError("lease ttl must be >= 1 s")
        resp = await self._call("leasestub", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl_s, ID=0))
        if resp.error:
            raise CoordinationError(f"lease grant failed: {resp.error}")
        return int(resp.ID)

    async def refresh_lease(self, lease: int) -> None:
        client = await self._channel.connected()
        with self._channel.translate(client):
            reply = await client.refresh_lease(lease)
        if reply is None:
            raise Unavailable("etcd closed the keepalive stream without an answer")
        if int(reply.TTL) <= 0:
            raise LeaseLost(f"lease {lease:x} expired or revoked")

    async def revoke_lease(self, lease: int) -> None:
        try:
            await self._call("leasestub", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease))
        except LeaseLost:
            pass  # already gone: revoking is idempotent

    async def lease_ttl(self, lease: int) -> int:
        """Remaining TTL in seconds as etcd sees it (-1 if the lease is gone)."""
        resp = await self._call("leasestub", "LeaseTimeToLive", rpc.LeaseTimeToLiveRequest(ID=lease))
        return int(resp.TTL)

    async def compact(self, revision: int) -> None:
        """Compact etcd's history below ``revision`` (watches from before raise Compacted)."""
        await self._call("kvstub", "Compact", rpc.CompactionRequest(revision=revision, physical=True))

    async def cluster_members(self) -> list[EtcdMember]:
        """The etcd cluster's members (cluster-wide, not namespaced), with the leader
        marked from the answering member's status (which also gives its db size)."""
        listing = await self._call("clusterstub", "MemberList", rpc.MemberListRequest())
        status = await self._call("maintenancestub", "Status", rpc.StatusRequest())
        answering, leader = int(status.header.member_id), int(status.leader)
        return [
            EtcdMember(
                member_id=int(m.ID),
                name=str(m.name),
                peer_urls=tuple(str(u) for u in m.peerURLs),
                client_urls=tuple(str(u) for u in m.clientURLs),
                is_leader=int(m.ID) == leader,
                db_size=int(status.dbSize) if int(m.ID) == answering else None,
            )
            for m in listing.members
        ]

    def watch_prefix(self, prefix: str, start_revision: int = 0) -> AsyncIterator[WatchEvent]:
        watch = EtcdWatch(
            self._channel,
            prefix,
            start_revision,
            queue_size=self.watch_queue_size,
            reconnect_s=self.watch_reconnect_s,
        )
        if self.closed:
            watch.fail(Unavailable("etcd store closed"))
        self._watches = [w for w in self._watches if w.active]
        self._watches.append(watch)
        return watch

    async def close(self) -> None:
        if self.closed:
            return
        for watch in self._watches:
            watch.finish()
        self._watches.clear()
        await self._channel.close()


async def connect(
    endpoints: str,
    *,
    namespace: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    watch_queue_size: int = WATCH_QUEUE_SIZE,
    list_page_size: int = LIST_PAGE_SIZE,
    watch_reconnect_s: float = WATCH_RECONNECT_S,
    check: bool = True,
) -> EtcdStore:
    """Open an ``EtcdStore`` on ``"host:port[,host:port...]"``. With ``check`` (default)
    one endpoint must answer, else ``Unavailable`` is raised."""
    store = EtcdStore(
        parse_endpoints(endpoints),
        namespace=namespace,
        timeout_s=timeout_s,
        watch_queue_size=watch_queue_size,
        list_page_size=list_page_size,
        watch_reconnect_s=watch_reconnect_s,
    )
    if check:
        for attempt in range(len(store.endpoints)):
            try:
                await store.revision()
                break
            except Unavailable:
                if attempt == len(store.endpoints) - 1:
                    await store.close()
                    raise
    return store
