"""Run a gateway or storage node with a recorder of the source files whose code runs.

Owns: ``python tests/component/path_trace.py <module> <args...>`` (runs ``<module>``
as ``-m`` would, with a profile function on every thread that, while recording,
notes the file of every Python function called or resumed) and ``TracedGateway`` /
``TracedNode`` (the process classes the component tests use, started that way).
Recording is switched by files next to ``FOLIO_PATH_TRACE``: the test creates
``<path>.on`` (the recorder clears its set and deletes the file), does one thing,
then creates ``<path>.off`` (the recorder writes the repository's source files it
saw, one a line, to ``<path>``). A test helper only: nothing in the product
imports it. It backs docs/architecture.md §13, "The path of one message".
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from nodeproc import NodeProcess

from folio.procs import GatewayProcess

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("gateway", "storage", "coordination", "folio")
POLL_S = 0.005
BACKGROUND_THREADS = ("lease-",)
# the process's main coroutine: uvicorn's server loop resumes it every tick (100 ms)
MAIN_COROUTINES = {str(REPO / "gateway" / "main.py"): "serve"}


class TracedGateway(GatewayProcess):
    """A gateway process under the recorder (its ``env`` names ``FOLIO_PATH_TRACE``)."""

    def command(self) -> list[str]:
        return [sys.executable, __file__, *super().command()[2:]]


class TracedNode(NodeProcess):
    """A storage node process under the recorder (likewise)."""

    def command(self) -> list[str]:
        return [sys.executable, __file__, *super().command()[2:]]


def source_files(names: set[str]) -> set[str]:
    """The repository's source files among ``names`` (code object file names), relative."""
    found = set()
    for name in names:
        path = Path(name)
        if not path.is_absolute() or not path.is_relative_to(REPO):
            continue
        relative = path.relative_to(REPO)
        if relative.parts[0] in SOURCE_DIRS:
            found.add(relative.as_posix())
    return found


def _run(module: str, argv: list[str], trace: Path) -> None:
    seen: set[str] = set()
    calls: set[tuple[str, str]] = set()
    recording = False

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if recording and event == "call":
            code = frame.f_code
            if MAIN_COROUTINES.get(code.co_filename) == code.co_qualname:
                return
            seen.add(code.co_filename)
            calls.add((code.co_filename, code.co_qualname))

    def thread_profile(frame: FrameType, event: str, arg: object) -> None:
        # the etcd lease's keep-alive thread runs on its own clock, never on a message's path
        if threading.current_thread().name.startswith(BACKGROUND_THREADS):
            sys.setprofile(None)
            return
        sys.setprofile(profile)
        profile(frame, event, arg)

    def control() -> None:
        nonlocal recording
        on, off = trace.with_suffix(".on"), trace.with_suffix(".off")
        while True:
            if on.exists():
                seen.clear()
                calls.clear()
                recording = True
                on.unlink()
            elif off.exists():
                recording = False
                tmp = trace.with_suffix(".tmp")
                tmp.write_text("".join(f"{f}\n" for f in sorted(source_files(set(seen)))))
                tmp.replace(trace)
                trace.with_suffix(".calls").write_text(
                    "".join(f"{f} {q}\n" for f, q in sorted(calls) if source_files({f}))
                )
                off.unlink()
            time.sleep(POLL_S)

    threading.setprofile(thread_profile)
    sys.setprofile(profile)
    threading.Thread(target=control, daemon=True).start()
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    if sys.argv[1] == "-m":
        del sys.argv[1]
    _run(sys.argv[1], sys.argv[2:], Path(os.environ["FOLIO_PATH_TRACE"]))
