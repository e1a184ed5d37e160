"""Gateways serving HTTPS and WSS (real processes, a test CA and a certificate for 127.0.0.1).

Two gateways with ``--tls-cert/--tls-key`` and ``--tls-ca``: health answers over
HTTPS to a client trusting the CA, a plain-HTTP request to the same port gets
no HTTP answer and a client that does not trust the CA is refused; a publish through
each gateway succeeds (one forwards to the owner over HTTPS, verifying its
certificate) and WSS consumers on both gateways (one relayed over WSS) receive it;
lookup names the TLS URLs.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import orjson
import pytest
import websockets
from clusters import MessagingCluster
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

pytestmark = pytest.mark.component


def make_pki(root: Path) -> tuple[Path, Path, Path]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Folio test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = root / "ca.pem", root / "cert.pem", root / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


async def test_https_and_wss(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]], tmp_path: Path
) -> None:
    ca, cert, key = make_pki(tmp_path)
    cluster = await messaging_cluster(gateways=0)
    for _ in range(2):
        await cluster.add_gateway("--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(ca))
    urls = cluster.urls
    assert all(u.startswith("https://127.0.0.1:") for u in urls), urls
    trust = ssl.create_default_context(cafile=str(ca))
    async with httpx.AsyncClient(verify=trust, timeout=30) as http:
        assert (await http.get(f"{urls[0]}/admin/v2/brokers/health")).text == "ok"
        with pytest.raises(httpx.ConnectError):
            await httpx.AsyncClient().get(f"{urls[0]}/admin/v2/brokers/health")  # the CA is not trusted
        with pytest.raises(httpx.HTTPError):
            plain = urls[0].replace("https://", "http://")
            await httpx.AsyncClient().get(f"{plain}/admin/v2/brokers/health")
        wss = [u.replace("https://", "wss://") for u in urls]
        consumers = [
            await websockets.connect(f"{w}/ws/v2/consumer/persistent/public/default/tls/s{i}", ssl=trust)
            for i, w in enumerate(wss)
        ]
        try:
            for i, url in enumerate(urls):
                body = {"messages": [{"payload": f"over-tls-{i}"}]}
                r = await http.post(f"{url}/topics/persistent/public/default/tls", json=body)
                assert r.status_code == 200 and r.json()["messagePublishResults"][0]["messageId"], r.text
            for consumer in consumers:
                got = [orjson.loads(await consumer.recv()) for _ in range(2)]
                assert sorted(base64.b64decode(m["payload"]) for m in got) == [b"over-tls-0", b"over-tls-1"]
        finally:
            for consumer in consumers:
                await consumer.close()
        lookup = (await http.get(f"{urls[1]}/lookup/v2/topic/persistent/public/default/tls")).json()
        assert lookup["httpUrlTls"].startswith("https://") and lookup["brokerUrlTls"].startswith("wss://")
