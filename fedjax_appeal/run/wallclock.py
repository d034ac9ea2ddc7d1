"""Where a command's wall time went: compile / train / eval / data / other.

`compile` is everything JAX spent turning Python into executables (tracing, lowering, XLA
or reading the persistent cache; `execute.runtime.CompileLog`), `train` the compiled
chunks of rounds, `eval` the evaluations, `data` loading and partitioning, and `other`
the rest of the process since the command started (imports, set-up, writing results).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

PHASES = ("compile", "train", "eval", "data", "other")


def time_split(wall_s: float, *, compile_s: float, train_s: float, eval_s: float,
          data_s: float) -> dict[str, float]:
    """{phase: seconds} for `PHASES` plus `wall`; `other` is what the named phases leave of
    `wall_s` (never below 0)."""
    named = {"compile": compile_s, "train": train_s, "eval": eval_s, "data": data_s}
    named = {k: max(0.0, float(v)) for k, v in named.items()}
    return {**named, "other": max(0.0, wall_s - sum(named.values())), "wall": float(wall_s)}


def split_text(s: dict[str, float], log: dict[str, Any] | None = None) -> str:
    """One line: 'time: W s = compile C s (N programs compiled, ...) + train T s + ...'."""
    parts = []
    for k in PHASES:
        text = f"{k} {s[k]:.1f} s"
        if k == "compile" and log is not None:
            text += (f" ({log['compiled']} programs compiled, {log['cache_hits']} read from "
                     f"XLA's cache, {log['reused']} reused whole; XLA {log['xla_s']:.1f} s, "
                     f"tracing and lowering {log['trace_s'] + log['lower_s']:.1f} s)")
        parts.append(text)
    return f"time: {s['wall']:.1f} s = " + " + ".join(parts)



class CommandClock(NamedTuple):
    """A command's wall clock (`started`, a `time.perf_counter()` value) and the
    `execute.runtime.CompileLog` open while it runs."""

    started: float
    compiles: Any


def command_split(clock: CommandClock, train_s: float, eval_s: float, data_s: float
                  ) -> dict[str, Any]:
    """The command's wall clock so far split into `PHASES`, with the compile log's counts
    under "programs"."""
    log = clock.compiles.record()
    return {**time_split(time.perf_counter() - clock.started, compile_s=log["compile_s"],
                    train_s=train_s, eval_s=eval_s, data_s=data_s), "programs": log}
