"""What a report cost: its wall time split as the commands print it, the machine, the JAX
version and the commit of the code that made it.

`Spent` accumulates the seconds of training, evaluation and data loading of the runs an
experiment computes, and of the data it loads for them itself (`Spent.add_data`; runs
served from the run cache cost nothing and are counted apart); `cost_record` turns it,
with the command's compile log when there is one, into the `cost` entry of `results.json`
/ `robustness.json`, and `cost_lines` into the lines that end `table.md` /
`robustness.md`.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jaxlib

from fedjax_appeal import command_split, split_text, time_split


@dataclasses.dataclass
class Spent:
    """Seconds an experiment's computed runs spent per phase, and how many runs it
    computed or read back from the run cache."""

    train_s: float = 0.0
    eval_s: float = 0.0
    data_s: float = 0.0
    compile_s: float = 0.0  # from the runs' own timings (used without a command clock)
    computed: int = 0
    cached: int = 0

    def add_run(self, results: dict[str, Any]) -> None:
        """Count one run computed by `run_config` (its results' `timing`)."""
        t = results.get("timing", {})
        self.train_s += float(t.get("train_total_s", 0.0))
        self.eval_s += float(t.get("eval_total_s", 0.0))
        self.data_s += float(t.get("load_s", 0.0))
        self.compile_s += float(t.get("compile_s", 0.0)) + float(t.get("eval_compile_s", 0.0))
        self.computed += 1

    def add_data(self, seconds: float) -> None:
        """Count data loaded outside the runs (a table's federations, loaded once for the
        arms of a seed and padded to their setting's common shape, `papers.runner`)."""
        self.data_s += float(seconds)

    def add_sweep(self, timing: dict[str, Any], runs: int) -> None:
        """Count a sweep of `runs` rows (its `SweepResult.timing`)."""
        for g in timing.get("groups", ()):
            self.train_s += float(g.get("run_s", 0.0)) + float(g.get("init_s", 0.0))
            self.eval_s += float(g.get("eval_s", 0.0))
            self.compile_s += float(g.get("compile_s", 0.0))
        self.data_s += float(timing.get("data_s", 0.0))
        self.computed += runs


@functools.cache
def commit() -> str:
    """The git commit of the checkout the code runs from ('+dirty' when its files differ
    from it), or 'unknown' outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                "fedjax_appeal", "papers"], cwd=root, capture_output=True,
                               text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else `platform.processor()`."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The machine in a few fields: processor, cores, memory, JAX backend and devices."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    except (ValueError, OSError, AttributeError):
        mem = float("nan")
    devs = jax.devices()
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_gib": round(mem, 1),
            "backend": jax.default_backend(), "devices": len(devs),
            "device_kind": devs[0].device_kind, "python": platform.python_version(),
            "system": f"{platform.system()} {platform.release()}"}


def cost_record(spent: Spent, started: float, clock: Any = None) -> dict[str, Any]:
    """The `cost` entry of a report: wall seconds since `started` (a perf_counter value)
    split into compile / train / eval / data / other (from the command's `clock` when
    given, which counts every program compiled since the process started), the runs
    computed and cached, the machine, the JAX version, the commit and the date."""
    if clock is not None:
        split = command_split(clock, spent.train_s, spent.eval_s, spent.data_s)
        text = split_text(split, split["programs"])
    else:
        split = time_split(time.perf_counter() - started, compile_s=spent.compile_s,
                           train_s=spent.train_s, eval_s=spent.eval_s, data_s=spent.data_s)
        text = split_text(split)
    return {"time": split, "time_text": text,
            "runs": {"computed": spent.computed, "cached": spent.cached},
            "machine": machine(), "jax": jax.__version__,
            "jaxlib": getattr(jaxlib, "__version__", "unknown"), "commit": commit(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "argv": " ".join(sys.argv[1:])}


def cost_lines(rec: dict[str, Any]) -> list[str]:
    """The markdown section that ends a report: what it cost and where it ran."""
    m = rec["machine"]
    runs = rec["runs"]
    return ["", "## Cost", "",
            f"- {rec['time_text']}",
            f"- runs: {runs['computed']} computed, {runs['cached']} read back from the run "
            "cache (their time is not in the line above)",
            f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; JAX "
            f"{rec['jax']} on {m['backend']} ({m['devices']} × {m['device_kind']}); Python "
            f"{m['python']}",
            f"- code: commit {rec['commit']}; {rec['date']}", ""]
