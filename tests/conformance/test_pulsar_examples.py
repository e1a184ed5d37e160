"""Pulsar's documented WebSocket clients, run unchanged against a real Folio cluster.

``examples/`` holds the Python (``websocket-client``) and Node.js (``ws``)
producer, consumer and reader programs of Pulsar's WebSocket API
documentation, as published. The test changes only their address
(``localhost:8080`` -> a gateway; ``?subscriptionType=...`` added to the
consumer URL) and their topic and subscription names, runs each as its own
process, and reads what it prints. One cluster (etcd, 3 storage nodes, 2
gateways) serves the module; consumers connect through one gateway and
producers through the other.

What each test shows: the documented consumer loop (``msg['payload']`` on the
first frame, then an ack of ``msg['messageId']``) survives every
subscription type - it crashed on Failover and Key_Shared while Folio sent
notice frames unasked; the documented Python producer's ``"context": 5`` is
published and answered ``ok``; the acks the programs send are applied (the
subscription's backlog drains to 0). And Pulsar's REST producer example, a
curl command whose body carries a JSON ``valueSchema``, is stored (it was
refused with 400 before Folio had a schema registry).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import websocket

# the cluster helpers of the component tests, driven from synchronous code as the browser tests do
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from dashkit import DashCluster

pytestmark = pytest.mark.component

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "examples"
NODE_MODULES = HERE / "node_modules"
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
LANGUAGES = ("python", "node")
_names = itertools.count()
_clusters = itertools.count(1)
_run_dir: list[Path] = []  # where the address-changed copies of the examples are written


@pytest.fixture(scope="module")
def cluster(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashCluster]:
    _run_dir[:] = [tmp_path_factory.mktemp("programs")]
    namespace = f"/conformance-{os.getpid()}-{next(_clusters):04d}"
    made = DashCluster.started(etcd_endpoint, namespace, tmp_path_factory.mktemp("conformance"), 3, 2)
    try:
        yield made
    finally:
        made.stop()


def program(name: str, address: str, topic: str, sub: str = "my-sub", query: str = "") -> Path:
    """The documented example ``name`` with only its address, topic and subscription changed."""
    text = (EXAMPLES / name).read_text()
    assert "localhost:8080" in text and "my-topic" in text
    text = text.replace("localhost:8080", address)
    text = text.replace("/my-topic/my-sub", f"/{topic}/{sub}{query}").replace("/my-topic", f"/{topic}")
    out = _run_dir[0] / f"{next(_names)}-{name}"
    out.write_text(text)
    return out


def command(path: Path) -> list[str]:
    if path.suffix == ".py":
        return [sys.executable, str(path)]
    node = shutil.which("node")
    assert node, "node is not installed (make test installs it)"
    assert (NODE_MODULES / "ws").is_dir(), "tests/conformance/node_modules/ws is missing: run `make npm`"
    return [node, str(path)]


class Running:
    """A client program as a process; its stdout lines are collected as they come."""

    def __init__(self, path: Path) -> None:
        env = {**os.environ, "NODE_PATH": str(NODE_MODULES), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            command(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=HERE
        )
        self.lines: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def poll_lines(self) -> list[str]:
        return list(self.lines)

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 20.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            matched = [line for line in self.poll_lines() if re.search(pattern, line)]
            if len(matched) >= count:
                return matched
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(
            f"wanted {count} lines matching {pattern!r}; exit {self.proc.poll()}; stdout {self.lines}; "
            f"stderr {self.stop()}"
        )

    def stop(self) -> str:
        """End the program (by its pid) and return what it wrote to stderr."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def run_to_end(path: Path, timeout: float = 30.0) -> str:
    done = subprocess.run(
        command(path),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def address(cluster: DashCluster, index: int) -> str:
    return cluster.urls[index].removeprefix("http://")


def consumers_of(cluster: DashCluster, topic: str, sub: str) -> int:
    url = f"{cluster.urls[0]}/admin/v2/persistent/public/default/{topic}/stats"
    response = httpx.get(url, timeout=10, follow_redirects=True)
    if response.status_code != 200:
        return 0
    return len(response.json().get("subscriptions", {}).get(sub, {}).get("consumers", []))


def attached_readers(cluster: DashCluster, topic: str) -> int:
    """Readers attached to ``topic``, as its owner's stats list them (``reader-*`` subscriptions)."""
    url = f"{cluster.urls[0]}/admin/v2/persistent/public/default/{topic}/stats"
    response = httpx.get(url, timeout=10, follow_redirects=True)
    if response.status_code != 200:
        return 0
    subscriptions = response.json().get("subscriptions", {})
    return sum(len(s.get("consumers", [])) for name, s in subscriptions.items() if name.startswith("reader-"))


def backlog_of(cluster: DashCluster, topic: str, sub: str) -> int:
    url = f"{cluster.urls[0]}/admin/v2/persistent/public/default/{topic}/stats"
    stats = httpx.get(url, timeout=10, follow_redirects=True).json()
    return int(stats["subscriptions"][sub]["msgBacklog"])


def eventually(
    check: Callable[[], bool], client: Running, explain: Callable[[], str] = lambda: "", timeout: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(
        f"not true within {timeout} s; client stdout {client.lines}, stderr {client.stop()}; {explain()}"
    )


def handshake_answer(cluster: DashCluster, topic: str, query: str) -> Callable[[], str]:
    """For a failure message: what a consumer handshake on another subscription is answered
    now (a refused handshake's status and reason, which the example programs do not print)."""

    def answer() -> str:
        url = f"ws://{address(cluster, 0)}/ws/v2/consumer/persistent/public/default/{topic}/probe{query}"
        try:
            websocket.create_connection(url, timeout=10).close()
        except websocket.WebSocketBadStatusException as exc:
            return f"a handshake now: {exc.status_code} {exc.resp_body!r}"
        except Exception as exc:
            return f"a handshake now: {exc!r}"
        return "a handshake now: accepted"

    return answer


def produce(cluster: DashCluster, language: str, topic: str, count: int) -> None:
    """Run the documented producer ``count`` times through gateway 1."""
    for _ in range(count):
        if language == "python":
            assert "Message published successfully" in run_to_end(
                program("producer.py", address(cluster, 1), topic)
            )
        else:
            node = Running(program("producer.js", address(cluster, 1), topic))
            try:
                (ack,) = node.wait_for("received ack: ")
            finally:
                node.stop()
            assert '"result":"ok"' in ack and '"context":"1"' in ack, ack


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("subscription_type", SUBSCRIPTION_TYPES)
def test_documented_consumer_and_producer(
    cluster: DashCluster, subscription_type: str, language: str
) -> None:
    topic = f"docs-{language}-{subscription_type.lower()}"
    sub = "my-sub"
    suffix = ".py" if language == "python" else ".js"
    query = f"?subscriptionType={subscription_type}"
    consumer = Running(program(f"consumer{suffix}", address(cluster, 0), topic, sub, query))
    try:
        # the default position is Latest: produce once the consumer is attached
        attached = handshake_answer(cluster, topic, query)
        eventually(lambda: consumers_of(cluster, topic, sub) == 1, consumer, attached)
        produce(cluster, language, topic, 3)
        received = consumer.wait_for(r"^Received: .* - payload: (b'Hello World'|Hello World)$", 3)
        assert len(received) == 3, received
        assert consumer.proc.poll() is None, "the documented consumer loop ended"
        eventually(lambda: backlog_of(cluster, topic, sub) == 0, consumer)  # its acks were applied
    finally:
        err = consumer.stop()
    assert "Traceback" not in err and "SyntaxError" not in err and "TypeError" not in err, err


@pytest.mark.parametrize("language", LANGUAGES)
def test_documented_reader(cluster: DashCluster, language: str) -> None:
    topic = f"docs-reader-{language}"
    suffix = ".py" if language == "python" else ".js"
    produce(cluster, "python", topic, 1)  # the topic exists; the reader starts after this (latest)
    reader = Running(program(f"reader{suffix}", address(cluster, 0), topic))
    try:
        # the documented reader starts at the latest message: produce once it is attached at the owner
        eventually(lambda: attached_readers(cluster, topic) == 1, reader)
        produce(cluster, language, topic, 2)
        received = reader.wait_for(r"^Received: .* - payload: (b'Hello World'|Hello World)$", 2)
        assert len(received) == 2, received
        assert reader.proc.poll() is None
    finally:
        err = reader.stop()
    assert "Traceback" not in err, err


def test_documented_python_producer_context_is_echoed_as_text(cluster: DashCluster) -> None:
    """Pulsar's documented producer sends ``"context": 5``; the reply echoes ``"5"``."""

    ws = websocket.create_connection(
        f"ws://{address(cluster, 1)}/ws/v2/producer/persistent/public/default/docs-context"
    )
    try:
        ws.send(json.dumps({"payload": base64.b64encode(b"x").decode(), "context": 5}))
        reply = json.loads(ws.recv())
    finally:
        ws.close()
    assert reply["result"] == "ok" and reply["context"] == "5" and reply["errorCode"] == 0, reply


def test_documented_rest_producer_with_value_schema(cluster: DashCluster) -> None:
    """Pulsar's REST producer example - a curl command whose body carries a JSON
    ``valueSchema`` - run with only its address and topic changed. The topic must exist
    first (Pulsar's REST producer publishes only to existing topics)."""
    curl = shutil.which("curl")
    assert curl, "curl is not installed"
    topic = "docs-rest-producer"
    created = httpx.put(f"{cluster.urls[1]}/admin/v2/persistent/public/default/{topic}", timeout=10)
    assert created.status_code == 204, created.text
    script = program("rest-producer.sh", address(cluster, 0), topic)
    text = script.read_text().replace("/my-tenant/my-namespace/", "/public/default/")
    script.write_text(text)
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["messagePublishResults"][0]["errorCode"] == 0, reply
    assert reply["schemaVersion"] == 0, reply
    peeked = httpx.get(
        f"{cluster.urls[1]}/admin/v2/persistent/public/default/{topic}/examinemessage",
        params={"initialPosition": "earliest", "messagePosition": 1},
        timeout=10,
    )
    assert peeked.status_code == 200, peeked.text
    assert json.loads(peeked.content) == {"brand": "dell", "model": "alienware", "year": 2021}
    assert peeked.headers["X-Pulsar-partition-key"] == "my-key"
    assert peeked.headers["X-Pulsar-schema-version"] == "0"
    schema = httpx.get(f"{cluster.urls[0]}/admin/v2/schemas/public/default/{topic}/schema", timeout=10).json()
    assert schema["type"] == "JSON" and json.loads(schema["data"])["name"] == "PC"
