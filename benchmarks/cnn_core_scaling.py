"""How the CPU's cores share a CNN's local steps: simple_cnn's SGD step on one core, on all
cores in one device, on the CPU split into one device per core (one process), and in one
single-core process per core (the layout of Flower's simulation: one actor per core).

Each case runs `steps` local SGD steps of `simple_cnn` (batch 10, dropout on, the CPU's
default convolution, `core/conv.py`) per client in a rolled `lax.scan`, the
shape of a round's local loop, for the peers' two workloads (`benchmarks/peer_workloads.py`):
FEMNIST (28x28x1, 62 classes) and CIFAR-10 (32x32x3, 10 classes). Each case runs in its own
process, so that its thread settings hold from JAX's first operation:

  * ``one core``: one client, XLA's intra-op threads off, the process pinned to one core.
  * ``one device, all cores``: one client, XLA's intra-op threads over every core.
  * ``one device per core``: `jax_num_cpu_devices` = cores, one client per device at the same
    time (`shard_map`), as `fedjax-appeal run`'s automatic layout trains a CPU cohort.
  * ``one process per core``: `cores` copies of ``one core`` at the same time, each pinned to
    its own core.
  * ``torch, one core`` and ``torch, one process per core``: the peer, the same model and
    step as a PyTorch user writes it (`nn.Sequential` of the same layers, `torch.optim.SGD`,
    `zero_grad` / `backward` / `step`), one torch thread per process: the layout of Flower's
    simulation of these workloads (one client actor per core). Run by `--torch-python` (a
    Python with torch, default the Flower venv of `peer_workloads.py`); left out, and said
    so, when there is none.

Reported per case: machine throughput in client steps per second, its ratio to `cores` x the
same framework's one-core rate (the ideal of perfect scaling), its ratio to torch's one
process per core, and the FLOP rate (xla cost analysis of one step, the same for both).

    python benchmarks/cnn_core_scaling.py --steps 50 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results, time_repeats  # noqa: E402  (stdlib only: torch's Python too)

WORKLOADS = {"femnist": ((28, 28), 62), "cifar10": ((32, 32, 3), 10)}
CASES = ("one core", "one device, all cores", "one device per core", "one process per core")
TORCH_CASES = ("torch, one core", "torch, one process per core")
FLOWER_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".flower_venv", "bin",
                             "python")


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
    secs = time_repeats(lambda: jax.block_until_ready(f(p, keys)), repeats)  # after a warm-up
    return {"secs": secs, "devices": n, "step_flops": flops}


def torch_worker(workload: str, steps: int, repeats: int) -> dict:
    """The peer's `steps` SGD steps of the same model, one torch thread (runs under torch)."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    shape, classes = WORKLOADS[workload]
    hw, ch = shape[0], (shape[2] if len(shape) == 3 else 1)
    net = nn.Sequential(nn.Conv2d(ch, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
                        nn.Linear(((hw - 4) // 2) ** 2 * 64, 128), nn.ReLU(), nn.Dropout(0.5),
                        nn.Linear(128, classes))
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.ones((10, hw, hw, ch), dtype=torch.uint8)
    y = torch.zeros((10,), dtype=torch.int64)

    def local():
        for _ in range(steps):
            xf = (x.float() / 255.0).permute(0, 3, 1, 2)  # uint8 pixels scaled to [0, 1]
            opt.zero_grad()
            nn.functional.cross_entropy(net(xf), y).backward()
            opt.step()

    return {"secs": time_repeats(local, repeats), "devices": 1, "step_flops": None}


def spawn(case: str, workload: str, steps: int, repeats: int, cores: int,
          core: int | None = None, python: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    if case in ("one core", "one process per core"):
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    python = python or sys.executable
    cmd = [python, os.path.abspath(__file__), "--worker", case, "--workload", workload,
           "--steps", str(steps), "--repeats", str(repeats), "--cores", str(cores)]
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=pin)


def measure(case: str, workload: str, steps: int, repeats: int, cores: int,
            python: str | None = None) -> dict:
    """Client steps per second of the whole machine in `case` (median over repeats)."""
    usable = sorted(os.sched_getaffinity(0))  # the cores this process may use, by number
    if case.endswith("one process per core"):
        procs = [spawn(case, workload, steps, repeats, cores, core=usable[c], python=python)
                 for c in range(cores)]
    else:
        procs = [spawn(case, workload, steps, repeats, cores, python=python,
                       core=usable[0] if case.endswith("one core") else None)]
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
    """The RESULTS.md table of {(workload, case): machine_rate(...)}; the torch rows take
    their FLOPs per step from the same workload's "one core" row (the same model)."""
    lines = [f"| workload | case | client steps/s (median; best) | ms per step per core | "
             f"× {cores} one-core rates (same framework) | × torch, one process per core | "
             f"GFLOP/s |", "|---|---|---|---|---|---|---|"]
    for (w, case), r in rows.items():
        torch_side = case.startswith("torch")
        one = rows[w, "torch, one core" if torch_side else "one core"]["steps_per_s"]
        used = 1 if case.endswith("one core") else cores
        peer = rows.get((w, "torch, one process per core"))
        vs = f"{r['steps_per_s'] / peer['steps_per_s']:.2f}×" if peer else "—"
        flops = rows[w, "one core"]["step_flops"]
        lines.append(f"| {w} | {case} | {r['steps_per_s']:.1f}; {r['steps_per_s_best']:.1f} | "
                     f"{1e3 * used / r['steps_per_s']:.1f} | "
                     f"{r['steps_per_s'] / (cores * one):.2f} | {vs} | "
                     f"{r['steps_per_s'] * flops / 1e9:.1f} |")
    return "\n".join(lines)


def torch_python(path: str) -> str | None:
    """`path` if torch imports there, else None (the torch rows are then left out)."""
    if not path or not os.path.exists(path):
        return None
    ok = subprocess.run([path, "-c", "import torch, numpy"], capture_output=True).returncode
    return path if ok == 0 else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50, help="local steps per client and call")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workloads", default="femnist,cifar10")
    ap.add_argument("--cores", type=int, default=0,
                    help="0 = the cores this process may use (at most that many)")
    ap.add_argument("--torch-python", default=FLOWER_PYTHON,
                    help="a Python with torch for the peer's rows (default: the Flower venv of "
                         "peer_workloads.py); rows left out when torch does not import there")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--worker", choices=CASES + TORCH_CASES, help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker in TORCH_CASES:
        print(json.dumps(torch_worker(args.workload, args.steps, args.repeats)))
        return None
    if args.worker:  # pinned by its parent: --cores says how many devices to make
        print(json.dumps(worker(args.worker, args.workload, args.steps, args.repeats,
                                args.cores)))
        return None
    usable = len(os.sched_getaffinity(0))
    if args.cores > usable:
        raise SystemExit(f"cnn_core_scaling: --cores {args.cores} is more than the {usable} "
                         f"core(s) this process may use; pass --cores {usable} or fewer")
    cores = args.cores or usable
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        raise SystemExit(f"cnn_core_scaling: unknown workload {bad[0]!r}; choose from "
                         f"{', '.join(WORKLOADS)}")
    tpy = torch_python(args.torch_python)
    if tpy is None:
        print(f"cnn_core_scaling: no torch at {args.torch_python}: the torch rows are left out "
              f"(pass --torch-python)", flush=True)
    rows = {}
    for w in names:
        for case in CASES + (TORCH_CASES if tpy else ()):
            rows[w, case] = measure(case, w, args.steps, args.repeats, cores,
                                    python=tpy if case in TORCH_CASES else None)
            r = rows[w, case]
            print(f"{w:8s} {case:28s} {r['steps_per_s']:7.1f} client steps/s", flush=True)
    text = table(rows, cores)
    print(text)
    if not args.no_append:
        append_results(f"simple_cnn local steps over the CPU's {cores} cores (cpu)", text,
                       f"Each case: {args.steps} local SGD steps of simple_cnn (batch 10, dropout "
                       f"on, conv auto) per client in a rolled lax.scan (torch: the same "
                       f"model and steps in a Python loop, torch.optim.SGD, one thread), "
                       f"{args.repeats} "
                       f"repeats after a warm-up, each case in its own process(es); 'ms per step "
                       f"per core' = cores in use / machine rate; '× one-core rates' = machine "
                       f"rate over {cores} x the one-core case's rate (1.00 = perfect scaling).")
    return rows


if __name__ == "__main__":
    main()
