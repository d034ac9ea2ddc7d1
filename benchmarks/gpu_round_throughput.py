"""FedAvg seconds per round, samples/s and achieved FLOP/s against the device's peak, for
cohorts up to 10,000 clients, with the sequential PyTorch loop of `round_throughput.py` as
the reference on the same device.

Workloads (tau = 50 local SGD steps of batch 64 per client, n_k-weighted average):

  * FMNIST, MLP [64, 30]: the workload of `round_throughput.py` (imported from there),
    Dirichlet(0.5), cohorts 10 / 100 / 1000 / 10000 over max(100, cohort) clients. FMNIST's
    70,000 rows cannot give 10,000 clients a Dirichlet(0.5) share of >= 2 rows each, so
    above 1,000 clients the partition is `classes` (3 labels per client, >= 2 rows); a
    round's work (tau x b rows per client) does not depend on the partition.
  * CIFAR-10, `cnn` (2 conv + FC [120, 100, 84, 50]; dataset `cifar10` from
    $FEDJAX_APPEAL_DATA), Dirichlet(0.5), cohorts 10 / 100 / 1000.

Each figure is min / median over `--repeats` timed calls of whole rounds (one jitted
`lax.scan` chunk of rounds), compile time apart. FLOPs per round = cohort x tau x the FLOPs
of one local SGD step (gradient of a b-row minibatch + update), the step counted by XLA
(`jax.jit(step).lower(...).compile().cost_analysis()`); XLA counts a loop body once, not
once per trip, so the scanned round itself is not counted that way. Where the backend gives
no cost analysis the count is taken from the step's jaxpr (dot_general and convolution
FLOPs only); the table says which. Utilisation is against a table of peak FLOP/s (fp32 and
dense bf16 tensor-core peaks, e.g. H100 SXM / H200: 67 / 989 TFLOP/s) looked up by the
device name, or `--peak-flops`; 'n/a' for CPUs unless given. The computation is float32.

Two PyTorch peers (`torch_peer.py`: the plain loop and the torch.func.vmap cohort, FMNIST MLP
only, on cuda when available) run in the same invocation for cohorts <= `--torch-max-cohort` (100).
PyTorch is a benchmark-only dependency. Targets printed: cohort 1000 FMNIST <= 50 ms per
round on an H100 (or H200), and >= 50x the sequential loop at cohort 100.

Without a GPU (or with `--cpu-mode`) it runs small cohorts (FMNIST 10, 100; CIFAR-10 10)
with fewer repeats (2; 1 for CIFAR-10, whose cohort-10 round takes ~100 s on 2 CPU cores)
and one round per timed call, in about 6 minutes on 2 cores.

    PYTHONPATH=. python benchmarks/gpu_round_throughput.py               # GPU: all cohorts
    PYTHONPATH=. python benchmarks/gpu_round_throughput.py --cpu-mode    # CPU: small cohorts
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import jax
import numpy as np

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
from round_throughput import (  # noqa: E402
    FMNIST_DIR,
    HP,
    jax_round_times,
    torch_round_times,
    workload,
)
from torch_peer import LABELS  # noqa: E402

from fedjax_appeal.core.models import model_for  # noqa: E402
from fedjax_appeal.execute.layout import resolve_layout  # noqa: E402

# Peak FLOP/s (fp32 non-tensor, dense bf16 tensor core) by device name; the first key
# contained in `device_kind` wins, so specific names come first.
PEAKS = {
    "H100 PCIe": (51e12, 756e12),
    "H100 NVL": (60e12, 835e12),
    "H100": (67e12, 989e12),  # SXM
    "H200": (67e12, 989e12),
    "GH200": (67e12, 989e12),
    "A100": (19.5e12, 312e12),
    "L40S": (91.6e12, 362e12),
    "A10G": (31.2e12, 70e12),
    "L4": (30.3e12, 121e12),
    "V100": (15.7e12, 125e12),  # fp16 tensor core (no bf16)
}
TARGET_MS_1000 = 50.0
TARGET_SPEEDUP_100 = 50.0


def jobs_first_impl(jobs, name: str) -> str:
    """The first convolution of a dataset's jobs (the stacked PyTorch peer runs once)."""
    return next(impl for n, _, impl, _ in jobs if n == name)


def batched_torch_times(name: str, data, ds, cfg, device: str, variant: str, repeats: int
                        ) -> list[float]:
    """Seconds per round of the strongest PyTorch program of the workload: the cohort's
    weights stacked (`torch_peer.py` variant `batched`/`graph` for the MLP,
    `torch_cnn_peer.py` for the CNN), after one warm-up round."""
    if name == "fmnist":
        from torch_peer import make_torch_round

        one_round = make_torch_round(data, ds, cfg, HP, device, variant)
    else:
        from torch_cnn_peer import make_cnn_round

        one_round = make_cnn_round(data, ds, cfg, HP, device, graph=variant == "graph")
    return time_repeats(one_round, repeats)


def peak_for(kind: str) -> tuple[float, float] | None:
    for name, peak in PEAKS.items():
        if name.lower() in kind.lower():
            return peak
    return None


def fmnist_config(m: int, fmnist_dir: str):
    cfg = workload(m, fmnist_dir=fmnist_dir)
    if cfg.clients > 1000:  # see the module docstring
        cfg = cfg.replace(partition="classes", classes_per_client=3, min_samples=2)
    return cfg


def cifar_config(m: int):
    return workload(m).replace(dataset="cifar10", model="cnn")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-mode", action="store_true",
                    help="small cohorts and fewer repeats (automatic without a GPU)")
    ap.add_argument("--fmnist-cohorts", default=None,
                    help="default 10,100,1000,10000 (GPU) / 10,100 (CPU mode)")
    ap.add_argument("--cifar-cohorts", default=None,
                    help="default 10,100,1000 (GPU) / 10 (CPU mode); '' = none")
    ap.add_argument("--conv-impls", default="auto",
                    help="comma list of RunConfig.conv_impl values for the CIFAR-10 cnn "
                         "(core/conv.py: CONV_IMPLS); one row each")
    ap.add_argument("--precisions", default="default",
                    help="comma list of --precision values for our side (default, fp32, "
                         "tf32 (GPU only), bf16); each is its own row")
    ap.add_argument("--repeats", type=int, default=None, help="default 5 (GPU) / 2 (CPU)")
    ap.add_argument("--cifar-repeats", type=int, default=None,
                    help="default --repeats (GPU) / 1 (CPU mode: ~100 s per CIFAR-10 round)")
    ap.add_argument("--torch-repeats", type=int, default=None, help="default 3 (GPU) / 2 (CPU)")
    ap.add_argument("--torch-max-cohort", type=int, default=100)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-batched-torch", action="store_true",
                    help="leave out the stacked-weights PyTorch programs (and their CUDA "
                         "graphs), which otherwise run for every cohort and both models")
    ap.add_argument("--no-matmul-peak", action="store_true",
                    help="skip measuring the device's fp32 matmul peak")
    ap.add_argument("--peak-flops", type=float, default=0.0,
                    help="peak FLOP/s of the device (overrides the table; needed for CPUs)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-append", action="store_true",
                    help="do not append a section to benchmarks/RESULTS.md (smoke tests)")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_round_throughput.json"))
    args = ap.parse_args()

    backend = jax.default_backend()
    on_gpu = backend == "gpu"
    cpu_mode = args.cpu_mode or not on_gpu
    kind = jax.devices()[0].device_kind
    fm = args.fmnist_cohorts if args.fmnist_cohorts is not None else (
        "10,100" if cpu_mode else "10,100,1000,10000")
    cf = args.cifar_cohorts if args.cifar_cohorts is not None else (
        "10" if cpu_mode else "10,100,1000")
    repeats = args.repeats or (2 if cpu_mode else 5)
    c_repeats = args.cifar_repeats or (1 if cpu_mode else repeats)
    t_repeats = args.torch_repeats or (2 if cpu_mode else 3)
    peak = (args.peak_flops, None) if args.peak_flops > 0 else (
        peak_for(kind) if on_gpu else None)
    use_torch = not args.no_torch and importlib.util.find_spec("torch") is not None
    device = "cpu"
    if use_torch and on_gpu:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    where = f"{kind} ({backend})" if on_gpu else f"CPU ({machine()}); NO GPU available"
    print(f"device: {where}; mode: {'cpu' if cpu_mode else 'gpu'}; torch: "
          f"{device if use_torch else 'not installed / off'}", flush=True)

    measured = None if args.no_matmul_peak else matmul_peak(n=8192 if on_gpu else 2048)
    if measured is not None:
        print(f"measured fp32 matmul peak: {measured['best_flops'] / 1e12:.2f} TFLOP/s", flush=True)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    jobs = [("fmnist", int(m), "auto", p) for m in fm.split(",") if m.strip()
            for p in precisions]
    jobs += [("cifar10", int(m), impl.strip(), p) for m in cf.split(",") if m.strip()
             for impl in args.conv_impls.split(",") for p in precisions]
    rows, flops_cache = [], {}
    for name, m, impl, prec in jobs:
        cfg = fmnist_config(m, args.fmnist_dir) if name == "fmnist" else cifar_config(m)
        cfg = cfg.replace(conv_impl=impl, precision=prec)
        # The automatic layout of this cohort over the devices this process has: on a GPU
        # what a plain `fedjax-appeal run` gets; on a CPU one device, since this script does
        # not split the CPU (the plain command does: plain_command.py measures that).
        cfg, layout = resolve_layout(cfg)
        rpc = 1 if cpu_mode else (4 if m <= 10 else (2 if m <= 100 else 1))
        reps = repeats if name == "fmnist" else c_repeats
        secs, compile_s, data, ds, n_params = jax_round_times(cfg, HP, rpc, reps)
        model = model_for(cfg.model, data, ds, cfg.conv_impl, cfg.precision)
        conv = getattr(model.module, "conv_impl", None)
        if (name, conv) not in flops_cache:
            flops_cache[name, conv] = step_flops(model, cfg.batch_size)
        sflops, source, counted = flops_cache[name, conv]
        round_flops = m * cfg.local_steps * sflops
        best = min(secs)
        label = "mlp" if name == "fmnist" else f"cnn, conv {conv}"
        row = {"dataset": name, "precision": prec,
               "model": label if prec == "default" else f"{label}, {prec}",
               "cohort": m,
               "clients": cfg.clients, "partition": cfg.partition, "n_params": int(n_params),
               "layout": layout.describe(), "rounds_per_call": rpc, "jax": stats(secs),
               "jax_compile_s": compile_s,
               "samples_per_s": m * cfg.local_steps * cfg.batch_size / best,
               "step_flops": sflops, "step_flops_jaxpr_count": counted, "flops_source": source,
               "round_flops": round_flops, "flops_per_s": round_flops / best}
        if peak is not None:
            row["util_fp32_peak"] = row["flops_per_s"] / peak[0]
            if peak[1]:
                row["util_bf16_peak"] = row["flops_per_s"] / peak[1]
        print(f"{name} {row['model']} cohort {m:5d}: {best * 1e3:.1f} / "
              f"{np.median(secs) * 1e3:.1f} ms/round "
              f"(min/median), compile {compile_s:.1f}s, {row['samples_per_s']:.3g} samples/s, "
              f"{row['flops_per_s'] / 1e9:.1f} GFLOP/s ({source}); {row['layout']}", flush=True)
        if measured is not None:
            row["util_measured_peak"] = row["flops_per_s"] / measured["best_flops"]
        if use_torch and name == "fmnist" and m <= args.torch_max_cohort and \
                prec == "default":
            for v in ("loop", "vmap"):
                tsecs, tver, nthreads = torch_round_times(data, ds, cfg, HP, t_repeats, device,
                                                          variant=v)
                key = "torch" if v == "loop" else "torch_vmap"
                row.update({key: stats(tsecs), "torch_version": tver,
                            f"{key}_threads": nthreads, "torch_device": device,
                            f"speedup_{v}_median": float(np.median(tsecs) / np.median(secs))})
                print(f"      PyTorch {LABELS[v]} ({device}): {min(tsecs):.3f} / "
                      f"{np.median(tsecs):.3f} s/round -> "
                      f"{row[f'speedup_{v}_median']:.1f}x (median)", flush=True)
            row["speedup_median"] = row["speedup_loop_median"]
        if use_torch and not args.no_batched_torch and prec == "default" and \
                impl == jobs_first_impl(jobs, name):
            for v in ("batched", "graph") if device.startswith("cuda") else ("batched",):
                tsecs = batched_torch_times(name, data, ds, cfg, device, v, t_repeats)
                row[f"torch_{v}"] = stats(tsecs)
                row[f"speedup_{v}_median"] = float(np.median(tsecs) / np.median(secs))
                print(f"      PyTorch stacked {v} ({device}): {min(tsecs):.4f} / "
                      f"{np.median(tsecs):.4f} s/round -> "
                      f"{row[f'speedup_{v}_median']:.2f}x (median)", flush=True)
        rows.append(row)
        del data, ds

    # Targets.
    is_h100 = on_gpu and any(n in kind for n in ("H100", "H200"))
    r1000 = next((r for r in rows if r["dataset"] == "fmnist" and r["cohort"] == 1000
                  and r["precision"] == "default"), None)
    r100 = next((r for r in rows if r["dataset"] == "fmnist" and r["cohort"] == 100
                 and "torch" in r), None)
    if r1000 is None:
        t1 = "cohort 1000 FMNIST <= 50 ms/round on an H100: not measured (cohort 1000 not run)"
    else:
        ms = r1000["jax"]["min"] * 1e3
        verdict = ("MET" if ms <= TARGET_MS_1000 else "MISSED") if is_h100 else \
            f"n/a on this device ({kind})"
        t1 = f"cohort 1000 FMNIST <= 50 ms/round on an H100: {ms:.1f} ms -> {verdict}"
    if r100 is None:
        t2 = ">= 50x the sequential loop at cohort 100: not measured"
    else:
        sp = r100["speedup_median"]
        verdict = "MET" if sp >= TARGET_SPEEDUP_100 else "MISSED"
        t2 = (f">= 50x the sequential loop at cohort 100: {sp:.1f}x (median, PyTorch on "
              f"{r100['torch_device']}) -> {verdict}")
    targets = [t1, t2]

    result = {"machine": machine(), "backend": backend, "device_kind": kind,
              "gpu_available": on_gpu, "mode": "cpu" if cpu_mode else "gpu",
              "peak_flops": peak, "repeats": repeats, "cifar_repeats": c_repeats,
              "torch_repeats": t_repeats,
              "workload": "FedAvg tau=50 b=64; FMNIST MLP[64,30] Dirichlet(0.5) (classes-3 "
                          "above 1000 clients); CIFAR-10 cnn Dirichlet(0.5); clients = "
                          "max(100, cohort)", "rows": rows, "targets": targets}
    write_json(Path(args.out), result)

    def util(r, k):
        return f"{100 * r[k]:.2f}%" if k in r else "n/a"

    lines = ["| data / model | cohort | clients | ours ms/round (min / median) | compile s | "
             "samples/s | GFLOP/s | util fp32 / bf16 peak | util measured matmul peak | "
             "PyTorch loop s/round (min / median) | speedup (median) | "
             "torch.func.vmap cohort s/round (median; speedup) | "
             "PyTorch stacked weights / + CUDA graph s/round (median; speedup) |",
             "|---" * 13 + "|"]
    for r in rows:
        t = (f"{r['torch']['min']:.3f} / {r['torch']['median']:.3f} ({r['torch_device']})"
             if "torch" in r else "—")
        s = f"{r['speedup_median']:.1f}×" if "torch" in r else "—"
        tv = (f"{r['torch_vmap']['median']:.3f}; {r['speedup_vmap_median']:.1f}×"
              if "torch_vmap" in r else "—")
        tb = " / ".join(f"{r[f'torch_{v}']['median']:.4f}; {r[f'speedup_{v}_median']:.2f}×"
                        for v in ("batched", "graph") if f"torch_{v}" in r) or "—"
        lines.append(f"| {r['dataset']} / {r['model']} | {r['cohort']} | {r['clients']} | "
                     f"{r['jax']['min'] * 1e3:.1f} / {r['jax']['median'] * 1e3:.1f} | "
                     f"{r['jax_compile_s']:.1f} | {r['samples_per_s']:.3g} | "
                     f"{r['flops_per_s'] / 1e9:.1f} | {util(r, 'util_fp32_peak')} / "
                     f"{util(r, 'util_bf16_peak')} | {util(r, 'util_measured_peak')} | {t} | {s} | "
                     f"{tv} | {tb} |")
    srcs = sorted({f"{r['dataset']}: {r['step_flops'] / 1e6:.2f} MFLOP per step "
                   f"({r['flops_source']}; jaxpr dot/conv count "
                   f"{r['step_flops_jaxpr_count'] / 1e6:.2f})" for r in rows})
    notes = (("**No GPU was available: CPU mode, small cohorts only.** " if not on_gpu else "")
             + f"Device: {where}. Workload: {result['workload']}. Layout (the automatic "
             "rule of `fedjax_appeal/execute/layout.py` over this process's devices): "
             + "; ".join(sorted({r['layout'] for r in rows})) + f". Repeats: {repeats} (ours, "
             f"FMNIST), {c_repeats} (ours, CIFAR-10), {t_repeats} (PyTorch), after one warm-up "
             "call each. FLOPs per round = cohort x 50 x step FLOPs; "
             + "; ".join(srcs) + ". Peak: "
             + ("n/a (CPU; pass --peak-flops)" if peak is None else
                f"{peak[0] / 1e12:g} TFLOP/s fp32" + (f", {peak[1] / 1e12:g} TFLOP/s dense "
                                                       "bf16" if peak[1] else ""))
             + ("" if measured is None else
                f"; measured fp32 matmul peak (jnp.dot {measured['n']}^2, same run): "
                f"{measured['best_flops'] / 1e12:.3f} TFLOP/s")
             + ". PyTorch peers: see benchmarks/torch_peer.py (tensors on the device, "
               "threads = faster of 1 and all cores on a CPU); the stacked-weights programs "
               "(one batched matmul or grouped convolution per layer for the whole cohort, "
               "and the same in a CUDA graph on a GPU) are torch_peer.py's `batched`/`graph` "
               "(MLP) and torch_cnn_peer.py (CNN), timed for every cohort."
             + " Targets: " + "; ".join(targets) + ".")
    if not args.no_append:
        title = "FedAvg round throughput vs cohort, FLOP/s (" + (
            f"{kind})" if on_gpu else "cpu — no GPU available)")
        append_results(title, "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


if __name__ == "__main__":
    main()
