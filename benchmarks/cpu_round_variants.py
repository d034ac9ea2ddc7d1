"""What the usual CPU levers buy on the FedAvg round of `round_throughput.py`, timed
interleaved in one process (wall and CPU seconds, min / median over repeats):

  * PRNG implementation: the round's keys (batch indices, dropout masks) drawn with
    `threefry2x32` (JAX's default), `rbg` or `unsafe_rbg` (`jax.random.key(seed, impl=...)`),
    through the library's own compiled round.
  * The MLP [64, 30] local-steps kernel of a cohort (vmapped clients, a `lax.scan` of tau
    SGD steps on uint8 rows scaled to [0, 1]) written out by hand in the library's layout,
    and one variant per lever (`mlp_kernels`): bf16 matmuls (parameters and activations
    cast to bfloat16, float32 master weights and loss, for CPUs with avx512_bf16 / AMX);
    inputs stored as float32 (no conversion in the step); the [b, m, d] layout of the
    cohort's batched matmuls instead of [m, b, d]; donated parameter buffers; batches
    gathered by index from each client's rows inside the step.

    python benchmarks/cpu_round_variants.py --cohort 100 --repeats 4
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results, stats  # noqa: E402
from round_throughput import FMNIST_DIR, HP, WORKLOAD, workload  # noqa: E402

from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.core.models import model_for  # noqa: E402
from fedjax_appeal.data import load_federated  # noqa: E402
from fedjax_appeal.run.driver import make_chunk, split_key  # noqa: E402

IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")


def library_rounds(cohort: int, fmnist_dir: str) -> dict:
    """One compiled round per PRNG implementation: name -> call()."""
    cfg = workload(cohort, fmnist_dir=fmnist_dir)
    data, ds = load_federated(cfg)
    alg = build("fedavg", model_for(cfg.model, data, ds), cfg)
    hp = HP.as_arrays()
    one = jnp.arange(1, dtype=jnp.int32)
    calls = {}
    for impl in IMPLS:
        k_init, k_train = split_key(jax.random.key(0, impl=impl))
        state = jax.jit(alg.init)(k_init, data, hp)
        run = jax.jit(make_chunk(alg)).lower(state, data, k_train, hp, one).compile()
        box = {"state": state, "r": 0}

        def call(run=run, box=box, k=k_train):
            box["state"], _ = run(box["state"], data, k, hp, one + box["r"])
            jax.block_until_ready(box["state"].params)
            box["r"] += 1

        call()
        calls[f"round, {impl} keys"] = call
    return calls


def mlp_kernels(cohort: int, tau: int = 50, b: int = 64, rows: int = 600) -> dict:
    """The cohort's local steps of the MLP written out by hand, one variant per lever:
    name -> call().

    The first is the library's layout (clients' batches [tau, m, b, 784] uint8, scaled in
    each step; float32 matmuls); each other variant changes one thing: bf16 matmuls,
    inputs already float32 (no conversion in the step), the batch axis outside the cohort
    axis ([tau, b, m, 784]), parameters donated to the call (updated in place), or each
    step's batch gathered from the client's `rows` uint8 rows by index (as the round does).
    """
    ks = jax.random.split(jax.random.key(0), 7)
    w = [jax.random.normal(ks[0], (cohort, 784, 64)) * 0.03,
         jax.random.normal(ks[1], (cohort, 64, 30)) * 0.1,
         jax.random.normal(ks[2], (cohort, 30, 10)) * 0.1]
    x = jax.random.randint(ks[3], (tau, cohort, b, 784), 0, 255).astype(jnp.uint8)
    y = jax.random.randint(ks[4], (tau, cohort, b), 0, 10)
    pool_x = jax.random.randint(ks[5], (cohort, rows, 784), 0, 255).astype(jnp.uint8)
    pool_y = jax.random.randint(ks[6], (cohort, rows), 0, 10)
    pick = jax.random.randint(ks[5], (tau, cohort, b), 0, rows)

    def loss_fn(dt, scale):
        def loss(p, xb, yb):
            p = [a.astype(dt) for a in p]
            h = (xb.astype(jnp.float32) * scale).astype(dt)
            h = jax.nn.relu(h @ p[0])
            h = jax.nn.relu(h @ p[1])
            out = (h @ p[2]).astype(jnp.float32)
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), yb[:, None], 1))
        return loss

    def sgd(p, g):
        return jax.tree.map(lambda a, d: a - 0.05 * d, p, g)

    def make(dt=jnp.float32, inputs=x, scale=1 / 255.0, axis=1, donate=False, gather=False):
        loss = loss_fn(dt, scale)
        if gather:
            def run(p, xs, ys):
                def step(p, ix):
                    xb = jax.vmap(lambda px, i: px[i])(pool_x, ix)
                    yb = jax.vmap(lambda py, i: py[i])(pool_y, ix)
                    return sgd(p, jax.vmap(jax.grad(loss))(p, xb, yb)), None
                return jax.lax.scan(step, p, xs)[0]
            args = (pick, None)
        else:
            def run(p, xs, ys):
                def step(p, xy):
                    g = jax.vmap(jax.grad(loss), in_axes=(0, axis - 1, axis - 1))(p, *xy)
                    return sgd(p, g), None
                return jax.lax.scan(step, p, (xs, ys))[0]
            args = (inputs, y if axis == 1 else jnp.swapaxes(y, 1, 2))
        f = jax.jit(run, donate_argnums=0 if donate else ()).lower(w, *args).compile()
        box = {"w": jax.tree.map(jnp.copy, w)}

        def call():  # chained, so that a donated call reuses its own output's buffers
            box["w"] = f(box["w"], *args) if donate else f(w, *args)
            jax.block_until_ready(box["w"])
        return call

    calls = {"MLP kernel, float32 (the library's layout)": make(),
             "MLP kernel, bf16 matmuls": make(jnp.bfloat16),
             "MLP kernel, float32 inputs (no uint8 conversion)": make(
                 inputs=x.astype(jnp.float32) / 255.0, scale=1.0),
             "MLP kernel, [tau, b, m, 784] layout": make(inputs=jnp.swapaxes(x, 1, 2), axis=2),
             "MLP kernel, donated parameters": make(donate=True),
             "MLP kernel, batches gathered by index": make(gather=True)}
    for c in calls.values():
        c()
    return calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohort", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    calls = {**library_rounds(args.cohort, args.fmnist_dir), **mlp_kernels(args.cohort)}
    wall = {k: [] for k in calls}
    cpu = {k: [] for k in calls}
    for _ in range(args.repeats):  # interleaved
        for k, f in calls.items():
            c, t = time.process_time(), time.perf_counter()
            f()
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    lines = ["| variant | wall s (min / median) | CPU s (min / median) | vs the first of its "
             "kind (wall median) |", "|---|---|---|---|"]
    base = {}
    for k in calls:
        kind = k.split(",")[0]
        w, c = stats(wall[k]), stats(cpu[k])
        base.setdefault(kind, w["median"])
        lines.append(f"| {k} | {w['min']:.3f} / {w['median']:.3f} | {c['min']:.3f} / "
                     f"{c['median']:.3f} | {base[kind] / w['median']:.2f}× |")
    notes = (f"Workload: {WORKLOAD}, cohort {args.cohort}; 'round' = one compiled round of the "
             "library (selection, local steps, aggregation); 'MLP kernel' = the cohort's tau "
             "local SGD steps alone, written by hand. CPU s = process CPU time (all threads). "
             f"{args.repeats} interleaved repeats after a warm-up.")
    if not args.no_append:
        append_results(f"CPU levers on the FedAvg round, cohort {args.cohort} "
                       f"({jax.default_backend()})", "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


if __name__ == "__main__":
    main()
