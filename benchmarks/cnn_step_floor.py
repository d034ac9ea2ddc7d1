"""The matrix-product floor of simple_cnn's SGD step on one core, against the step time that
2x Flower on the peers' CNN workloads asks for.

A local SGD step of `simple_cnn` (the model of both peer workloads, `peer_workloads.py`) is
mostly matrix products: in training mode each convolution is an im2col matmul (`core/conv.py`)
and its gradient two more, the dense layers three each. This script takes the products from
the step's own jaxpr (every `dot_general`, nested jaxprs included, with its operand shapes and
dimension numbers), times each one alone on one core, in XLA (the same `dot_general`, jitted,
intra-op threads off) and, with `--torch-python`, in torch (`torch.matmul` of the contiguous
[batch, m, k] @ [batch, k, n] form, one thread), and adds up the faster of the two for each
product: the **floor**, the time one core spends on the step's products alone, before the
im2col copies, activations, pooling, dropout, loss and update that the step also runs.

Beside it: the whole step on one core (`cnn_core_scaling.py`'s ``one core`` case, and its
torch peer), and the budget that the target "2x faster than Flower per round with
evaluation" leaves for one step, from a `peer_workloads.py` JSON (Flower's derived time per
100 rounds, halved, less our evaluations, over our client steps per round): the step time
per core that the machine's cores must reach together if the round scaled perfectly over
them and cost nothing besides its steps. A floor above that budget means no implementation
of these products on this CPU reaches the target; the table says which.

    python benchmarks/cnn_step_floor.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, jaxpr_eqns, time_repeats  # noqa: E402  (stdlib only)
from cnn_core_scaling import FLOWER_PYTHON, WORKLOADS, measure, torch_python  # noqa: E402

PEER_WORKLOAD = {"femnist": "femnist_fedjax", "cifar10": "cifar10_pfl"}
PEER_JSON = HERE / "results" / "peer_workloads_rerun.json"


def canonical(lhs: tuple, rhs: tuple, dimension_numbers) -> tuple[int, int, int, int]:
    """(batch, m, k, n) of a `dot_general`: batch = product of the batch dimensions, k = of
    the contracting ones, m and n = of the lhs's and rhs's remaining (free) dimensions."""
    (lc, rc), (lb, rb) = dimension_numbers
    b = math.prod(lhs[d] for d in lb)
    k = math.prod(lhs[d] for d in lc)
    m = math.prod(lhs[d] for d in range(len(lhs)) if d not in lc and d not in lb)
    n = math.prod(rhs[d] for d in range(len(rhs)) if d not in rc and d not in rb)
    return b, m, k, n


def dots(jaxpr) -> list[dict]:
    """Every `dot_general` of a jaxpr (nested jaxprs included), in program order."""
    out = []
    for eqn in jaxpr_eqns(jaxpr):
        if eqn.primitive.name == "dot_general":
            lhs, rhs = (tuple(v.aval.shape) for v in eqn.invars[:2])
            dn = eqn.params["dimension_numbers"]
            b, m, k, n = canonical(lhs, rhs, dn)
            out.append({"lhs": lhs, "rhs": rhs, "dtype": str(eqn.invars[0].aval.dtype),
                        "dimension_numbers": [[list(dn[0][0]), list(dn[0][1])],
                                              [list(dn[1][0]), list(dn[1][1])]],
                        "bmkn": (b, m, k, n), "flops": 2.0 * b * m * k * n})
    return out


def sgd_step(workload: str, batch: int = 10, conv_impl: str = "auto"):
    """(step(params, key) -> params, initial params): one SGD step of simple_cnn on `batch`
    rows of `workload`, with the default convolution (or `conv_impl`), as the local steps
    run it."""
    import jax
    import jax.numpy as jnp

    from fedjax_appeal.core.models import make_model

    shape, classes = WORKLOADS[workload]
    m = make_model("simple_cnn", "x", classes, shape, jnp.uint8, conv_impl=conv_impl)
    p, s = m.init(jax.random.key(0))
    x = jnp.ones((batch, *shape), jnp.uint8)
    y = jnp.zeros((batch,), jnp.int32)

    def step(q, k):
        g = jax.grad(lambda w: m.loss(w, s, x, y, train=True, key=k)[0])(q)
        return jax.tree.map(lambda a, b: a - 0.01 * b, q, g)

    return step, p


def step_dots(workload: str, batch: int = 10, conv_impl: str = "auto") -> list[dict]:
    """The products of one SGD step (`sgd_step`), its convolutions in training mode (im2col
    or Winograd matmuls)."""
    import jax

    step, p = sgd_step(workload, batch, conv_impl)
    return dots(jax.make_jaxpr(step)(p, jax.random.key(0)).jaxpr)


def step_profile(workload: str, steps: int, batch: int = 10) -> list[dict]:
    """Milliseconds per step of each operation of the compiled local steps (a rolled
    `lax.scan` of `steps` SGD steps, as `cnn_core_scaling.py` runs them), from a
    `jax.profiler` trace of three calls: [{"op", "source", "ms"}], slowest first. "source" is
    the operation's JAX origin from the compiled HLO's metadata (which layer, and whether
    forward or gradient)."""
    import glob
    import gzip
    import re
    import tempfile
    from collections import Counter

    import jax

    step, p = sgd_step(workload, batch)
    f = jax.jit(lambda q, k: jax.lax.scan(lambda c, kk: (step(c, kk), None), q,
                                          jax.random.split(k, steps))[0])
    hlo = f.lower(p, jax.random.key(0)).compile().as_text()
    source = {}
    for line in hlo.splitlines():
        hit = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*op_name=\"([^\"]*)\"", line)
        if hit:
            src = re.sub(r"^jit\([^)]*\)/(while/body/)?(closed_call/)?", "", hit[2])
            source[hit[1]] = src
    jax.block_until_ready(f(p, jax.random.key(1)))
    calls = 3
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        for i in range(calls):
            jax.block_until_ready(f(p, jax.random.key(i)))
        jax.profiler.stop_trace()
        with gzip.open(glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)[0]) as fh:
            events = json.load(fh)["traceEvents"]
    us = Counter()
    for e in events:  # the compiled program's own operations (named in its HLO) only
        if e.get("ph") == "X" and e.get("name") in source:
            us[e["name"]] += e["dur"]
    return [{"op": n, "source": source[n], "ms": t / 1e3 / (calls * steps)}
            for n, t in us.most_common()]


def time_xla(products: list[dict], repeats: int, calls: int) -> list[float]:
    """Best seconds per call of each product as its own jitted `dot_general` (this process
    is pinned to one core with XLA's intra-op threads off by its parent)."""
    import jax

    out = []
    for d in products:
        k1, k2 = jax.random.split(jax.random.key(len(out)))
        a = jax.random.normal(k1, d["lhs"], d["dtype"])
        b = jax.random.normal(k2, d["rhs"], d["dtype"])
        dn = tuple(tuple(tuple(x) for x in pair) for pair in d["dimension_numbers"])
        f = jax.jit(lambda a, b, dn=dn: jax.lax.dot_general(a, b, dn))

        def loop(f=f, a=a, b=b):
            for _ in range(calls):
                r = f(a, b)
            r.block_until_ready()

        out.append(min(time_repeats(loop, repeats)) / calls)
    return out


def time_torch(products: list[dict], repeats: int, calls: int) -> list[float]:
    """The same products in torch, one thread, as [b, m, k] @ [b, k, n] (runs under torch)."""
    import torch

    torch.set_num_threads(1)
    out = []
    for d in products:
        b, m, k, n = d["bmkn"]
        a = torch.randn(b, m, k) if b > 1 else torch.randn(m, k)
        c = torch.randn(b, k, n) if b > 1 else torch.randn(k, n)

        def loop(a=a, c=c):
            for _ in range(calls):
                torch.matmul(a, c)

        out.append(min(time_repeats(loop, repeats)) / calls)
    return out


def in_worker(side: str, stdin, *args: str, python: str | None = None):
    """Runs this script's `side` worker in a fresh process pinned to one core, with XLA's
    intra-op threads off (this process never imports JAX, so it forks no JAX threads)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_cpu_multi_thread_eigen=false")
    core = min(os.sched_getaffinity(0))
    cmd = [python or sys.executable, os.path.abspath(__file__), "--worker", side, *args]
    r = subprocess.run(cmd, env=env, input=json.dumps(stdin), capture_output=True, text=True,
                       preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    if r.returncode:
        raise SystemExit(f"cnn_step_floor: the {side} worker failed (exit {r.returncode}): "
                         f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def budget(rows: dict | list[dict], cores: int) -> dict:
    """What "2x faster than Flower per round with evaluation" leaves for our client steps.

    `rows` are the rows of one workload in a `peer_workloads.py` JSON (ours and Flower's
    measurements; several with `--repeats`, or one row). The target is our derived time per
    100 rounds at most half of Flower's (the median over the repeats); our evaluations
    (100 / eval_every of them, at the median of every repeat's s/eval) come off first, the
    rest is 100 rounds of training of cohort x local_steps client steps each.
    """
    rows = [rows] if isinstance(rows, dict) else rows
    ours = rows[0]["ours"]
    flower_100 = statistics.median(r["flower"]["derived_100_s"] for r in rows)
    evals = (100 // ours["eval_every"]) * statistics.median(
        [e for r in rows for e in r["ours"]["eval_s"]])
    train_per_round = (flower_100 / 2 - evals) / 100
    steps = ours["cohort"] * ours["local_steps"]
    need = steps / train_per_round
    return {"flower_100_s": flower_100, "our_evals_100_s": evals, "repeats": len(rows),
            "train_s_per_round": train_per_round, "steps_per_round": steps,
            "need_steps_per_s": need, "ms_per_step_per_core": 1e3 * cores / need}


def products_table(rows: dict) -> str:
    lines = ["| workload | product (batch × m × k × n) | MFLOP | XLA ms | torch ms | "
             "GFLOP/s (faster) |", "|---|---|---|---|---|---|"]
    for w, r in rows.items():
        torch_s = r["torch_s"] or [None] * len(r["xla_s"])
        for d, tx, tt in zip(r["products"], r["xla_s"], torch_s, strict=True):
            best = min(tx, tt) if tt is not None else tx
            b, m, k, n = d["bmkn"]
            torch_ms = f"{1e3 * tt:.3f}" if tt is not None else "—"
            lines.append(f"| {w} | {b} × {m} × {k} × {n} | {d['flops'] / 1e6:.1f} | "
                         f"{1e3 * tx:.3f} | {torch_ms} | {d['flops'] / best / 1e9:.1f} |")
    return "\n".join(lines)


def profile_table(rows: dict, top: int) -> str:
    """The `top` slowest operations of each workload's profiled one-core step."""
    lines = ["| workload | operation (compiled HLO) | from | ms per step | share of the "
             "profiled step |", "|---|---|---|---|---|"]
    for w, r in rows.items():
        total = sum(o["ms"] for o in r["profile"])
        for o in r["profile"][:top]:
            lines.append(f"| {w} | {o['op']} | {o['source']} | {o['ms']:.2f} | "
                         f"{o['ms'] / total:.0%} |")
        lines.append(f"| {w} | all {len(r['profile'])} operations | | {total:.2f} | 100% |")
    return "\n".join(lines)


def floor_of(r: dict) -> float:
    """Seconds of the step's products on one core, the faster library for each."""
    tt = r["torch_s"] or r["xla_s"]
    return sum(min(a, b) for a, b in zip(r["xla_s"], tt, strict=True))


def summary_table(rows: dict, cores: int) -> str:
    lines = ["| workload | products per step (GFLOP) | floor: products alone, one core, ms "
             "(XLA sum; torch sum) | whole step, one core, ms (ours; torch) | 2× Flower: "
             "ms per step per core (client steps/s needed) | ceiling from the floor: client "
             f"steps/s on {cores} cores | floor within the budget? |",
             "|---|---|---|---|---|---|---|"]
    for w, r in rows.items():
        floor = floor_of(r)
        gflop = sum(d["flops"] for d in r["products"]) / 1e9
        sums = f"{1e3 * sum(r['xla_s']):.2f}; " + (
            f"{1e3 * sum(r['torch_s']):.2f}" if r["torch_s"] else "—")
        step = f"{r['step_ms']:.2f}; " + (f"{r['torch_step_ms']:.2f}"
                                          if r.get("torch_step_ms") else "—")
        bud = r.get("budget")
        need = (f"{bud['ms_per_step_per_core']:.2f} ({bud['need_steps_per_s']:.0f})" if bud
                else "— (no peer JSON row)")
        verdict = "—" if not bud else (
            "yes" if 1e3 * floor < bud["ms_per_step_per_core"] else "**no**")
        lines.append(f"| {w} | {len(r['products'])} ({gflop:.3f}) | {1e3 * floor:.2f} ({sums}) | "
                     f"{step} | {need} | {cores / floor:.0f} | {verdict} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed loops per product and step")
    ap.add_argument("--calls", type=int, default=50, help="calls per timed loop of a product")
    ap.add_argument("--steps", type=int, default=50, help="local steps per timed whole-step call")
    ap.add_argument("--workloads", default="femnist,cifar10")
    ap.add_argument("--peer-json", default=str(PEER_JSON),
                    help="a peer_workloads.py JSON with Flower's rows (the 2x budget)")
    ap.add_argument("--torch-python", default=FLOWER_PYTHON,
                    help="a Python with torch (default: the Flower venv of peer_workloads.py); "
                         "the torch columns are left out when torch does not import there")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--profile", type=int, default=12, metavar="N",
                    help="also profile the one-core step and list its N slowest operations "
                         "(0 = no profile)")
    ap.add_argument("--worker", choices=("dots", "profile", "xla", "torch"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "dots":
        print(json.dumps(step_dots(json.loads(sys.stdin.read()))))
        return None
    if args.worker == "profile":
        print(json.dumps(step_profile(json.loads(sys.stdin.read()), args.steps)))
        return None
    if args.worker:
        products = json.loads(sys.stdin.read())
        fn = time_xla if args.worker == "xla" else time_torch
        print(json.dumps(fn(products, args.repeats, args.calls)))
        return None
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        raise SystemExit(f"cnn_step_floor: unknown workload {bad[0]!r}; choose from "
                         f"{', '.join(WORKLOADS)}")
    peer = {}
    if args.peer_json and os.path.exists(args.peer_json):
        with open(args.peer_json) as f:
            for r in json.load(f)["rows"]:  # every repeat of a workload
                if r.get("flower"):
                    peer.setdefault(r["ours"]["workload"], []).append(r)
    else:
        print(f"cnn_step_floor: no peer JSON at {args.peer_json}: the budget is left out "
              f"(run peer_workloads.py --peer flower --out FILE, then pass --peer-json FILE)")
    tpy = torch_python(args.torch_python)
    if tpy is None:
        print(f"cnn_step_floor: no torch at {args.torch_python}: the torch columns are left "
              f"out (pass --torch-python)", flush=True)
    cores = len(os.sched_getaffinity(0))
    rows = {}
    for w in names:
        products = in_worker("dots", w)
        timing = ("--repeats", str(args.repeats), "--calls", str(args.calls))
        r = {"products": products,
             "xla_s": in_worker("xla", products, *timing),
             "torch_s": in_worker("torch", products, *timing, python=tpy) if tpy else None,
             "step_ms": 1e3 / measure("one core", w, args.steps, args.repeats, 1)["steps_per_s"]}
        if tpy:
            r["torch_step_ms"] = 1e3 / measure("torch, one core", w, args.steps, args.repeats, 1,
                                               python=tpy)["steps_per_s"]
        if args.profile:
            r["profile"] = in_worker("profile", w, "--steps", str(args.steps))
        if PEER_WORKLOAD[w] in peer:
            r["budget"] = budget(peer[PEER_WORKLOAD[w]], cores)
        rows[w] = r
        print(f"{w}: floor {1e3 * floor_of(r):.2f} ms, step {r['step_ms']:.2f} ms", flush=True)
    text = summary_table(rows, cores) + "\n\n" + products_table(rows)
    if args.profile:
        text += "\n\n" + profile_table(rows, args.profile)
    print(text)
    if not args.no_append:
        src = os.path.relpath(args.peer_json, HERE.parent) if peer else "none"
        append_results(
            f"simple_cnn SGD step: its matrix products on one core against 2x Flower's budget "
            f"(cpu, {cores} cores)", text,
            f"Products: every dot_general of one SGD step of simple_cnn on 10 rows (conv auto: "
            f"core/conv.py's CPU default, training mode: im2col matmuls), from the step's "
            f"jaxpr; each timed "
            f"alone on one core, best of {args.repeats} loops of {args.calls} calls (XLA: the "
            f"same dot_general jitted, intra-op threads off; torch: torch.matmul, one thread). "
            f"Floor = the sum over products of the faster library's time. Whole step: "
            f"cnn_core_scaling.py's one-core cases, {args.steps} steps per call, median of "
            f"{args.repeats}. Budget (from {src}): Flower's derived s per 100 rounds / 2 (the "
            f"median over the JSON's repeats), less our evaluations, over our client steps "
            f"per 100 rounds; ms per step per core = "
            f"{cores} cores / the client steps/s needed (perfect scaling over the cores, no cost "
            f"in the round besides the steps). Ceiling = {cores} / floor.")
    return rows


if __name__ == "__main__":
    main()
