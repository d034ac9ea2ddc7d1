"""Helpers shared by the benchmark scripts: machine description, timing, results files."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"


def machine() -> str:
    """A one-line description of this machine and its accelerator."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    desc = f"{cpu}, {os.cpu_count()} cores"
    try:
        import jax

        dev = jax.devices()[0]
        if dev.platform != "cpu":
            desc += f", {dev.device_kind} ({dev.platform})"
        desc += f", jax {jax.__version__}"
    except Exception:  # noqa: BLE001 - description only
        pass
    return desc


def command() -> str:
    return "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])


def time_repeats(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Wall seconds of `repeats` calls of fn (which must block until its work is done)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def stats(xs: list[float]) -> dict[str, float]:
    return {"min": min(xs), "median": statistics.median(xs), "n": len(xs)}


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def append_results(title: str, table_md: str, notes: str = "") -> None:
    """Append a dated section (machine, command, table) to benchmarks/RESULTS.md."""
    today = _dt.date.today().isoformat()
    head = "" if RESULTS_MD.exists() else "# Benchmark results\n\nEach section is appended by " \
                                          "the script named in its command line.\n"
    section = (f"\n## {title} — {today}\n\n- machine: {machine()}\n- command: `{command()}`\n\n"
               f"{table_md}\n")
    if notes:
        section += f"\n{notes}\n"
    with open(RESULTS_MD, "a") as f:
        f.write(head + section)
