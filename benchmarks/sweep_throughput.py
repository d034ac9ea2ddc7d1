"""Sweep throughput: a 45-config x 3-seed FedAvg grid as one `fedjax_appeal.run.sweep` vs one
`simulate` per run.

Workload: the FedAvg workload of `round_throughput.py` (FMNIST, Dirichlet(0.5) over
`--clients` clients, MLP [64, 30] with dropout, n_k-weighted average; imported from there),
cohort `--cohort`, with the appeal protocol off and no unseen clients, so that both sides
time FedAvg rounds only. Grid: client_lr in {0.1, 0.05, 0.01, 0.005, 0.001} x batch_size in
{32, 64, 128} x local_steps in {10, 30, 50}, seeds {0, 1, 2}: 135 runs of `--rounds` rounds.
client_lr is vmapped, batch_size and local_steps are static, so the sweep is 9 groups of
15 (lr, seed) runs each: 9 compilations of one vmapped program. By default the two sides
are interleaved per static group (`sweep` of that group, then its one-by-one runs), so that
both see the same load on a shared machine; `--no-interleave` runs the whole grid as one
`sweep` call first.

The other side runs the same 135 runs one by one, each a `simulate(alg, data, hp,
jax.random.key(seed))` of its configuration on the same federation (one `build` per static
group). With `--subset N` only N runs per static group are done one by one and the group's
sequential time is extrapolated as 15 x their mean (client_lr and the seed do not change the
work of a run); the output says so. Compilation is not extrapolated: a group's first
`simulate` compiles, the later ones hit JAX's caches (measured: ~0 s). The runs done on
both sides are also compared (final train loss), since a sweep row must equal its `simulate`
run up to float reassociation (amplified over many steps at the larger learning rates).

Reported: per static group and in total, training seconds (compile and evaluation apart),
run-rounds per second, and the throughput ratio = (sweep rounds/s per config) /
(single-run rounds/s) = sequential training time / sweep training time (target >= 1.0);
compile seconds and whole wall times (compile + evaluation + training) apart.

    python benchmarks/sweep_throughput.py --rounds 5 --vs-vmap   # all 135 runs on both sides,
                                                           #   and each group as one wide vmap
    python benchmarks/sweep_throughput.py --cpu-mode       # = --rounds 5 --subset 2 (~10 min
                                                           #   on 2 CPU cores)

`--cpu-devices N` splits the host CPU into N JAX devices (`run --cpu-devices N`) and times
both sides in their multi-device layouts: the sweep shards each batch's runs over the devices
(`sweep --devices N`), and each one-by-one run shards its cohort over them (`run --devices N`),
both with `--client-lanes` (default 1: a device trains its clients one at a time, the fastest
single-run layout measured on CPU, see round_throughput.py --cpu-lanes).

    python benchmarks/sweep_throughput.py --rounds 5 --cpu-devices 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, machine, write_json  # noqa: E402
from round_throughput import FMNIST_DIR, WORKLOAD, workload  # noqa: E402

from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.core.config import HParams  # noqa: E402
from fedjax_appeal.core.models import model_for  # noqa: E402
from fedjax_appeal.data import load_federated  # noqa: E402
from fedjax_appeal.execute.distributed import make_mesh, split_cpu  # noqa: E402
from fedjax_appeal.execute.executor import Executor  # noqa: E402
from fedjax_appeal.execute.layout import auto_split  # noqa: E402
from fedjax_appeal.run.simulate import simulate  # noqa: E402
from fedjax_appeal.run.sweep import sweep  # noqa: E402

LRS = [0.1, 0.05, 0.01, 0.005, 0.001]
BATCH_SIZES = [32, 64, 128]
LOCAL_STEPS = [10, 30, 50]
SEEDS = [0, 1, 2]
TARGET_RATIO = 1.0


def grid() -> dict[str, list]:
    return {"client_lr": LRS, "batch_size": BATCH_SIZES, "local_steps": LOCAL_STEPS}


def pick(n_combos: int, n: int, seed: int) -> list[int]:
    """n of the combination indices 0..n_combos-1 (all if n <= 0 or n >= n_combos)."""
    if n <= 0 or n >= n_combos:
        return list(range(n_combos))
    return sorted(np.random.default_rng(seed).choice(n_combos, n, replace=False).tolist())


def run_sweep(cfg, g: dict[str, list], data, ds, max_parallel: int, quiet: bool,
              lanes: int | None = None, mesh=None):
    """`sweep` of grid `g`: per static group its timing, per run its final evaluation."""
    say = None if quiet else (lambda msg: print("  " + msg, file=sys.stderr, flush=True))
    t = time.perf_counter()
    res = sweep(cfg, g, SEEDS, hp=HParams(), max_parallel=max_parallel, data=data,
                dataset=ds, progress=say, lanes=lanes, mesh=mesh)
    wall = time.perf_counter() - t
    groups = {}
    for g in res.timing["groups"]:
        key = (g["static"]["batch_size"], g["static"]["local_steps"])
        groups[key] = {k: g[k] for k in ("runs", "parallel", "lanes", "batches", "compile_s",
                                         "run_s", "eval_s")}
    final = {(r["static"]["batch_size"], r["static"]["local_steps"], r["hparams"]["client_lr"],
              r["seed"]): r["final"] for r in res.rows}
    return groups, final, wall


def run_one_by_one(cfg, data, ds, subset: int, quiet: bool, statics, mesh=None):
    """Per static group (b, tau): measured runs (train_s, compile_s, wall_s, final loss);
    with a `mesh`, each run's cohort is sharded over it."""
    combos = [(lr, s) for lr in LRS for s in SEEDS]  # the sweep's order inside a group
    out = {}
    for b, tau in statics:
        gi = BATCH_SIZES.index(b) * len(LOCAL_STEPS) + LOCAL_STEPS.index(tau)
        cfg_g = cfg.replace(batch_size=b, local_steps=tau)
        alg = build(cfg_g.algorithm, model_for(cfg_g.model, data, ds), cfg_g,
                    executor=Executor(cfg_g.client_chunk, mesh, cfg_g.client_lanes))
        runs = []
        for ci in pick(len(combos), subset, seed=gi):
            lr, seed = combos[ci]
            t = time.perf_counter()
            res = simulate(alg, data, HParams(client_lr=lr), jax.random.key(seed),
                           rounds=cfg.rounds, eval_every=cfg.eval_every, mesh=mesh)
            wall = time.perf_counter() - t
            tm = res.timing
            runs.append({"client_lr": lr, "seed": seed,
                         "train_s": tm["sec_per_round"] * cfg.rounds,
                         "compile_s": tm["compile_s"] + tm["eval_compile_s"], "wall_s": wall,
                         "train_loss": res.history[-1]["train_loss"]})
            if not quiet:
                print(f"  one-by-one b={b} tau={tau} lr={lr:g} seed={seed}: train "
                      f"{runs[-1]['train_s']:.2f}s, compile {runs[-1]['compile_s']:.1f}s, wall "
                      f"{wall:.1f}s", file=sys.stderr, flush=True)
        out[(b, tau)] = runs
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=None, help="rounds per run (default 20; "
                    "5 with --cpu-mode)")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--cohort", type=int, default=10)
    ap.add_argument("--subset", type=int, default=None,
                    help="runs per static group done one by one, the rest extrapolated "
                         "(0 = all 15; default 0, 2 with --cpu-mode)")
    ap.add_argument("--max-parallel", type=int, default=0,
                    help="sweep runs per vmapped batch (0 = as many as fit)")
    ap.add_argument("--lanes", type=int, default=-1,
                    help="sweep runs trained side by side (-1 = the library's default: 1 on "
                         "CPU, all elsewhere; 0 = all runs of a batch in one vmap)")
    ap.add_argument("--vs-vmap", action="store_true",
                    help="also time each group as one wide vmap (lanes = all), the layout "
                         "before --lanes, as its own column")
    ap.add_argument("--cpu-mode", action="store_true",
                    help="small settings for a 2-core CPU: --rounds 5 --subset 2")
    ap.add_argument("--no-interleave", action="store_true",
                    help="run the whole grid as one sweep call, then the one-by-one runs "
                         "(default: per static group, its sweep then its one-by-one runs, so "
                         "that both sides see the same machine load)")
    ap.add_argument("--cpu-devices", type=int, default=-1,
                    help="split the CPU into this many JAX devices: the sweep shards its "
                         "batches, each one-by-one run its cohort, over them (0 = one device; "
                         "default -1 = the automatic layout of `fedjax-appeal run`, "
                         "execute/layout.py)")
    ap.add_argument("--client-lanes", type=int, default=None,
                    help="clients a device trains side by side, both sides (default: 1 with "
                         "--cpu-devices, else 0 = the whole cohort in one vmap)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--no-append", action="store_true",
                    help="do not append a section to benchmarks/RESULTS.md (smoke tests)")
    ap.add_argument("--out", default=str(HERE / "results" / "sweep_throughput.json"))
    args = ap.parse_args()
    if args.cpu_devices < 0:  # the automatic layout, as `fedjax-appeal run/sweep` decide it
        args.cpu_devices = auto_split(args.cohort)
    elif args.cpu_devices > 1:
        split_cpu(args.cpu_devices)  # before JAX's first operation
    mesh = make_mesh(args.cpu_devices) if args.cpu_devices > 1 else None
    client_lanes = (args.client_lanes if args.client_lanes is not None
                    else (1 if mesh is not None else 0))
    lanes = None if args.lanes < 0 else args.lanes
    rounds = args.rounds if args.rounds is not None else (5 if args.cpu_mode else 20)
    subset = args.subset if args.subset is not None else (2 if args.cpu_mode else 0)

    cfg = workload(args.cohort, clients=args.clients, fmnist_dir=args.fmnist_dir).replace(
        appeal=False, rounds=rounds, eval_every=rounds, client_lanes=client_lanes)
    t = time.perf_counter()
    data, ds = load_federated(cfg)
    load_s = time.perf_counter() - t
    n_cfg = len(LRS) * len(BATCH_SIZES) * len(LOCAL_STEPS)
    n_runs = n_cfg * len(SEEDS)
    print(f"{n_cfg} configs x {len(SEEDS)} seeds = {n_runs} runs of {rounds} rounds; "
          f"{cfg.clients} clients, cohort {cfg.cohort}; backend {jax.default_backend()}; "
          f"data loaded in {load_s:.1f}s", flush=True)

    statics = [(b, t) for b in BATCH_SIZES for t in LOCAL_STEPS]
    per_group = len(LRS) * len(SEEDS)
    if args.no_interleave:
        sw_groups, sw_final, sw_wall = run_sweep(cfg, grid(), data, ds, args.max_parallel,
                                                 args.quiet, lanes, mesh)
        vm_groups = (run_sweep(cfg, grid(), data, ds, args.max_parallel, args.quiet, 0,
                               mesh)[0] if args.vs_vmap else {})
        seq = run_one_by_one(cfg, data, ds, subset, args.quiet, statics, mesh)
    else:
        sw_groups, sw_final, sw_wall, seq, vm_groups = {}, {}, 0.0, {}, {}
        for b, tau in statics:
            g = {"client_lr": LRS, "batch_size": [b], "local_steps": [tau]}
            gr, fi, wall = run_sweep(cfg, g, data, ds, args.max_parallel, args.quiet, lanes,
                                     mesh)
            sw_groups.update(gr)
            sw_final.update(fi)
            sw_wall += wall
            if args.vs_vmap:  # the same group as one wide vmap (lanes = all runs)
                vm_groups.update(run_sweep(cfg, g, data, ds, args.max_parallel, args.quiet,
                                           0, mesh)[0])
            seq.update(run_one_by_one(cfg, data, ds, subset, args.quiet, [(b, tau)], mesh))
    print(f"sweep: wall {sw_wall:.1f}s", flush=True)

    rows, diffs = [], []
    tot = {"sweep_train_s": 0.0, "sweep_compile_s": 0.0, "sweep_eval_s": 0.0,
           "seq_train_s": 0.0, "seq_compile_s": 0.0, "seq_wall_s": 0.0, "vmap_train_s": 0.0}
    for key, runs in seq.items():
        b, tau = key
        g = sw_groups[key]
        n = g["runs"]
        scale = n / len(runs)  # 1 when every run was done one by one
        seq_train = scale * sum(r["train_s"] for r in runs)
        # Compilation is paid by the group's first run only (jit caches serve the later runs
        # of the same program), so it is not extrapolated; the rest of a run's wall time is.
        seq_compile = sum(r["compile_s"] for r in runs)
        seq_wall = seq_compile + scale * sum(r["wall_s"] - r["compile_s"] for r in runs)
        for r in runs:
            r["sweep_train_loss"] = sw_final[(b, tau, r["client_lr"], r["seed"])]["train_loss"]
            diffs.append(abs(r["sweep_train_loss"] - r["train_loss"])
                         / max(1e-6, abs(r["train_loss"])))
        sweep_rps = n * rounds / g["run_s"]  # run-rounds per second of the sweep
        single_rps = len(runs) * rounds / sum(r["train_s"] for r in runs)
        rows.append({"batch_size": b, "local_steps": tau, "runs": n, "measured_one_by_one":
                     len(runs), "sweep_parallel": g["parallel"], "sweep_batches": g["batches"],
                     "sweep_train_s": g["run_s"], "sweep_compile_s": g["compile_s"],
                     "sweep_eval_s": g["eval_s"], "seq_train_s": seq_train,
                     "seq_compile_s": seq_compile, "seq_wall_s": seq_wall,
                     "sweep_rounds_per_s_per_config": sweep_rps,
                     "single_rounds_per_s": single_rps, "ratio": sweep_rps / single_rps,
                     "sweep_lanes": g["lanes"],
                     "vmap_train_s": vm_groups[key]["run_s"] if key in vm_groups else None,
                     "one_by_one_runs": runs})
        if key in vm_groups:
            tot["vmap_train_s"] += vm_groups[key]["run_s"]
        tot["sweep_train_s"] += g["run_s"]
        tot["sweep_compile_s"] += g["compile_s"]
        tot["sweep_eval_s"] += g["eval_s"]
        tot["seq_train_s"] += seq_train
        tot["seq_compile_s"] += seq_compile
        tot["seq_wall_s"] += seq_wall
    ratio = tot["seq_train_s"] / tot["sweep_train_s"]
    measured = sum(len(r) for r in seq.values())
    extrapolated = measured < n_runs
    result = {
        "machine": machine(), "backend": jax.default_backend(), "workload": WORKLOAD
        + f"; tau, b, lr from the grid; cohort {cfg.cohort}, {cfg.clients} clients, appeal off"
        + (f"; CPU split into {args.cpu_devices} devices: the sweep shards its batches, each "
           f"one-by-one run its cohort over them; --client-lanes {client_lanes} on both sides"
           if mesh is not None else ""),
        "grid": grid(), "seeds": SEEDS, "rounds": rounds, "runs": n_runs,
        "one_by_one_measured": measured, "one_by_one_extrapolated": extrapolated,
        "subset_per_group": subset, "runs_per_group": per_group,
        "interleaved": not args.no_interleave, "groups": rows,
        "totals": {**tot, "sweep_wall_s": sw_wall}, "ratio": ratio,
        "target_ratio": TARGET_RATIO, "max_rel_diff_final_train_loss": max(diffs),
        "data_load_s": load_s}
    write_json(Path(args.out), result)

    vm = bool(vm_groups)

    def vm_cell(train_s, seq_s):
        return f" {train_s:.1f} ({seq_s / train_s:.2f}) |" if vm else ""

    lines = ["| b | tau | runs (one by one measured) | sweep lanes | sweep train s | "
             "one-by-one train s | sweep run-rounds/s | single-run rounds/s | ratio |"
             + (" one wide vmap: train s (ratio) |" if vm else "")
             + " compile s sweep / one-by-one |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if vm else "") + "---|"]
    for r in rows:
        lines.append(f"| {r['batch_size']} | {r['local_steps']} | {r['runs']} "
                     f"({r['measured_one_by_one']}) | {r['sweep_lanes']} | "
                     f"{r['sweep_train_s']:.1f} | "
                     f"{r['seq_train_s']:.1f} | {r['sweep_rounds_per_s_per_config']:.2f} | "
                     f"{r['single_rounds_per_s']:.2f} | {r['ratio']:.2f} |"
                     + (vm_cell(r['vmap_train_s'], r['seq_train_s']) if vm else "")
                     + f" {r['sweep_compile_s']:.1f} / {r['seq_compile_s']:.1f} |")
    lines.append(f"| all | | {n_runs} ({measured}) | | {tot['sweep_train_s']:.1f} | "
                 f"{tot['seq_train_s']:.1f} | {n_runs * rounds / tot['sweep_train_s']:.2f} | "
                 f"{n_runs * rounds / tot['seq_train_s']:.2f} | **{ratio:.2f}** |"
                 + (vm_cell(tot['vmap_train_s'], tot['seq_train_s']) if vm else "")
                 + f" {tot['sweep_compile_s']:.1f} / {tot['seq_compile_s']:.1f} |")
    ok = "meets" if ratio >= TARGET_RATIO else "MISSES"
    how = (f"one by one: {measured} of {n_runs} runs measured ({subset} per static group), the "
           "rest EXTRAPOLATED as 15 x the group's mean (training and wall time less "
           "compilation; compilation is paid once per group, later runs hit the jit cache)"
           if extrapolated
           else f"one by one: all {n_runs} runs measured")
    order = ("per static group, its sweep then its one-by-one runs (interleaved)"
             if not args.no_interleave else "the whole sweep first, then the one-by-one runs")
    notes = (f"Workload: {result['workload']}; {rounds} rounds per run, evaluation at rounds 0 "
             f"and {rounds}. Order: {order}. {how}. Ratio = (sweep rounds/s per config) / "
             f"(single-run rounds/s) = one-by-one train s / sweep train s: {ratio:.2f} ({ok} "
             f"the target >= {TARGET_RATIO}). Wall (compile + evaluation + training): sweep "
             f"{sw_wall:.1f}s, one by one {tot['seq_wall_s']:.1f}s"
             f"{' (extrapolated)' if extrapolated else ''}. Sweep vs simulate final train loss: "
             f"max relative difference {max(diffs):.1e} over the {measured} runs done on both "
             "sides."
             + (" One wide vmap = the same group swept again with every run of a batch in "
                "one vmap (lanes = all; the layout before `--lanes`), ratio = one-by-one "
                "train s / its train s." if vm else ""))
    if not args.no_append:
        append_results(f"Sweep throughput, 45 configs x 3 seeds ({jax.default_backend()})",
                       "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


if __name__ == "__main__":
    main()
