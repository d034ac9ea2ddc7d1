"""The matrix-product floor of a language-task client step on one core, against ours and the
PyTorch `nn.LSTM` loop, in CPU seconds.

For a workload of `text_round_peer.py` (default ``chars``: `char_lstm`, b=8, T=80):

  * **FLOPs per client step**: 2 m k n of every `dot_general` in the jaxpr of one local SGD
    step (the loss's gradient), products inside a `scan` counted once per position (its
    length), the LSTM's hand-written backward pass included.
  * **GEMM rate**: the CPU seconds of a [T*b, H] x [H, 4H] product (the size of the layers'
    input projections and weight gradients), jitted in a loop whose input changes every
    iteration, per product: the matrix-product throughput one core reaches.
  * **floor**: FLOPs / GEMM rate, the CPU time of the step's products alone.
  * **ours / torch loop**: CPU seconds of the process per client step of a whole FedAvg
    round (ours: `round_throughput.jax_round_calls` on one JAX device, one client at a
    time; torch: the `loop` variant of `torch_text_peer.py` on one intra-op thread), over
    cohort x tau client steps; the two sides' rounds interleaved. CPU time, not wall
    time: the shared machine's other jobs stretch wall time, much less the CPU time a
    process spends on its own work.

    python benchmarks/lstm_step_floor.py --workloads chars --repeats 5

Appends a table to benchmarks/RESULTS.md (`--no-append`: print only).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, stats, write_json  # noqa: E402


def dot_flops(jaxpr, times: int = 1) -> int:
    """2 m k n (times the batch) summed over every `dot_general` of a jaxpr and its nested
    jaxprs, a scan's body counted `length` times."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            lhs, rhs = (tuple(v.aval.shape) for v in eqn.invars[:2])
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            size = lambda shape, dims: math.prod(shape[d] for d in dims)  # noqa: E731
            free_l = [d for d in range(len(lhs)) if d not in lc and d not in lb]
            free_r = [d for d in range(len(rhs)) if d not in rc and d not in rb]
            total += times * 2 * size(lhs, lb) * size(lhs, lc) * size(lhs, free_l) * size(
                rhs, free_r)
        inner = times * (eqn.params["length"] if eqn.primitive.name == "scan" else 1)
        for v in eqn.params.values():
            for sub in v if isinstance(v, (list, tuple)) else [v]:
                sub_jaxpr = getattr(sub, "jaxpr", sub)
                if hasattr(sub_jaxpr, "eqns"):
                    total += dot_flops(sub_jaxpr, inner)
    return total


def cpu_per_call(fn, repeats: int, warmup: bool = True) -> list[float]:
    """CPU seconds of this process per call of `fn` (after one warm-up call)."""
    if warmup:
        fn()
    out = []
    for _ in range(repeats):
        c = time.process_time()
        fn()
        out.append(time.process_time() - c)
    return out


def gemm_rate(rows: int, hid: int, repeats: int, loops: int = 20) -> float:
    """FLOP/s of a [rows, H] x [H, 4H] float32 product in XLA, by CPU seconds."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((rows, hid), jnp.float32)
    w = jnp.full((hid, 4 * hid), 1e-3, jnp.float32)
    gemm = jax.jit(lambda a, w: jax.lax.fori_loop(  # a new input every iteration
        0, loops, lambda i, acc: acc + (a * (1.0 + i * 1e-6)) @ w * 1e-3,
        jnp.zeros((rows, 4 * hid), jnp.float32)))
    per = min(cpu_per_call(lambda: gemm(a, w).block_until_ready(), repeats)) / loops
    return 2 * rows * hid * 4 * hid / per


def measure(name: str, data_dir: str, repeats: int, with_torch: bool) -> dict:
    """One workload's row: FLOPs per client step, GEMM rate, floor, ours and torch."""
    import jax
    import jax.numpy as jnp
    from round_throughput import jax_round_calls
    from text_round_peer import LR, describe, workload

    from fedjax_appeal.core.config import HParams
    from fedjax_appeal.core.models import model_for

    hp = HParams(client_lr=LR)
    cfg = workload(name, data_dir).replace(devices=1, client_lanes=1)
    ours, _, data, ds, _ = jax_round_calls(cfg, hp, 1)
    model = model_for(cfg.model, data, ds)
    seq_len = int(data.train.x.shape[1])
    params, state = model.init(jax.random.key(0))
    x = jnp.zeros((cfg.batch_size, seq_len), data.train.x.dtype)
    y = jnp.zeros((cfg.batch_size, *data.train.y.shape[1:]), data.train.y.dtype)
    step = jax.make_jaxpr(jax.grad(lambda p: model.loss(p, state, x, y, train=True)[0]))
    flops = dot_flops(step(params).jaxpr)
    rate = gemm_rate(cfg.batch_size * seq_len, model.module.hidden, repeats)
    steps = cfg.cohort * cfg.local_steps
    calls = {"ours": ours}
    if with_torch:
        from torch_text_peer import arch_of, make_torch_text_round

        calls["torch_loop"] = make_torch_text_round(data, cfg, hp, arch_of(model.module),
                                                    "loop", 1)
    secs = {k: [] for k in calls}
    for _ in range(repeats):  # interleaved: a load change hits both sides alike
        for k, f in calls.items():
            secs[k] += cpu_per_call(f, 1, warmup=not secs[k])
    row = {"workload": name, "describe": describe(name, cfg, seq_len), "flops": flops,
           "gemm_flops_per_s": rate, "floor_s": flops / rate}
    row.update({k: stats([t / steps for t in v]) for k, v in secs.items()})
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="chars")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data-dir", default="")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "lstm_step_floor.json"))
    args = ap.parse_args()
    with_torch = importlib.util.find_spec("torch") is not None
    rows = []
    for name in [n for n in args.workloads.split(",") if n]:
        rows.append(measure(name, args.data_dir, args.repeats, with_torch))
        print(rows[-1], flush=True)
    write_json(Path(args.out), {"rows": rows})

    head = ["workload", "FLOPs / client step (matrix products)", "GEMM rate, 1 core",
            "floor ms / step", "ours CPU ms / step (min / median)",
            "torch loop CPU ms / step (min / median)", "ours / floor; torch / floor (min)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        tl = r.get("torch_loop")
        cells = [r["describe"], f"{r['flops'] / 1e9:.2f} G", f"{r['gemm_flops_per_s'] / 1e9:.0f} "
                 "GFLOP/s", f"{r['floor_s'] * 1e3:.1f}",
                 f"{r['ours']['min'] * 1e3:.1f} / {r['ours']['median'] * 1e3:.1f}",
                 f"{tl['min'] * 1e3:.1f} / {tl['median'] * 1e3:.1f}" if tl else "—",
                 f"{r['ours']['min'] / r['floor_s']:.2f}; "
                 + (f"{tl['min'] / r['floor_s']:.2f}" if tl else "—")]
        lines.append("| " + " | ".join(cells) + " |")
    notes = (f"CPU seconds of the process (time.process_time), {args.repeats} calls each. "
             "Ours: a FedAvg round on one JAX device, one client at a time; torch loop: "
             "`torch_text_peer.py`'s `loop` on one thread; per client step = per round / "
             "(cohort x tau). GEMM rate: a [T*b, H] x [H, 4H] float32 product in XLA.")
    if not args.no_append:
        append_results("Language tasks: the client step's matrix-product floor on one core "
                       "(cpu)", "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


if __name__ == "__main__":
    main()
