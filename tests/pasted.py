"""Docs' code blocks, run as a reader would paste them (the README tour and the guide).

Owns: ``code_blocks`` / ``code_block`` (the fenced blocks of a page after a heading)
and ``run_pasted`` (a shell block run by bash against a test cluster: the
documented gateway addresses ``127.0.0.1:8080``, ``:8081`` … swapped for the
cluster's, ``.venv/bin/python`` for this interpreter, and ``curl`` made to fail
loudly). Rule: nothing else of a block changes, so a block that passes here works
as printed on the cluster `make run` starts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def code_blocks(page: Path, after: str = "", fence: str = "sh") -> list[str]:
    """The ``fence`` blocks of ``page`` after the text ``after`` (a heading), in order."""
    text = page.read_text()
    section = text[text.index(after) :] if after else text
    return re.findall(rf"```{fence}\n(.*?)```", section, re.S)


def code_block(after: str, fence: str = "sh", page: Path = README) -> str:
    """The first ``fence`` block of ``page`` after the text ``after``."""
    blocks = code_blocks(page, after, fence)
    assert blocks, f"no {fence} block under {after!r} in {page.name}"
    return blocks[0]


def run_pasted(urls: Sequence[str], script: str, cwd: Path, timeout_s: float, curl_max_s: int = 30) -> str:
    """``script`` run by ``bash -e`` in ``cwd`` against the gateways at ``urls``; its output."""
    for index, url in enumerate(urls):
        script = script.replace(f"127.0.0.1:{8080 + index}", url.removeprefix("http://"))
    script = script.replace(".venv/bin/python", sys.executable)
    prelude = f'curl() {{ command curl -sS --fail-with-body --max-time {curl_max_s} "$@"; }}\n'
    done = subprocess.run(
        ["bash", "-e", "-c", prelude + script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout
