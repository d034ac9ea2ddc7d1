"""Why a CNN round is slow on XLA:CPU: one local SGD step of `simple_cnn`, timed in the
program shapes a federated round puts it in.

Cases (batch 10, 28x28x1 inputs, 62 classes, dropout on; ms per client step, min / median):
  * ``jit``: one step, its own jitted program.
  * ``scan``: `steps` steps in a rolled `lax.scan` (the local-steps loop of a round).
  * ``scan_unrolled``: the same scan with `unroll=True`.
  * ``vmap``: one step of `cohort` clients, `jax.vmap` over per-client parameters (the cohort).
  * ``vmap_scan``: `steps` steps of `cohort` vmapped clients in a rolled scan (a round's shape).
  * ``vmap_scan_unrolled``: the same with `unroll=True` (`RunConfig.local_unroll = 0`).
  * ``batch``: one step of one model on `cohort` x 10 rows (the same FLOPs without a client
    axis).

And the gradient of simple_cnn's 2x2 max pool alone on its [10, 24, 24, 64] activations:
flax's `max_pool` (XLA's reduce_window, whose gradient is a select-and-scatter) against
`core.conv.max_pool_2x2` (a reshape and a max, whose gradient is the max mask).

    python benchmarks/conv_loop_diagnostic.py --steps 3 --cohort 4 --repeats 3
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

from fedjax_appeal.core.models import make_model  # noqa: E402


def cases(steps: int, cohort: int, conv_impl: str):
    """name -> (compiled callable, its arguments, client steps per call)."""
    m = make_model("simple_cnn", "x", 62, (28, 28), jnp.uint8, conv_impl=conv_impl)
    p, s = m.init(jax.random.key(0))
    x = jnp.ones((10, 28, 28), jnp.uint8)
    y = jnp.zeros((10,), jnp.int32)
    lr = 0.03

    def step(q, k, xb=x, yb=y):
        g = jax.grad(lambda w: m.loss(w, s, xb, yb, train=True, key=k)[0])(q)
        return jax.tree.map(lambda a, b: a - lr * b, q, g)

    def local(q, k, unroll=1):
        return jax.lax.scan(lambda c, kk: (step(c, kk), None), q, jax.random.split(k, steps),
                            unroll=unroll)[0]

    pv = jax.tree.map(lambda a: jnp.stack([a] * cohort), p)
    kv = jax.random.split(jax.random.key(1), cohort)
    xb = jnp.ones((10 * cohort, 28, 28), jnp.uint8)
    yb = jnp.zeros((10 * cohort,), jnp.int32)
    k1 = jax.random.key(1)
    return {
        "jit": (jax.jit(step), (p, k1), 1),
        "scan": (jax.jit(local), (p, k1), steps),
        "scan_unrolled": (jax.jit(lambda q, k: local(q, k, True)), (p, k1), steps),
        "vmap": (jax.jit(jax.vmap(step)), (pv, kv), cohort),
        "vmap_scan": (jax.jit(jax.vmap(local)), (pv, kv), cohort * steps),
        "vmap_scan_unrolled": (jax.jit(jax.vmap(lambda q, k: local(q, k, True))), (pv, kv),
                               cohort * steps),
        "batch": (jax.jit(lambda q, k: step(q, k, xb, yb)), (p, k1), cohort),
    }


def pool_gradients(repeats: int) -> dict:
    """ms (stats) of the 2x2 max pool's gradient on [10, 24, 24, 64]: flax vs reshape form."""
    import flax.linen as nn

    from fedjax_appeal.core.conv import max_pool_2x2

    a = jax.random.normal(jax.random.key(0), (10, 24, 24, 64))
    out = {}
    for name, pool in (("flax max_pool (reduce_window)", lambda x: nn.max_pool(x, (2, 2), (2, 2))),
                       ("max_pool_2x2 (reshape + max)", max_pool_2x2)):
        g = jax.jit(jax.grad(lambda x, pool=pool: jnp.sum(pool(x) ** 2)))
        jax.block_until_ready(g(a))
        secs = []
        for _ in range(max(repeats, 10)):
            t = time.perf_counter()
            jax.block_until_ready(g(a))
            secs.append((time.perf_counter() - t) * 1e3)
        out[name] = stats(secs)
        print(f"pool gradient {name}: {out[name]['min']:.2f} ms", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cohort", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conv-impl", default="xla,patches,patches_train,patches_cf,patches_cf_train,"
                                           "winograd,winograd_train",
                    help="comma-separated convolution implementations to time")
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args(argv)
    impls = [s.strip() for s in args.conv_impl.split(",") if s.strip()]
    rows, evals = {}, {}
    for impl in impls:
        m = make_model("simple_cnn", "x", 62, (28, 28), jnp.uint8, conv_impl=impl)
        p, s = m.init(jax.random.key(0))
        xe = jnp.ones((2048, 28, 28), jnp.uint8)
        ye = jnp.zeros((2048,), jnp.int32)
        f = jax.jit(lambda q, m=m, s=s, xe=xe, ye=ye: m.per_sample(q, s, xe, ye))
        jax.block_until_ready(f(p))
        secs = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            jax.block_until_ready(f(p))
            secs.append((time.perf_counter() - t) * 1e3)
        evals[impl] = stats(secs)
        print(f"{impl:8s} eval forward 2048 rows {evals[impl]['min']:9.1f} ms", flush=True)
        for name, (f, a, n) in cases(args.steps, args.cohort, impl).items():
            t = time.perf_counter()
            jax.block_until_ready(f(*a))  # compile + warm-up
            first = time.perf_counter() - t
            secs = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                jax.block_until_ready(f(*a))
                secs.append((time.perf_counter() - t) / n * 1e3)
            rows[impl, name] = stats(secs) | {"first": first}
            st = rows[impl, name]
            print(f"{impl:8s} {name:18s} {st['min']:9.1f} / {st['median']:9.1f} ms per client "
                  f"step (first call {first:.1f} s)", flush=True)
    lines = ["| conv | case | ms per client step (min / median) | x xla jit (median) | "
             "first call (compile + run), s |", "|---|---|---|---|---|"]
    base = rows.get(("xla", "jit"), rows[impls[0], "jit"])["median"]
    for (impl, name), st in rows.items():
        lines.append(f"| {impl} | {name} | {st['min']:.1f} / {st['median']:.1f} | "
                     f"{st['median'] / base:.2f}× | {st['first']:.1f} |")
    lines += ["", "| conv | evaluation forward, 2,048 rows: ms (min / median) |", "|---|---|"]
    lines += [f"| {i} | {st['min']:.0f} / {st['median']:.0f} |" for i, st in evals.items()]
    pools = pool_gradients(args.repeats)
    lines += ["", "| 2x2 max pool, gradient on [10, 24, 24, 64] | ms (min / median) |", "|---|---|"]
    lines += [f"| {n} | {st['min']:.2f} / {st['median']:.2f} |" for n, st in pools.items()]
    table = "\n".join(lines)
    print(table)
    if not args.no_append:
        append_results(f"simple_cnn SGD step by program shape ({jax.default_backend()})", table,
                       f"One local SGD step of simple_cnn (batch 10, 28x28x1, 62 classes) "
                       f"timed alone, in a rolled / unrolled lax.scan of {args.steps} steps, "
                       f"vmapped over {args.cohort} clients, and both; 'batch' = one model on "
                       f"{args.cohort} x 10 rows; conv = core/conv.py implementation "
                       f"({', '.join(impls)}). {args.repeats} repeats after a warm-up.")
    return rows


if __name__ == "__main__":
    main()
