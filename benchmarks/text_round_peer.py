"""Tokens per second of a FedAvg round on the language tasks: fedjax_appeal against the
fastest batched PyTorch program for the same cohort (`torch_text_peer.py`).

Workloads (`WORKLOADS`; the tweets of `sent140_subset.npz`, one client per user):

  * ``chars``: `sent140_chars` with `char_lstm` (FedJAX's Shakespeare LSTM: 8-d
    embedding, 2 x LSTM 256, per-position next-character loss), rows of 80 characters.
  * ``words``: `sent140_words` with `lstm` (LEAF's Sent140 stacked LSTM: 100-d embedding,
    2 x LSTM 100, a 128-unit layer, sentiment at the last real token), rows of 25 words.

A round's tokens are cohort x tau x b x T (every position of every sampled row, padding
included: both sides compute all of them). Ours is the run's compiled chunk of rounds
(`round_throughput.jax_round_calls`: `load_federated`, `build`, the jitted scan), in the
layout `fedjax-appeal run` chooses (`--layout auto`: on a 2-core CPU the host split into 2
devices, one client at a time per device) unless `--cpu-devices`/`--lanes` say otherwise;
each PyTorch variant runs with the faster of 1 and all cores as intra-op threads (one
calibration round each). Ours and the peers are timed interleaved (each repeat times every
side once) so load changes hit all sides alike; min and median over repeats; ratio = the
fastest peer's median s/round / ours.

    python benchmarks/text_round_peer.py --workloads chars,words --repeats 5
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, machine, stats, time_repeats, write_json  # noqa: E402

WORKLOADS = {
    "chars": dict(dataset="sent140_chars", model="char_lstm", clients=200, cohort=10,
                  local_steps=5, batch_size=8),
    "words": dict(dataset="sent140_words", model="lstm", clients=1000, cohort=20,
                  local_steps=10, batch_size=16),
}
LR = 0.5


def workload(name: str, data_dir: str = ""):
    from fedjax_appeal.core.config import RunConfig

    w = WORKLOADS[name]
    return RunConfig(**w, data_dir=data_dir, partition="natural", min_samples=3,
                     unseen_clients=0)


def describe(name: str, cfg, seq_len: int) -> str:
    return (f"{name}: {cfg.dataset}, {cfg.model}, {cfg.clients} clients, cohort {cfg.cohort}, "
            f"tau={cfg.local_steps}, b={cfg.batch_size}, T={seq_len}")


def pick_threads(make, variant: str) -> int:
    """The faster of 1 and all cores for a PyTorch variant (one timed round each, after a
    warm-up round)."""
    cores = os.cpu_count() or 1
    best = None
    for n in sorted({cores, 1}):
        f = make(variant, n)
        f()
        t = min(time_repeats(f, 1, warmup=0))
        if best is None or t < best[0]:
            best = (t, n)
    return best[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="chars,words")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds-per-call", type=int, default=2,
                    help="our rounds per compiled call (one scan chunk)")
    ap.add_argument("--torch-variants", default="batched,loop")
    ap.add_argument("--cpu-devices", type=int, default=-1,
                    help="split the host CPU into this many JAX devices and shard the cohort "
                         "over them (-1 = as the run command's automatic layout)")
    ap.add_argument("--lanes", type=int, default=-1,
                    help="--client-lanes of ours (-1 = as the automatic layout)")
    ap.add_argument("--data-dir", default="")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "text_round_peer.json"))
    args = ap.parse_args()
    names = [n for n in args.workloads.split(",") if n]
    variants = [v for v in args.torch_variants.split(",") if v]
    if variants and importlib.util.find_spec("torch") is None:
        sys.exit("text_round_peer: error: PyTorch is not installed (pip install torch), or "
                 "pass --torch-variants ''")
    from fedjax_appeal.execute.layout import choose, cpu_split

    cohorts = {WORKLOADS[n]["cohort"] for n in names}
    split = args.cpu_devices if args.cpu_devices >= 0 else min(cpu_split(c) for c in cohorts)
    if split > 1:
        from fedjax_appeal.execute.distributed import split_cpu

        split_cpu(split)  # before JAX's first operation
    import jax
    from round_throughput import jax_round_calls
    from torch_text_peer import LABELS, arch_of, make_torch_text_round

    from fedjax_appeal.core.config import HParams
    from fedjax_appeal.core.models import model_for

    hp = HParams(client_lr=LR)
    rows = []
    for name in names:
        cfg = workload(name, args.data_dir)
        devices, lanes, why = choose(cfg.cohort)
        if args.lanes >= 0:
            lanes = args.lanes
        cfg = cfg.replace(devices=devices, client_lanes=lanes)
        ours, compile_s, data, ds, n_params = jax_round_calls(cfg, hp, args.rounds_per_call)
        model = model_for(cfg.model, data, ds)
        seq_len = int(data.train.x.shape[1])
        tokens = cfg.cohort * cfg.local_steps * cfg.batch_size * seq_len
        arch = arch_of(model.module)
        calls = {"ours": (ours, args.rounds_per_call)}
        threads = {}
        for v in variants:
            def make(var, n, cfg=cfg, data=data, arch=arch):
                return make_torch_text_round(data, cfg, hp, arch, var, n)

            threads[v] = pick_threads(make, v)
            f = make(v, threads[v])
            f()
            calls[v] = (f, 1)
        secs = {k: [] for k in calls}
        for _ in range(args.repeats):
            for k, (f, per_call) in calls.items():
                secs[k].append(time_repeats(f, 1, warmup=0)[0] / per_call)
        row = {"workload": name, "describe": describe(name, cfg, seq_len), "tokens": tokens,
               "vocab": int(data.vocab_size), "params": n_params, "jax_compile_s": compile_s,
               "layout": f"devices {devices}, lanes {lanes} ({why})",
               "torch_threads": threads, **{k: stats(v) for k, v in secs.items()}}
        if variants:
            fastest = min(variants, key=lambda v: row[v]["median"])
            row["fastest_peer"] = fastest
            row["ratio_median"] = row[fastest]["median"] / row["ours"]["median"]
            row["ratio_min"] = row[fastest]["min"] / row["ours"]["min"]
        print(row["describe"], {k: f"{row[k]['median']:.3f}" for k in calls}, flush=True)
        rows.append(row)
    result = {"machine": machine(), "rows": rows, "lr": LR}
    write_json(Path(args.out), result)

    head = ["workload", "tokens / round", "ours s/round (min / median); tokens/s (median)"]
    head += [f"{LABELS[v]} s/round (min / median); tokens/s" for v in variants]
    head += ["peer / ours (min; median)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        def cell(st, r=r):
            return (f"{st['min']:.3f} / {st['median']:.3f}; "
                    f"{r['tokens'] / st['median']:,.0f}")
        cells = [r["describe"], f"{r['tokens']:,}", cell(r["ours"])]
        cells += [cell(r[v]) + f" ({r['torch_threads'][v]} thread"
                  f"{'s' if r['torch_threads'][v] > 1 else ''})" for v in variants]
        cells += [f"{r['ratio_min']:.2f}×; {r['ratio_median']:.2f}× ({LABELS[r['fastest_peer']]})"
                  if variants else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = ("Tokens = cohort x tau x b x T positions (padding included). Ours: the compiled "
             "FedAvg chunk of rounds, layout " + "; ".join(
                 f"{r['workload']}: {r['layout']}" for r in rows) + f"; client lr {LR}. "
             f"{args.repeats} interleaved repeats per side; ratio = the fastest PyTorch "
             "variant's s/round / ours (> 1: ours is faster). PyTorch "
             + __import__("torch").__version__ + " (CPU wheel), threads = the faster of 1 "
             "and all cores per variant.")
    if not args.no_append:
        append_results(f"Language tasks: FedAvg round tokens/s vs batched PyTorch "
                       f"({jax.default_backend()})", "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


if __name__ == "__main__":
    main()
