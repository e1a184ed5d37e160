"""A user's own PySpark script finds the ``folio`` format after a plain pip install.

Each test makes a fresh virtual environment, installs the project into it with
pip (``pip install -e .`` from this checkout, or ``pip install .`` from a copy of
it), then runs a script with that environment's python - not activated, with no
``PYSPARK_PYTHON``, ``PYTHONPATH`` or ``VIRTUAL_ENV`` and with this interpreter's
directory off PATH, so Spark's workers would start ``python3`` from PATH if the
install did not say otherwise - that reads a topic of the real cluster with
``spark.read.format("folio")`` and no registration call. The dependencies
(pyspark, pyarrow, ...) are this interpreter's, linked into the environment
through a path entry, so nothing is downloaded but the build's setuptools (pip's
cache); the project itself is never on that path. Measured: the two tests
took 262 s together on this 2-core box while it ran other work (load average
near 12); pip's install is ~7 s of CPU, the rest is the Spark session's start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from publish import Sent, publish

pytestmark = [pytest.mark.component, pytest.mark.install]

ROOT = Path(__file__).resolve().parents[2]
OURS = ("coordination", "storage", "gateway", "web_ui", "folio", "folio_analytics", "pyspark_folio")
TOPIC = "persistent://public/default/install-read"
SCRIPT = """
import sys
from pyspark.sql import SparkSession

etcd, namespace, topic = sys.argv[1:4]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .getOrCreate()
)
df = spark.read.format("folio").option("etcd", etcd).option("etcdNamespace", namespace)
rows = df.option("topic", topic).load().orderBy("entry_id", "batch_index").collect()
print("READ", len(rows), b"|".join(bytes(r.value) for r in rows).decode())
spark.stop()
"""


def _foreign(name: str) -> bool:
    """Whether a site-packages entry is a dependency, not the project or a path file."""
    stem = name.split("-", maxsplit=1)[0].split(".", maxsplit=1)[0]
    return not (stem in OURS or name.endswith(".pth") or name.startswith("__editable__"))


@pytest.fixture(scope="module")
def dependencies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This interpreter's installed packages without the project, as links."""
    linked = tmp_path_factory.mktemp("deps")
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if _foreign(entry.name):
            (linked / entry.name).symlink_to(entry)
    return linked


@pytest.fixture(scope="module")
def topic(folio) -> Iterator[str]:
    publish(folio.gateways[0].http_url, TOPIC, [Sent(TOPIC, None, f"m{i}".encode()) for i in range(5)])
    yield TOPIC


def _venv(where: Path, dependencies: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(f"{dependencies}\n")
    return python


def _pip_install(python: Path, *args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
        cwd=cwd,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _plain_env() -> dict[str, str]:
    """The environment of a shell where no virtual environment is activated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK") and k != "VIRTUAL_ENV"}
    env.pop("PYTHONPATH", None)
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != here)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _read_with(python: Path, folio, topic: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    script = tmp / "read_topic.py"
    script.write_text(SCRIPT)
    return subprocess.run(
        [str(python), str(script), folio.ledgers.endpoint, folio.ledgers.namespace, topic],
        cwd=tmp,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _check(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert "READ 5 m0|m1|m2|m3|m4" in done.stdout, done.stdout + done.stderr[-3000:]


def test_editable_install_finds_the_format(folio, topic, dependencies, tmp_path):
    python = _venv(tmp_path / "venv", dependencies)
    _pip_install(python, "-e", ".", cwd=ROOT)
    _check(_read_with(python, folio, topic, tmp_path))


def test_regular_install_finds_the_format(folio, topic, dependencies, tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT,
        copy,
        ignore=shutil.ignore_patterns(".git", ".venv", "node_modules", ".folio*", "__pycache__", "build"),
    )
    python = _venv(tmp_path / "venv", dependencies)
    _pip_install(python, ".", cwd=copy)
    _check(_read_with(python, folio, topic, tmp_path))
