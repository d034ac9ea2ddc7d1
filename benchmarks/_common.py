"""Helpers shared by the benchmark scripts: machine description, timing, results files."""

from __future__ import annotations

import datetime as _dt
import json
import math
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
    """The command line as run, an absolute path in it cut to its file name (a report
    names no folder of the machine it ran on)."""
    def part(a: str) -> str:
        k, eq, v = a.partition("=")
        if eq and v.startswith("/"):
            return f"{k}={os.path.basename(v)}"
        return os.path.basename(a) if a.startswith("/") else a
    return "python " + " ".join([os.path.relpath(sys.argv[0])] + [part(a) for a in sys.argv[1:]])


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


HISTORY = "<!-- history: the sections below describe earlier code -->"


def append_results(title: str, table_md: str, notes: str = "") -> None:
    """Add a dated section (machine, command, table) to benchmarks/RESULTS.md: after the
    current sections, above the history (`HISTORY` marker) when the file has one."""
    today = _dt.date.today().isoformat()
    head = "" if RESULTS_MD.exists() else "# Benchmark results\n\nEach section is appended by " \
                                          "the script named in its command line.\n"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    section = (f"\n## {title} — {today}\n\n- machine: {machine()}\n- load average at the end "
               f"(1, 5, 15 min): {load}\n- command: `{command()}`\n\n"
               f"{table_md}\n")
    if notes:
        section += f"\n{notes}\n"
    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else head
    if HISTORY in text:  # current sections stay above the dated history
        at = text.index(HISTORY)
        text = text[:at].rstrip("\n") + "\n" + section + "\n" + text[at:]
    else:
        text += section
    tmp = RESULTS_MD.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, RESULTS_MD)


def matmul_peak(n: int = 2048, repeats: int = 5, dtype: str = "float32") -> dict[str, float]:
    """Measured matmul FLOP/s of this process's default JAX device: the roofline's ceiling.

    Times `jnp.dot` of two n x n matrices (2 n^3 FLOPs, compiled once, inputs on the device)
    and returns the best and median FLOP/s over `repeats` calls. Benchmarks report their
    achieved FLOP/s as a share of the best figure measured in the same run.
    """
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (n, n), dtype)
    b = jax.random.normal(k2, (n, n), dtype)
    f = jax.jit(jnp.dot)
    f(a, b).block_until_ready()
    secs = time_repeats(lambda: f(a, b).block_until_ready(), repeats)
    flops = 2.0 * n ** 3
    return {"n": n, "dtype": dtype, "best_flops": flops / min(secs),
            "median_flops": flops / statistics.median(secs)}


def jaxpr_eqns(jaxpr):
    """Every equation of a jaxpr, nested jaxprs included (`fedjax_appeal.core.jaxpr`,
    imported on call so that this module imports without JAX)."""
    from fedjax_appeal.core.jaxpr import jaxpr_eqns as walk

    return walk(jaxpr)


def jaxpr_flops(jaxpr) -> float:
    """dot_general + convolution FLOPs of a jaxpr, nested jaxprs included."""
    total = 0.0
    for eqn in jaxpr_eqns(jaxpr):
        name = eqn.primitive.name
        if name == "dot_general":
            (lc, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in lc)
        elif name == "conv_general_dilated":
            rhs = eqn.invars[1].aval.shape
            out_feature_dim = eqn.params["dimension_numbers"].rhs_spec[0]
            per_out = math.prod(rhs) / rhs[out_feature_dim]
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * per_out
    return total


def step_flops(model, batch_size: int) -> tuple[float, str, float]:
    """(FLOPs of one local SGD step, source, jaxpr dot/conv count of the same step).

    The step is counted by XLA (`cost_analysis` of the compiled step); where the backend
    gives none, or a count below the step's own dot/conv FLOPs (XLA:GPU leaves the
    convolutions it hands to cuDNN out), by `jaxpr_flops` of its jaxpr (dot_general and
    convolution FLOPs only, a lower bound).
    """
    import jax
    import jax.numpy as jnp

    params, state = model.init(jax.random.key(0))
    x = jnp.zeros((batch_size, *model.input_shape), model.input_dtype)
    y = jnp.zeros((batch_size,), jnp.int32)
    lr = jnp.float32(0.05)

    def step(p, s, x, y, key):
        g, _ = jax.grad(lambda q: model.loss(q, s, x, y, train=True, key=key), has_aux=True)(p)
        return jax.tree.map(lambda a, b: a - lr * b, p, g)

    args = (params, state, x, y, jax.random.key(1))
    counted = jaxpr_flops(jax.make_jaxpr(step)(*args).jaxpr)
    try:
        ca = jax.jit(step).lower(*args).compile().cost_analysis()
        ca = ca[0] if isinstance(ca, list | tuple) else ca
        flops = float((ca or {}).get("flops", 0.0))
    except Exception:  # noqa: BLE001 - backends without cost analysis
        flops = 0.0
    return (*pick_flops(flops, counted), counted)


def pick_flops(xla: float, counted: float) -> tuple[float, str]:
    """(FLOPs, source) of a step from XLA's count (0 = none) and its jaxpr dot/conv count.

    XLA's count is taken unless it is missing or below the dot/conv count, which every
    complete count includes (XLA:GPU counts nothing for the convolutions it hands to cuDNN).
    """
    if xla > 0 and xla >= counted:
        return xla, "xla cost_analysis"
    why = "no xla cost_analysis" if xla <= 0 else f"xla cost_analysis {xla / 1e6:.2f} M is below it"
    return counted, f"jaxpr count (dot/conv only; {why})"
