"""What compose.yaml and the Dockerfile ask for, as processes this machine can start.

Owns: reading the Dockerfile (base image, ENV, USER, VOLUME, EXPOSE, COPY, ENTRYPOINT)
and compose.yaml (services, their command/entrypoint/user/environment/volumes,
depends_on, restart, ports), and turning each service into a ``ServiceRun``: the argv
its container would run - the image's entrypoint + the service's command, split as
compose splits a string command - with only the mount paths rewritten to per-service
host directories (named volumes shared by name, the image's anonymous VOLUME one per
service), and the order ``depends_on`` imposes. Rule: nothing here starts anything;
every other word of a command is the file's own, so a wrong flag fails the topology.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FOLIO_IMAGE = "folio"  # services with `build: .` run the Dockerfile's image


@dataclass(frozen=True)
class Image:
    base: str
    entrypoint: tuple[str, ...]
    user: str
    env: dict[str, str]
    volumes: tuple[str, ...]
    expose: frozenset[int]
    copies: tuple[tuple[str, ...], ...]  # (sources..., destination) of each COPY
    run: str  # every RUN, joined


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _words(value: str) -> list[str]:
    return list(json.loads(value)) if value.startswith("[") else shlex.split(value)


def read_dockerfile(path: Path) -> Image:
    base, user = "", "root"
    entrypoint: tuple[str, ...] = ()
    env: dict[str, str] = {}
    volumes: list[str] = []
    expose: set[int] = set()
    copies: list[tuple[str, ...]] = []
    runs: list[str] = []
    for word, rest in _instructions(path.read_text()):
        if word == "FROM":
            base = rest.split()[0]
        elif word == "ENV":
            env.update(part.split("=", 1) for part in shlex.split(rest))  # type: ignore[misc]
        elif word == "USER":
            user = rest
        elif word == "VOLUME":
            volumes += _words(rest)
        elif word == "EXPOSE":
            expose |= {int(p.split("/")[0]) for p in rest.split()}
        elif word == "COPY":
            copies.append(tuple(w for w in _words(rest) if not w.startswith("--")))
        elif word == "ENTRYPOINT":
            entrypoint = tuple(_words(rest))
        elif word == "RUN":
            runs.append(rest)
    return Image(
        base, entrypoint, user, env, tuple(volumes), frozenset(expose), tuple(copies), " ; ".join(runs)
    )


@dataclass
class ServiceRun:
    name: str
    image: str  # FOLIO_IMAGE or the compose `image:`
    argv: list[str]
    env: dict[str, str]
    user: str
    mounts: dict[str, Path]  # container path -> host directory
    depends_on: dict[str, str]  # service -> condition
    restart: str
    ports: list[str] = field(default_factory=list)
    read_only: frozenset[str] = frozenset()  # mount targets compose mounts `:ro`


def load_compose(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())  # anchors and `<<` merge keys as compose reads them
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict), f"{path}: no services"
    return doc


def _command(value: Any) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def rewrite(text: str, mounts: dict[str, Path]) -> str:
    """``text`` with every mount path (as a whole path prefix) replaced by its host dir."""
    for target in sorted(mounts, key=len, reverse=True):
        pattern = r"(?<![\w./-])" + re.escape(target) + r"(?=/|$|[\s;:,'\"])"
        text = re.sub(pattern, str(mounts[target]).replace("\\", "\\\\"), text)
    return text


def _mounts(
    name: str, spec: dict[str, Any], doc: dict[str, Any], image: Image | None, root: Path
) -> dict[str, Path]:
    named = doc.get("volumes") or {}
    mounts: dict[str, Path] = {}
    for entry in spec.get("volumes") or []:
        source, target, *_mode = str(entry).split(":")
        assert source in named, f"{name}: volume {source!r} is not a named volume of compose.yaml"
        mounts[target] = root / "volumes" / source
    for target in image.volumes if image else ():
        mounts.setdefault(target, root / "anonymous" / name / target.strip("/").replace("/", "_"))
    return mounts


def service_runs(doc: dict[str, Any], image: Image, root: Path) -> list[ServiceRun]:
    """Every service of ``doc`` in an order that honours ``depends_on``."""
    runs: dict[str, ServiceRun] = {}
    for name, spec in doc["services"].items():
        built = "build" in spec
        mounts = _mounts(name, spec, doc, image if built else None, root)
        if built:
            entry = _command(spec["entrypoint"]) if "entrypoint" in spec else list(image.entrypoint)
            env = dict(image.env)
        else:
            entry, env = _command(spec.get("entrypoint")), {}
        env.update({str(k): rewrite(str(v), mounts) for k, v in (spec.get("environment") or {}).items()})
        argv = [rewrite(word, mounts) for word in entry + _command(spec.get("command"))]
        depends = spec.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {d: {"condition": "service_started"} for d in depends}
        runs[name] = ServiceRun(
            name=name,
            image=FOLIO_IMAGE if built else str(spec["image"]),
            argv=argv,
            env=env,
            user=str(spec.get("user") or (image.user if built else "root")),
            mounts=mounts,
            depends_on={d: str(c.get("condition", "service_started")) for d, c in depends.items()},
            restart=str(spec.get("restart", "no")),
            ports=[str(p) for p in spec.get("ports") or []],
            read_only=frozenset(
                str(v).split(":")[1] for v in spec.get("volumes") or [] if str(v).split(":")[2:] == ["ro"]
            ),
        )
    ordered: list[ServiceRun] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name in runs, f"depends_on names an unknown service {name!r}"
        assert name not in path, f"depends_on cycle: {[*path, name]}"
        if runs[name] not in ordered:
            for dep in runs[name].depends_on:
                visit(dep, (*path, name))
            ordered.append(runs[name])

    for name in runs:
        visit(name, ())
    return ordered


def flag(argv: list[str], name: str) -> str | None:
    """The value of ``--name V`` in ``argv`` (None when absent)."""
    return argv[argv.index(name) + 1] if name in argv else None
