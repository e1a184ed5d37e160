"""The ASGI layer in front of every route and WebSocket endpoint (asyncio shell).

Owns: for each HTTP request and WebSocket handshake, in this order:
1. the Host check (names the gateway is served as; DNS rebinding),
2. the Origin check (same origin, or an allowed origin, else refused: CSRF and
   cross-site WebSocket hijacking) and CORS (preflight answered, the allowed
   origin echoed, no credentials: Folio's tokens are never ambient),
3. the route's ``Rule`` (``rules.match``): a JSON route refuses any other
   Content-Type (415),
4. authentication (bearer token from ``Authorization``, or ``?token=`` on
   WebSocket and event-stream routes only: 401 saying so on any other) and the
   authorization verdict (``Guard``): 401 / 403 as a JSON reason, or a refused
   WebSocket upgrade with the same status,
5. for a token with an expiry: an open WebSocket is closed (4401) and an event
   stream or long-poll ended when it expires; a WebSocket or event stream whose
   role loses its right (a grant revoked, an admin role removed) is closed (4403)
   within ``RECHECK_S``,
6. browser headers on every response (nosniff, CSP, frame-ancestors, no referrer).
Rules: docs/decisions/0009-security-model.md. The caller's identity is left in
``scope["folio.identity"]`` for handlers that authorize further resources
(dead-letter topics, ``require``). In open mode (no token rules, loopback only)
steps 4-5 are skipped, steps 1-3 and 6 still apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CollectorRegistry, Counter
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordination.errors import CoordinationError
from gateway.api.errors import reason_response
from gateway.broker.dead_letters import letter_topics
from gateway.names import InvalidName, TopicName
from gateway.quotas import Quota, refused
from gateway.security import rules
from gateway.security.guard import Guard
from gateway.security.policy import Need, Verdict, is_superuser
from gateway.security.tokens import AuthFailed, Identity, bearer

log = logging.getLogger(__name__)

REFUSED = Counter(
    "folio_gateway_security_refused",
    "Requests and WebSocket handshakes the security layer refused, by code",
    ["code"],
    registry=CollectorRegistry(),  # shown in each gateway's registry (``gateway.api.app``)
)


def role_of(scope: Scope) -> str | None:
    """The authenticated caller's role (None in open mode or for a public route)."""
    identity: Identity | None = scope.get(IDENTITY)
    return identity.role if identity is not None else None


IDENTITY = "folio.identity"
MAY_RETRY = "folio.may_retry"  # a consumer's caller may produce to its retry topic
SESSION_SLOT = "folio.session_slot"  # gives the session's per-role slot back (a relayed session)
EXPIRED_CLOSE = 4401
CLOSE_GRACE_S = 10.0  # a closed session's handler has this long to return
REVOKED_CLOSE = 4403
RECHECK_S = 5.0  # a long-lived session's right is checked again this often
CORS_MAX_AGE_S = 600
CORS_HEADERS = "Authorization, Content-Type"
CORS_METHODS = "GET, HEAD, POST, PUT, DELETE"
_DOCS = ("/docs", "/redoc")
CSP = (
    "default-src 'self'; connect-src 'self'{peers}; img-src 'self' data:;"
    " style-src 'self' 'unsafe-inline'; script-src 'self'; object-src 'none';"
    " base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_BROWSER_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


def _origin_netloc(origin: str) -> str | None:
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None  # "null", file:, opaque origins
    return parts.netloc.lower()


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        websocket = scope["type"] == "websocket"
        headers = Headers(scope=scope)
        config = self.guard.config
        host = headers.get("host", "")
        if "*" not in config.allowed_hosts and _host_name(host) not in config.allowed_hosts:
            await self._refuse(scope, receive, send, 421, "host not served here", "invalid_host")
            return
        origin = headers.get("origin")
        cors = False
        if origin is not None:
            netloc = _origin_netloc(origin)
            same = netloc is not None and netloc == host.lower()
            cors = not same and self.guard.origin_allowed(origin)
            if not same and not cors:
                await self._refuse(scope, receive, send, 403, "origin not allowed", "origin_not_allowed")
                return
        method = "GET" if websocket else scope["method"]
        if method == "OPTIONS" and cors and "access-control-request-method" in headers:
            await self._preflight(origin or "", scope, receive, send)
            return
        template, rule, params = rules.match(method, scope["path"])
        if websocket:
            params = {k: unquote(v) for k, v in params.items()}  # as the WebSocket handlers decode
        if rule.json_body and _has_body(headers) and not _is_json(headers.get("content-type", "")):
            await self._refuse(
                scope, receive, send, 415, "expected Content-Type: application/json", "bad_media"
            )
            return
        identity: Identity | None = None
        if not config.open:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            streaming = websocket or scope["path"].endswith("/stream")  # ?token= only there
            unusable: AuthFailed | None = None  # a token sent where or how it is not taken
            try:
                token = bearer(
                    headers.get("authorization"), (query.get("token") or [None])[0], query_allowed=streaming
                )
            except AuthFailed as exc:
                token, unusable = None, exc
            client = str((scope.get("client") or ("?",))[0])
            if token is not None or rule.need is not Need.PUBLIC:
                if self.guard.failures.blocked(client, self.guard.now_s()):
                    reason = "too many failed authentications from this address; try again later"
                    await self._refuse(scope, receive, send, 429, reason, "auth_throttled")
                    return
                try:
                    if unusable is not None:
                        raise unusable
                    identity = self.guard.authenticate(token)
                except AuthFailed as exc:
                    if token is not None:  # a missing token is no guess
                        self.guard.failures.failed(client, self.guard.now_s())
                    if rule.need is not Need.PUBLIC:
                        await self._refuse(scope, receive, send, 401, str(exc), "unauthenticated")
                        return
            topic = _topic_of(scope["path"], params)
            try:
                verdict = await self.guard.authorize(
                    rule.need, identity, params.get("tenant"), params.get("namespace"), topic
                )
                if verdict is Verdict.ALLOW and rule.letters and topic is not None:
                    verdict = await self._letters_allowed(rule.letters, identity, topic, params, query)
                    if websocket:  # reconsumeLater publishes to the retry topic
                        retry = letter_topics(topic, params.get("subscription", ""))[0]
                        allowed = await self.guard.authorize(
                            Need.PRODUCE, identity, retry.tenant, retry.namespace, retry
                        )
                        scope[MAY_RETRY] = allowed is Verdict.ALLOW
            except CoordinationError:
                await self._refuse(scope, receive, send, 503, "metadata store unavailable", "unavailable")
                return
            if verdict is not Verdict.ALLOW:
                status = verdict.value
                reason = "authentication required" if status == 401 else "not authorized"
                code = "unauthenticated" if status == 401 else "forbidden"
                await self._refuse(scope, receive, send, status, reason, code)
                return
            scope[IDENTITY] = identity
        del template
        if not websocket:
            send = self._with_headers(send, scope["path"], origin if cors else None)
        session = identity is not None and (websocket or scope["path"].endswith("/stream"))
        if session:
            assert identity is not None
            if not self.guard.sessions.open(identity.role):
                refused(Quota.SESSIONS_PER_ROLE)
                reason = (
                    f"role {identity.role} has {self.guard.sessions.per_role} sessions open (its maximum)"
                )
                await self._refuse(scope, receive, send, 429, reason, "too_many_sessions")
                return
            recheck = None
            if not is_superuser(identity, config.superusers):

                async def recheck() -> bool:
                    tenant, namespace = params.get("tenant"), params.get("namespace")
                    verdict = await self.guard.authorize(
                        rule.need, identity, tenant, namespace, _topic_of(scope["path"], params)
                    )
                    return verdict is Verdict.ALLOW

            held = [True]

            def release() -> None:  # once: by the relay (the owner counts the session), or at the end
                if held[0]:
                    held[0] = False
                    self.guard.sessions.close(identity.role)

            scope[SESSION_SLOT] = release
            try:
                await self._serve(scope, receive, send, Watch(self.guard, identity, recheck))
            finally:
                release()
            return
        await self._serve(scope, receive, send, Watch(self.guard, identity, None))

    async def _serve(self, scope: Scope, receive: Receive, send: Send, watch: Watch) -> None:
        if not watch.active:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._session_watched(scope, receive, send, watch)
        else:
            await self._respond_watched(scope, receive, send, watch)

    async def _letters_allowed(
        self,
        letters: rules.Letters,
        identity: Identity | None,
        topic: TopicName,
        params: dict[str, str],
        query: dict[str, list[str]],
    ) -> Verdict:
        """A consumer's (or webhook's) dead letters go where its caller may produce (never
        with the gateway's own authority): the consumer's named ``deadLetterTopic``, else
        the default one (``dead_letters.letter_topics``) once ``maxRedeliverCount`` is set; a
        webhook's default one always (a named one is checked by its handler)."""
        named = query.get("deadLetterTopic", [""])[0] if letters is rules.Letters.CONSUMER else ""
        if named:
            try:
                target = TopicName.parse(named)
            except InvalidName:
                return Verdict.ALLOW  # the handler answers 400 for the bad name
            return await self.guard.authorize(Need.PRODUCE, identity, target.tenant, target.namespace, target)
        count = (query.get("maxRedeliverCount") or ["0"])[0]
        if count.strip() not in ("", "0") or letters is rules.Letters.WEBHOOK:
            dlq = letter_topics(topic, params.get("subscription", ""))[1]
            return await self.guard.authorize(Need.PRODUCE, identity, dlq.tenant, dlq.namespace, dlq)
        return Verdict.ALLOW

    # ------------------------------------------------------------ answers

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, reason: str, code: str
    ) -> None:
        REFUSED.labels(code).inc()
        response = reason_response(status, reason, code)
        if scope["type"] == "websocket":
            message = await receive()  # websocket.connect
            if message["type"] == "websocket.connect":
                await _deny_websocket(send, response)
            return
        await response(scope, receive, self._with_headers(send, scope["path"], None))

    async def _preflight(self, origin: str, scope: Scope, receive: Receive, send: Send) -> None:
        response = Response(
            status_code=204,
            headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": CORS_METHODS,
                "Access-Control-Allow-Headers": CORS_HEADERS,
                "Access-Control-Max-Age": str(CORS_MAX_AGE_S),
                "Vary": "Origin",
            },
        )
        await response(scope, receive, send)

    def _csp(self) -> str:
        """The dashboard may talk to the cluster's other gateways (it moves to a live one)."""
        peers = self.guard.peer_origins()
        sockets = [p.replace("http", "ws", 1) for p in peers]
        return CSP.format(peers="".join(f" {p}" for p in (*peers, *sockets)))

    def _with_headers(self, send: Send, path: str, cors_origin: str | None) -> Send:
        extra = list(_BROWSER_HEADERS)
        if not path.startswith(_DOCS):  # the API explorer pages load their scripts elsewhere
            extra.append((b"content-security-policy", self._csp().encode()))
        if cors_origin is not None:
            extra += [
                (b"access-control-allow-origin", cors_origin.encode("latin-1")),
                (b"access-control-expose-headers", b"X-Total-Count"),
                (b"vary", b"Origin"),
            ]

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        return wrapped

    async def _session_watched(self, scope: Scope, receive: Receive, send: Send, watch: Watch) -> None:
        """Run a WebSocket session; once the token expires (4401) or the role lost its right
        (4403), close the socket. The handler then sees its connection end, whether it
        reads through ``receive`` or, once accepted, from the frame inbox below ASGI
        (``api/ws_server.py``), and returns; one that does not within ``CLOSE_GRACE_S``
        is cancelled."""
        task = asyncio.ensure_future(self.app(scope, receive, send))
        end = await watch.outlived(task)
        if end is None:
            return
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": end[0], "reason": end[1]})
        done, _ = await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    async def _respond_watched(self, scope: Scope, receive: Receive, send: Send, watch: Watch) -> None:
        """Run an HTTP request, cut off when the token expires or the role loses its
        right: an event stream or a long-poll still open then is ended (cleanly)."""
        state = {"started": False, "ended": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["ended"] = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, tracked))
        end = await watch.outlived(task)
        if end is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if not state["started"]:
            status = end[0] - 4000
            code = "unauthenticated" if status == 401 else "forbidden"
            await reason_response(status, end[1], code)(scope, receive, send)
        elif not state["ended"]:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class Watch:
    """When a long-lived request must end: its token's expiry (4401) and, every
    ``RECHECK_S``, its role's right to what it opened, checked again (4403)."""

    def __init__(
        self, guard: Guard, identity: Identity | None, recheck: Callable[[], Awaitable[bool]] | None
    ) -> None:
        self._guard = guard
        self._expires = identity.expires_s if identity is not None else None
        self._recheck = recheck
        self._next = guard.now_s() + RECHECK_S

    @property
    def active(self) -> bool:
        return self._expires is not None or self._recheck is not None

    def wait_s(self) -> float:
        wake = self._next if self._recheck is not None else float("inf")
        if self._expires is not None:
            wake = min(wake, self._expires)
        return max(0.0, wake - self._guard.now_s())

    async def outlived(self, task: asyncio.Future[None]) -> tuple[int, str] | None:
        """Wait for ``task`` (a request or session) until this watch ends it: None when
        the task finished first (its exception, if any, raised here), else the close
        code and reason it must end with."""
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.wait_s())
            if done:
                task.result()
                return None
            end = await self.check()
            if end is not None:
                return end

    async def check(self) -> tuple[int, str] | None:
        now = self._guard.now_s()
        if self._expires is not None and now >= self._expires:
            return EXPIRED_CLOSE, "token expired"
        if self._recheck is not None and now >= self._next:
            self._next = now + RECHECK_S
            try:
                allowed = await self._recheck()
            except CoordinationError:
                allowed = True  # the metadata store is away: keep serving, check again later
            if not allowed:
                return REVOKED_CLOSE, "not authorized any more"
        return None


def _topic_of(path: str, params: dict[str, str]) -> TopicName | None:
    """The topic a route names (its base's grants count), or None (no topic, or a bad
    name: the handler answers that)."""
    local = params.get("topic")
    if local is None or "tenant" not in params or "namespace" not in params:
        return None
    domain = params.get("domain") or (
        "non-persistent" if path.startswith("/admin/v2/non-persistent/") else "persistent"
    )
    try:
        return TopicName.of(domain, params["tenant"], params["namespace"], local)
    except InvalidName:
        return None


def _has_body(headers: Headers) -> bool:
    return headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def _deny_websocket(send: Send, response: Response) -> None:
    await send(
        {
            "type": "websocket.http.response.start",
            "status": response.status_code,
            "headers": response.raw_headers,
        }
    )
    await send({"type": "websocket.http.response.body", "body": response.body, "more_body": False})


def install(app: Any, guard: Guard) -> None:
    """Wrap the app (outermost, so WebSocket fast paths are covered too)."""
    app.add_middleware(SecurityMiddleware, guard=guard)
