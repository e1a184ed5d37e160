"""``folio node decommission|status|cancel``: storage-node membership from the command line.

Owns: the command's arguments and output; every rule is the admin API's
(``/admin/v2/storage/nodes/{id}/decommission``, docs/membership.md), asked over HTTP.
Exit 0 when the request was accepted (with ``--wait``: once the node has left),
1 with the API's reason on a refusal, 2 when the gateway cannot be reached.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import httpx

POLL_S = 1.0


def add_parser(sub: Any) -> None:
    node = sub.add_parser("node", help="storage-node membership: decommission a node, show progress")
    actions = node.add_subparsers(dest="node_action", required=True)
    for name, text in (
        ("decommission", "drain a node: no new ledgers, its ledgers copied elsewhere, then it leaves"),
        ("status", "decommissions under way or done (one node, or all)"),
        ("cancel", "cancel a decommission under way, or clear the record of a node that has left"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("node_id", nargs="?" if name == "status" else None, help="host:port of the node")
        action.add_argument("--url", default="http://127.0.0.1:8080", help="a gateway's base URL")
        action.add_argument("--token", default=None, help="bearer token (a superuser's) when security is on")
        if name == "decommission":
            action.add_argument("--wait", action="store_true", help="print progress until the node has left")
            action.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits at most")


def _line(view: dict[str, Any]) -> str:
    mib = 1 << 20
    return (
        f"{view['nodeId']} {view['state']}: ledgers {view['ledgersDone']}/{view['ledgersTotal']}, "
        f"bytes {view['bytesDone'] / mib:.1f}/{view['bytesTotal'] / mib:.1f} MiB - {view['next']}"
    )


def _refused(response: httpx.Response) -> int:
    try:
        reason = response.json().get("reason", response.text)
    except ValueError:
        reason = response.text
    print(f"refused ({response.status_code}): {reason}")
    return 1


def run(args: argparse.Namespace) -> int:
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    base = f"{args.url.rstrip('/')}/admin/v2/storage"
    try:
        with httpx.Client(headers=headers, timeout=30.0) as http:
            return _run(http, base, args)
    except httpx.HTTPError as exc:
        print(f"cannot reach the gateway at {args.url}: {exc!r}")
        return 2


def _run(http: httpx.Client, base: str, args: argparse.Namespace) -> int:
    if args.node_action == "status":
        url = f"{base}/nodes/{args.node_id}/decommission" if args.node_id else f"{base}/decommissions"
        response = http.get(url)
        if response.status_code != 200:
            return _refused(response)
        body = response.json()
        views = body if isinstance(body, list) else [body]
        for view in views:
            print(_line(view))
        if not views:
            print("no storage node is being decommissioned")
        return 0
    url = f"{base}/nodes/{args.node_id}/decommission"
    if args.node_action == "cancel":
        response = http.delete(url)
        if response.status_code != 204:
            return _refused(response)
        print(f"{args.node_id}: decommission record removed")
        return 0
    response = http.post(url)
    if response.status_code not in (200, 202):
        return _refused(response)
    view = response.json()
    print(_line(view))
    deadline = time.monotonic() + args.timeout
    last = _line(view)
    while args.wait and view["state"] != "left":
        if time.monotonic() > deadline:
            print(f"{args.node_id} has not left after {args.timeout:.0f}s; it is still {view['state']}")
            return 1
        time.sleep(POLL_S)
        response = http.get(url)
        if response.status_code != 200:
            return _refused(response)
        view = response.json()
        if _line(view) != last:
            last = _line(view)
            print(last, flush=True)
    return 0
