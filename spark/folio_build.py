"""The project's build backend: setuptools' own, plus one path-configuration file.

Owns: ``build_wheel`` and ``build_editable``, which add ``folio-spark.pth`` to the
wheel setuptools built (every other hook is setuptools'). Rules
(docs/decisions/0015-spark-discovery.md): Spark finds the ``folio`` format by
scanning the Python path of its Python workers for top-level ``pyspark_*``
modules, and starts those workers with ``python3`` from PATH unless
``PYSPARK_PYTHON`` says otherwise. The file makes both hold in the environment
Folio is installed into, whether or not it is activated:
- a line ``import ...`` sets ``PYSPARK_PYTHON`` to the interpreter that starts,
  only when the variable is unset (the user's choice wins), so Spark's workers run
  the same interpreter as the driver and see what it sees;
- for ``pip install -e .`` only, a line with the absolute path of ``spark/``:
  setuptools maps an editable flat layout with an import hook that Python's
  module scan (pkgutil.iter_modules, what Spark uses) cannot see; a plain path
  entry can. ``pip install .`` copies ``pyspark_folio`` into site-packages.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # the hooks this backend does not change
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

PTH = "folio-spark.pth"
WORKER_PYTHON = "import os, sys; os.environ.setdefault('PYSPARK_PYTHON', sys.executable)\n"
SPARK_DIR = Path(__file__).resolve().parent

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name: str = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_file(Path(wheel_directory, name), PTH, WORKER_PYTHON.encode())
    return name


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_file(Path(wheel_directory, name), PTH, f"{SPARK_DIR}\n{WORKER_PYTHON}".encode())
    return name


def add_file(wheel: Path, name: str, data: bytes) -> None:
    """Add ``name`` at the root of ``wheel`` and list it in the wheel's RECORD."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rebuilt = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(rebuilt, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            content = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                content += f"{name},sha256={digest},{len(data)}\n".encode()
            target.writestr(item, content)
        target.writestr(name, data)
    os.replace(rebuilt, wheel)
