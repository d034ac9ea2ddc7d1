"""Where a FedAvg round's local step stands against the memory bound: kernels per step,
bytes per client step, achieved bandwidth.

For each cohort (the FMNIST MLP [64, 30] workload of `round_throughput.py`: tau = 50 steps
of batch 64, Dirichlet(0.5)) and each `--precision`:

  * **ms per round**: min / median of `--repeats` timed calls of one compiled scan chunk
    (`round_throughput.jax_round_times`), as in `gpu_round_throughput.py`.
  * **kernels per local step**: the instructions XLA runs in the body of the round's
    local-steps loop (the `while` whose known trip count is tau, in the optimized HLO of
    the compiled chunk), by opcode; on a GPU each fusion, custom call (cuBLAS) and copy is
    a kernel launch (`loop_kernels`).
  * **bytes per client step**: XLA's own count (`cost_analysis()["bytes accessed"]`) of one
    local step of the whole cohort, divided by the cohort; beside it the two bounds of
    `step_bytes` for the model's P parameters (4 bytes each): a step that materialises the
    gradient moves 5 P x 4 bytes (read w forward, write the gradient, read w and the
    gradient, write w), one that updates w where it computes the gradient 2 P x 4 bytes,
    both plus the minibatch (b rows of uint8 pixels and int32 labels).
  * **achieved bandwidth**: XLA's bytes per step x cohort x tau / the round's time, against
    the device's memory bandwidth (`BANDWIDTH`, by device name) where known.

`--trace DIR` also records a `jax.profiler` trace of three rounds per row (TensorBoard's
profile plugin or Perfetto read it; on a GPU it lists every kernel with its time).

    PYTHONPATH=. python benchmarks/profile_round.py --cohorts 1000 --precisions default,bf16
    PYTHONPATH=. python benchmarks/profile_round.py --cohorts 10 --repeats 2   # a CPU check

Appends a table to benchmarks/RESULTS.md (`--no-append`: print only).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, machine, stats, write_json  # noqa: E402

# HBM bandwidth in bytes/s by device name (first key contained in the device kind wins).
BANDWIDTH = {"H200": 4.8e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100": 2.0e12,
             "L40S": 0.864e12, "L4": 0.3e12}
# Instructions that move no data and launch nothing.
_FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all",
         "partition-id", "replica-id", "opt-barrier"}
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*\S.*?\s([a-z][a-z0-9\-]*)\(")
_WHILE = re.compile(r"\swhile\(.*body=%?([\w.\-]+).*\"known_trip_count\":\{\"n\":\"(\d+)\"")


def computations(hlo: str) -> dict[str, list[str]]:
    """The computations of an HLO module's text: name -> its instruction lines."""
    out: dict[str, list[str]] = {}
    name = None
    for line in hlo.splitlines():
        if name is None:
            m = _COMP.match(line)
            if m and "=" not in line.split("{")[0].split("(")[0]:
                name = m.group(1)
                out[name] = []
            continue
        if line.strip() == "}":
            name = None
        else:
            out[name].append(line)
    return out


def loop_kernels(hlo: str, trips: int) -> Counter:
    """Opcode -> count of the data-moving instructions in the body of the `while` loop
    whose known trip count is `trips` (the first such loop; an empty Counter when none)."""
    comps = computations(hlo)
    for lines in comps.values():
        for line in lines:
            m = _WHILE.search(line)
            if m and int(m.group(2)) == trips and m.group(1) in comps:
                ops = Counter()
                for body_line in comps[m.group(1)]:
                    op = _INSTR.match(body_line)
                    if op and op.group(1) not in _FREE:
                        ops[op.group(1)] += 1
                return ops
    return Counter()


def step_bytes(n_params: int, batch: int, row_bytes: int, param_bytes: int = 4
               ) -> dict[str, float]:
    """Bytes one client's local SGD step must move: `fused` (w read and written once) and
    `unfused` (w read twice and written once, the gradient written and read), each plus the
    minibatch (`batch` rows of `row_bytes` and an int32 label each)."""
    data = batch * (row_bytes + 4)
    w = n_params * param_bytes
    return {"fused": 2 * w + data, "unfused": 5 * w + data, "data": data}


def bandwidth_for(kind: str) -> float | None:
    for name, bw in BANDWIDTH.items():
        if name.lower() in kind.lower():
            return bw
    return None


def cohort_step_bytes(model, cohort: int, batch: int) -> float:
    """XLA's bytes accessed by one local SGD step of `cohort` clients (vmapped), per client."""
    import jax
    import jax.numpy as jnp

    params, state = model.init(jax.random.key(0))
    stack = jax.tree.map(lambda a: jnp.broadcast_to(a, (cohort, *a.shape)), params)
    x = jnp.zeros((cohort, batch, *model.input_shape), model.input_dtype)
    y = jnp.zeros((cohort, batch), jnp.int32)
    keys = jax.random.split(jax.random.key(1), cohort)

    def step(p, x, y, key):
        g, _ = jax.grad(lambda q: model.loss(q, state, x, y, train=True, key=key),
                        has_aux=True)(p)
        return jax.tree.map(lambda a, b: a - 0.05 * b, p, g)

    ca = jax.jit(jax.vmap(step)).lower(stack, x, y, keys).compile().cost_analysis()
    ca = ca[0] if isinstance(ca, list | tuple) else ca
    return float((ca or {}).get("bytes accessed", 0.0)) / cohort


def profile(cohort: int, precision: str, repeats: int, fmnist_dir: str, trace: str | None
            ) -> dict:
    """One row: the round's time, its local-step loop's kernels and bytes."""
    import jax
    from round_throughput import HP, jax_round_calls, workload

    from fedjax_appeal.core.models import model_for
    from fedjax_appeal.execute.layout import resolve_layout

    cfg = workload(cohort, fmnist_dir=fmnist_dir).replace(precision=precision)
    cfg, layout = resolve_layout(cfg)
    call, compile_s, data, ds, n_params = jax_round_calls(cfg, HP, 1)
    from _common import time_repeats

    secs = time_repeats(call, repeats, warmup=0)
    if trace:
        with jax.profiler.trace(os.path.join(trace, f"cohort{cohort}-{precision}")):
            for _ in range(3):
                call()
    model = model_for(cfg.model, data, ds, cfg.conv_impl, cfg.precision)
    hlo = call.compiled.as_text()
    kernels = loop_kernels(hlo, cfg.local_steps)
    row_bytes = int(np.prod(model.input_shape)) * np.dtype(model.input_dtype).itemsize
    bounds = step_bytes(int(n_params), cfg.batch_size, row_bytes)
    xla_bytes = cohort_step_bytes(model, cohort, cfg.batch_size)
    best = min(secs)
    moved = xla_bytes * cohort * cfg.local_steps
    return {"cohort": cohort, "precision": precision, "layout": layout.describe(),
            "round_s": stats(secs), "compile_s": compile_s, "n_params": int(n_params),
            "kernels_per_step": dict(kernels), "kernel_count": int(sum(kernels.values())),
            "xla_bytes_per_client_step": xla_bytes, "bounds": bounds,
            "achieved_bytes_per_s": moved / best}


def table(rows: list[dict], bandwidth: float | None) -> str:
    lines = ["| cohort | precision | ms/round (min / median) | kernels per local step | "
             "XLA bytes per client step | bounds: fused / unfused | achieved GB/s | "
             "of the device's bandwidth |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        k = ", ".join(f"{n} {op}" for op, n in sorted(r["kernels_per_step"].items(),
                                                       key=lambda t: -t[1]))
        frac = (f"{100 * r['achieved_bytes_per_s'] / bandwidth:.0f}%" if bandwidth else "n/a")
        lines.append(
            f"| {r['cohort']} | {r['precision']} | {r['round_s']['min'] * 1e3:.1f} / "
            f"{r['round_s']['median'] * 1e3:.1f} | {r['kernel_count']} ({k}) | "
            f"{r['xla_bytes_per_client_step'] / 1e3:.0f} kB | "
            f"{r['bounds']['fused'] / 1e3:.0f} / {r['bounds']['unfused'] / 1e3:.0f} kB | "
            f"{r['achieved_bytes_per_s'] / 1e9:.1f} | {frac} |")
    return "\n".join(lines)


def main():
    from round_throughput import FMNIST_DIR

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", default="10", help="comma list (a GPU: 100,1000,10000)")
    ap.add_argument("--precisions", default="default", help="comma list of --precision values")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--trace", default=None, help="folder for jax.profiler traces")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "profile_round.json"))
    args = ap.parse_args()
    import jax

    kind = jax.devices()[0].device_kind
    bw = bandwidth_for(kind)
    rows = []
    for m in [int(c) for c in args.cohorts.split(",") if c.strip()]:
        for p in [p.strip() for p in args.precisions.split(",") if p.strip()]:
            rows.append(profile(m, p, args.repeats, args.fmnist_dir, args.trace))
            print(table(rows[-1:], bw).splitlines()[-1], flush=True)
    write_json(Path(args.out), {"machine": machine(), "device_kind": kind,
                                "bandwidth": bw, "rows": rows})
    text = table(rows, bw)
    print(text)
    if not args.no_append:
        append_results("Round profile: kernels and bytes per local step", text,
                       f"Device: {kind} ({jax.default_backend()}); bandwidth "
                       f"{'n/a' if bw is None else f'{bw / 1e12:.2f} TB/s'}. FedAvg FMNIST "
                       "MLP [64, 30], tau 50, b 64. Bounds: `step_bytes` (module docstring).")


if __name__ == "__main__":
    main()
