"""Seconds per FedAvg round: fedjax_appeal (vmapped cohort, jitted scan) against fair
peers run in the same job, with a roofline.

Workload: FedAvg, Fashion-MNIST, Dirichlet(0.5), MLP [64, 30] with dropout, tau = 50 local
SGD steps of batch 64 per client, n_k-weighted average. 100 clients for cohorts 10 and 100;
a cohort of 1000 uses 1000 clients (same data, same partition recipe).

Peers (same client arrays, same computation):
  * PyTorch, four programs a PyTorch user would write (`torch_peer.py`): the plain loop
    with `load_state_dict`, the loop with `torch.func.functional_call`, the cohort batched
    with `torch.func.vmap`, and, as its own labelled column, the loop with a DataLoader.
    Tensors stay on the device; intra-op threads are the faster of 1 and all cores,
    calibrated per variant (`--torch-threads` fixes them).
  * FedJAX 0.0.17 (`--fedjax`; its own venv, see `peer_fedjax.py`), after the others.

Ours and the PyTorch variants are timed interleaved (each repeat times every side once),
so load changes on a shared machine hit all sides alike. Each figure is min / median over
repeats of whole rounds, compile time apart; the ratio is peer median / ours median.

Roofline: the same run measures the device's fp32 matmul peak (best `jnp.dot` of two
2048 x 2048 matrices, at the start and the end) and reports our achieved FLOP/s (cohort x
tau x XLA's FLOP count of one local step, over our best s/round) as a share of it.

`--cpu-devices N` also times our round with the host CPU split into N JAX devices and the
cohort sharded over them (`run --cpu-devices N --devices N`): XLA:CPU runs a vmapped
cohort's small batched matmuls on about one core, and each device then computes its share.
`--cpu-lanes 0,1` gives one such column per `--client-lanes` value (0 = each device's share
in one vmap; L = L of them at a time in a loop on each device).

    python benchmarks/round_throughput.py --cohorts 10,100 --repeats 5 --fedjax \
        --cpu-devices 2 --cpu-lanes 0,1
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    HERE,
    append_results,
    machine,
    matmul_peak,
    stats,
    step_flops,
    time_repeats,
    write_json,
)
from torch_peer import LABELS, VARIANTS, make_torch_round  # noqa: E402

from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.core.config import HParams, RunConfig  # noqa: E402
from fedjax_appeal.core.models import model_for  # noqa: E402
from fedjax_appeal.data import load_federated  # noqa: E402
from fedjax_appeal.execute.distributed import make_mesh, replicate, split_cpu  # noqa: E402
from fedjax_appeal.execute.executor import Executor  # noqa: E402
from fedjax_appeal.run.driver import make_chunk, split_key  # noqa: E402

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
WORKLOAD = "FedAvg FMNIST Dirichlet(0.5), MLP[64,30], tau=50, b=64"
HP = HParams(client_lr=0.05)


def workload(cohort: int, clients: int | None = None, fmnist_dir: str = FMNIST_DIR) -> RunConfig:
    """The benchmark's FedAvg configuration (see the module docstring) for one cohort size.

    `clients` defaults to max(100, cohort). Other benchmarks import this, so that they all
    run the same workload.
    """
    clients = max(100, cohort) if clients is None else clients
    return RunConfig(dataset="fmnist", fmnist_dir=fmnist_dir, partition="dirichlet", alpha=0.5,
                     clients=clients, unseen_clients=0, cohort=cohort, local_steps=50,
                     batch_size=64, min_samples=10)


def jax_round_calls(cfg, hp, rounds_per_call):
    """Our FedAvg as a callable running `rounds_per_call` rounds (one compiled scan chunk).

    Returns:
      (call, compile seconds, data, dataset, parameter count).
    """
    data, ds = load_federated(cfg)
    model = model_for(cfg.model, data, ds, cfg.conv_impl, cfg.precision)
    mesh = make_mesh(cfg.devices)  # None for one device
    alg = build("fedavg", model, cfg,
                executor=Executor(cfg.client_chunk, mesh, cfg.client_lanes))
    data = replicate(data, mesh)
    hp = hp.as_arrays()
    k_init, k_train = split_key(jax.random.key(cfg.seed))
    state = replicate(jax.jit(alg.init)(k_init, data, hp), mesh)
    rounds = jnp.arange(rounds_per_call, dtype=jnp.int32)
    t = time.perf_counter()
    chunk = jax.jit(make_chunk(alg)).lower(state, data, k_train, hp, rounds).compile()
    compile_s = time.perf_counter() - t
    box = {"state": state, "r": 0}

    def call():
        rr = rounds + box["r"]
        box["state"], _ = chunk(box["state"], data, k_train, hp, rr)
        jax.block_until_ready(box["state"].params)
        box["r"] += rounds_per_call

    call()  # warm-up
    call.compiled = chunk  # its optimized HLO: `chunk.as_text()` (profile_round.py)
    n_params = sum(a.size for a in jax.tree.leaves(state.params))
    return call, compile_s, data, ds, n_params


def jax_round_times(cfg, hp, rounds_per_call, repeats):
    """Seconds per round of `jax_round_calls` over `repeats` calls.

    Returns:
      (seconds per round, compile seconds, data, dataset, parameter count).
    """
    call, compile_s, data, ds, n_params = jax_round_calls(cfg, hp, rounds_per_call)
    secs = [t / rounds_per_call for t in time_repeats(call, repeats, warmup=0)]
    return secs, compile_s, data, ds, n_params


def pick_threads(data, ds, cfg, hp, device: str, variant: str, choice: str) -> int:
    """Intra-op threads for a PyTorch variant: a number, or "auto" = the faster of 1 and all
    cores over two calibration rounds each (OpenMP threads that spin on a busy machine can
    make the all-cores setting several times slower than one thread)."""
    if choice != "auto":
        return int(choice)
    cores = os.cpu_count() or 1
    if device != "cpu" or cores == 1:
        return cores
    best = None
    for n in (cores, 1):
        f = make_torch_round(data, ds, cfg, hp, device, variant, n)
        f()
        t = min(time_repeats(f, 2, warmup=0))
        if best is None or t < best[0]:
            best = (t, n)
    return best[1]


def torch_round_times(data, ds, cfg, hp, repeats, device, variant="loop", threads="auto"):
    """Seconds per round of one PyTorch variant (see `torch_peer`), threads as `pick_threads`.

    Returns:
      (seconds per round, torch version, threads used).
    """
    import torch

    n = pick_threads(data, ds, cfg, hp, device, variant, str(threads))
    f = make_torch_round(data, ds, cfg, hp, device, variant, n)
    return time_repeats(f, repeats), torch.__version__, n


def _cpu_key(lanes: int) -> str:
    """Row key of the --cpu-devices column with these --client-lanes."""
    return "cpudev" if lanes <= 0 else f"cpudev_lanes{lanes}"


def _cell(st: dict | None) -> str:
    return "—" if not st else f"{st['min']:.4f} / {st['median']:.4f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", default="10,100")
    ap.add_argument("--repeats", type=int, default=5,
                    help="timed rounds per side, interleaved (ours, then each peer)")
    ap.add_argument("--torch-variants", default="loop,func,vmap,dataloader",
                    help="comma list of " + ",".join(VARIANTS) + " ('' = none)")
    ap.add_argument("--torch-threads", default="auto",
                    help="intra-op threads of the PyTorch peers: a number or auto")
    ap.add_argument("--torch-max-cohort", type=int, default=100,
                    help="skip the PyTorch loops above this cohort (they scale linearly)")
    ap.add_argument("--fedjax", action="store_true",
                    help="also time FedJAX 0.0.17 in its own venv (see peer_fedjax.py)")
    ap.add_argument("--client-lanes", default="",
                    help="also time ours with these --client-lanes values, comma list (e.g. "
                         "1,10: clients side by side, the groups in a loop), interleaved")
    ap.add_argument("--cpu-devices", type=int, default=0,
                    help="also time ours with the CPU split into this many devices and the "
                         "cohort sharded over them (0 = no such column)")
    ap.add_argument("--cpu-lanes", default="0",
                    help="with --cpu-devices: one column per --client-lanes value, comma "
                         "list (0 = each device's clients in one vmap)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-append", action="store_true",
                    help="do not append a section to benchmarks/RESULTS.md")
    ap.add_argument("--out", default=str(HERE / "results" / "round_throughput.json"))
    args = ap.parse_args()
    if args.cpu_devices > 1:
        split_cpu(args.cpu_devices)  # before JAX's first operation
    cpu_lanes = ([int(x) for x in args.cpu_lanes.split(",") if x] if args.cpu_devices > 1
                 else [])

    hp = HP
    on_gpu = jax.default_backend() == "gpu"
    device = "cuda" if on_gpu else "cpu"
    variants = [v for v in args.torch_variants.split(",") if v]
    if variants and importlib.util.find_spec("torch") is None:
        sys.exit("round_throughput: error: PyTorch is not installed (pip install torch), "
                 "or pass --torch-variants ''")
    peak = matmul_peak()
    print(f"matmul peak: {peak['best_flops'] / 1e9:.1f} GFLOP/s (fp32, n={peak['n']})",
          flush=True)
    fedjax_py = None
    if args.fedjax:
        from peer_fedjax import PEER_VENV, PeerError, ensure_venv, run_peer, save_clients
        try:
            fedjax_py = ensure_venv(PEER_VENV, sys.executable)
        except PeerError as e:
            sys.exit(f"round_throughput: error: {e}")
    rows = []
    for m in [int(c) for c in args.cohorts.split(",")]:
        cfg = workload(m, fmnist_dir=args.fmnist_dir)
        rpc = 4 if m <= 10 else (2 if m <= 100 else 1)
        ours, compile_s, data, ds, n_params = jax_round_calls(cfg, hp, rpc)
        flops_round = m * cfg.local_steps * step_flops(model_for(cfg.model, data, ds),
                                                       cfg.batch_size)[0]
        calls = {"ours": (ours, rpc)}
        lane_set = [int(x) for x in args.client_lanes.split(",") if x]
        for lanes in lane_set:
            f, _, _, _, _ = jax_round_calls(cfg.replace(client_lanes=lanes), hp, rpc)
            calls[f"lanes{lanes}"] = (f, rpc)
        for lanes in cpu_lanes:
            f, _, _, _, _ = jax_round_calls(cfg.replace(devices=args.cpu_devices,
                                                        client_lanes=lanes), hp, rpc)
            calls[_cpu_key(lanes)] = (f, rpc)
        threads = {}
        if m <= args.torch_max_cohort:
            for v in variants:
                threads[v] = pick_threads(data, ds, cfg, hp, device, v, args.torch_threads)
                f = make_torch_round(data, ds, cfg, hp, device, v, threads[v])
                f()  # warm-up
                calls[v] = (f, 1)
        secs = {k: [] for k in calls}
        for _ in range(args.repeats):  # interleaved: each repeat times every side once
            for k, (f, per_call) in calls.items():
                secs[k].append(time_repeats(f, 1, warmup=0)[0] / per_call)
        row = {"cohort": m, "clients": cfg.clients, "jax_compile_s": compile_s,
               "flops_per_round": flops_round, "n_params": n_params,
               **{k: stats(v) for k, v in secs.items()}, "torch_threads": threads}
        row["achieved_flops"] = flops_round / row["ours"]["min"]
        row["share_of_peak"] = row["achieved_flops"] / peak["best_flops"]
        for k in [f"lanes{lanes}" for lanes in lane_set] + [_cpu_key(x) for x in cpu_lanes]:
            row[f"speedup_{k}"] = row["ours"]["median"] / row[k]["median"]
            row[f"achieved_flops_{k}"] = flops_round / row[k]["min"]
        if fedjax_py is not None:
            with tempfile.TemporaryDirectory() as tmp:
                npz = Path(tmp) / "clients.npz"
                save_clients(data, ds, npz)
                res = run_peer(fedjax_py, Path(tmp), npz, m, args.repeats, cfg)
            row["fedjax"] = stats(res["secs"])
            row["fedjax_train_acc"] = res["train_acc"]
        for k in [*variants, "fedjax"]:
            if k in row:
                row[f"ratio_{k}"] = row[k]["median"] / row["ours"]["median"]
                for c in [_cpu_key(x) for x in cpu_lanes]:
                    row[f"ratio_{k}_vs_{c}"] = row[k]["median"] / row[c]["median"]
        print(f"cohort {m:5d}: ours {_cell(row['ours'])} s/round, "
              f"{row['achieved_flops'] / 1e9:.1f} GFLOP/s ({100 * row['share_of_peak']:.0f}% "
              "of peak); " + ", ".join(f"{k} {row[k]['median']:.4f} ({row['ratio_' + k]:.2f}x)"
                                       for k in [*variants, "fedjax"] if k in row), flush=True)
        rows.append(row)
    peak_end = matmul_peak()
    if peak_end["best_flops"] > peak["best_flops"]:
        peak = peak_end
        for r in rows:
            r["share_of_peak"] = r["achieved_flops"] / peak["best_flops"]

    result = {"machine": machine(), "backend": jax.default_backend(), "rows": rows,
              "workload": WORKLOAD, "matmul_peak": peak, "torch_device": device}
    write_json(Path(args.out), result)
    peers = [k for k in [*variants, "fedjax"] if any(k in r for r in rows)]
    lane_keys = sorted({k for r in rows for k in r if k.startswith("speedup_")})
    lane_keys = [k.removeprefix("speedup_") for k in lane_keys]
    head = (["cohort", "ours s/round (min / median)", "GFLOP/s (share of matmul peak)"]
            + [(f"ours, --client-lanes {k.removeprefix('lanes')} (min / median; speed-up; "
                "share of peak)") if not k.startswith("cpudev") else
               (f"ours, --cpu-devices {args.cpu_devices} --devices {args.cpu_devices}"
                + (f" --client-lanes {k.removeprefix('cpudev_lanes')}" if k != "cpudev" else "")
                + " (min / median; speed-up; share of peak; each peer's ratio to it)")
               for k in lane_keys]
            + [f"{LABELS.get(k, 'FedJAX 0.0.17')} (min / median; ratio)" for k in peers])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["cohort"]), _cell(r["ours"]),
                 f"{r['achieved_flops'] / 1e9:.1f} ({100 * r['share_of_peak']:.0f}%)"]
        cells += [f"{_cell(r[k])}; {r['speedup_' + k]:.2f}×; "
                  f"{100 * r['achieved_flops_' + k] / peak['best_flops']:.0f}%"
                  + "".join(f"; {LABELS.get(v, 'FedJAX')} {r[f'ratio_{v}_vs_{k}']:.2f}×"
                            for v in peers if f"ratio_{v}_vs_{k}" in r)
                  if k in r else "—" for k in lane_keys]
        cells += [f"{_cell(r.get(k))}; {r['ratio_' + k]:.2f}×" if k in r else "—" for k in peers]
        lines.append("| " + " | ".join(cells) + " |")
    notes = ("Workload: " + WORKLOAD + f"; {args.repeats} interleaved repeats per side "
             "(ours, then each PyTorch variant, in turn; FedJAX in its own process after them). "
             "Ratio = peer median / ours median (ours = one vmap over the cohort); "
             "speed-up of a --client-lanes or --cpu-devices column = ours median / its "
             "median. GFLOP/s = "
             "cohort x tau x XLA's FLOPs of one local step / our best s/round; matmul peak = "
             "best fp32 jnp.dot "
             f"({peak['n']}x{peak['n']}) measured in the same run: "
             f"{peak['best_flops'] / 1e9:.1f} GFLOP/s. PyTorch threads per variant and cohort "
             "(auto = faster of 1 and all cores): "
             + "; ".join(f"{r['cohort']}: {r['torch_threads']}" for r in rows) + ".")
    if not args.no_append:
        append_results(f"FedAvg round throughput vs fair peers ({jax.default_backend()})",
                       "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


if __name__ == "__main__":
    main()
