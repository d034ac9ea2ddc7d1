"""How the CPU's cores share a CNN's local steps: simple_cnn's SGD step on one core, on all
cores in one device, on the CPU split into one device per core (one process), and in one
single-core process per core (the layout of Flower's simulation: one actor per core).

Each case runs `steps` local SGD steps of `simple_cnn` (batch 10, dropout on, the CPU's
default convolution `patches_train`, `core/conv.py`) per client in a rolled `lax.scan`, the
shape of a round's local loop, for the peers' two workloads (`benchmarks/peer_workloads.py`):
FEMNIST (28x28x1, 62 classes) and CIFAR-10 (32x32x3, 10 classes). Each case runs in its own
process, so that its thread settings hold from JAX's first operation:

  * ``one core``: one client, XLA's intra-op threads off, the process pinned to one core.
  * ``one device, all cores``: one client, XLA's intra-op threads over every core.
  * ``one device per core``: `jax_num_cpu_devices` = cores, one client per device at the same
    time (`shard_map`), as `fedjax-appeal run`'s automatic layout trains a CPU cohort.
  * ``one process per core``: `cores` copies of ``one core`` at the same time, each pinned to
    its own core.

Reported per case: machine throughput in client steps per second, its ratio to `cores` x the
one-core rate (the ideal of perfect scaling) and the FLOP rate (xla cost analysis of one step).

    python benchmarks/cnn_core_scaling.py --steps 50 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WORKLOADS = {"femnist": ((28, 28), 62), "cifar10": ((32, 32, 3), 10)}
CASES = ("one core", "one device, all cores", "one device per core", "one process per core")


def worker(case: str, workload: str, steps: int, repeats: int, cores: int) -> dict:
    """Runs in a fresh process: seconds per call of `steps` steps (per device), step FLOPs."""
    import jax

    if case == "one device per core":
        jax.config.update("jax_num_cpu_devices", cores)
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from fedjax_appeal.core.models import make_model

    shape, classes = WORKLOADS[workload]
    m = make_model("simple_cnn", "x", classes, shape, jnp.uint8, conv_impl="auto")
    p, s = m.init(jax.random.key(0))
    x = jnp.ones((10, *shape), jnp.uint8)
    y = jnp.zeros((10,), jnp.int32)

    def step(q, k):
        g = jax.grad(lambda w: m.loss(w, s, x, y, train=True, key=k)[0])(q)
        return jax.tree.map(lambda a, b: a - 0.01 * b, q, g)

    def local(q, k):
        return jax.lax.scan(lambda c, kk: (step(c, kk), None), q, jax.random.split(k, steps))[0]

    flops = jax.jit(step).lower(p, jax.random.key(0)).compile().cost_analysis()
    flops = float((flops[0] if isinstance(flops, list) else flops).get("flops", 0.0))
    n = jax.device_count()
    keys = jax.random.split(jax.random.key(1), n)
    if n > 1:
        mesh = jax.make_mesh((n,), ("d",))
        f = jax.jit(jax.shard_map(lambda q, k: jax.tree.map(lambda a: a[None], local(q, k[0])),
                                  mesh=mesh, in_specs=(P(), P("d")), out_specs=P("d")))
        keys = jax.device_put(keys, jax.NamedSharding(mesh, P("d")))
    else:
        f = jax.jit(lambda q, k: local(q, k[0]))
    jax.block_until_ready(f(p, keys))
    secs = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(p, keys))
        secs.append(time.perf_counter() - t)
    return {"secs": secs, "devices": n, "step_flops": flops}


def spawn(case: str, workload: str, steps: int, repeats: int, cores: int,
          core: int | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    if case in ("one core", "one process per core"):
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", case, "--workload", workload,
           "--steps", str(steps), "--repeats", str(repeats), "--cores", str(cores)]
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=pin)


def measure(case: str, workload: str, steps: int, repeats: int, cores: int) -> dict:
    """Client steps per second of the whole machine in `case` (median over repeats)."""
    if case == "one process per core":
        procs = [spawn(case, workload, steps, repeats, cores, core=c) for c in range(cores)]
    else:
        procs = [spawn(case, workload, steps, repeats, cores, core=0 if case == "one core"
                       else None)]
    outs = []
    for pr in procs:
        out, _ = pr.communicate()
        if pr.returncode:
            raise SystemExit(f"cnn_core_scaling: the '{case}' worker failed (exit {pr.returncode})")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return machine_rate(outs, steps)


def machine_rate(outs: list[dict], steps: int) -> dict:
    """Client steps per second of the machine from its processes' worker results: each call
    of a process runs `steps` steps on each of its devices at once; the processes run at the
    same time, so their rates add (median call; best = fastest call)."""
    import numpy as np

    rate = sum(o["devices"] * steps / float(np.median(o["secs"])) for o in outs)
    best = sum(o["devices"] * steps / min(o["secs"]) for o in outs)
    return {"steps_per_s": rate, "steps_per_s_best": best, "step_flops": outs[0]["step_flops"]}


def table(rows: dict, cores: int) -> str:
    """The RESULTS.md table of {(workload, case): machine_rate(...)}."""
    lines = [f"| workload | case | client steps/s (median; best) | ms per step per core | "
             f"× {cores} one-core rates | GFLOP/s |", "|---|---|---|---|---|---|"]
    for (w, case), r in rows.items():
        one = rows[w, "one core"]["steps_per_s"]
        used = 1 if case == "one core" else cores
        lines.append(f"| {w} | {case} | {r['steps_per_s']:.1f}; {r['steps_per_s_best']:.1f} | "
                     f"{1e3 * used / r['steps_per_s']:.1f} | "
                     f"{r['steps_per_s'] / (cores * one):.2f} | "
                     f"{r['steps_per_s'] * r['step_flops'] / 1e9:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50, help="local steps per client and call")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workloads", default="femnist,cifar10")
    ap.add_argument("--cores", type=int, default=0, help="0 = the cores this process may use")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cores = args.cores or len(os.sched_getaffinity(0))
    if args.worker:
        print(json.dumps(worker(args.worker, args.workload, args.steps, args.repeats, cores)))
        return None
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        raise SystemExit(f"cnn_core_scaling: unknown workload {bad[0]!r}; choose from "
                         f"{', '.join(WORKLOADS)}")
    rows = {}
    for w in names:
        for case in CASES:
            rows[w, case] = measure(case, w, args.steps, args.repeats, cores)
            r = rows[w, case]
            print(f"{w:8s} {case:24s} {r['steps_per_s']:7.1f} client steps/s "
                  f"({r['steps_per_s'] * r['step_flops'] / 1e9:.1f} GFLOP/s)", flush=True)
    text = table(rows, cores)
    print(text)
    if not args.no_append:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _common import append_results

        append_results(f"simple_cnn local steps over the CPU's {cores} cores (cpu)", text,
                       f"Each case: {args.steps} local SGD steps of simple_cnn (batch 10, dropout "
                       f"on, conv patches_train) per client in a rolled lax.scan, {args.repeats} "
                       f"repeats after a warm-up, each case in its own process(es); 'ms per step "
                       f"per core' = cores in use / machine rate; '× one-core rates' = machine "
                       f"rate over {cores} x the one-core case's rate (1.00 = perfect scaling).")
    return rows


if __name__ == "__main__":
    main()
