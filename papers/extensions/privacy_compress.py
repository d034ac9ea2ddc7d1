"""DP-FedAvg and update compression on Fashion-MNIST: the runs behind results/dp-fedavg and
results/compression.

    python -m papers.extensions.privacy_compress {dp,compress} OUT [--seeds 0 1 2]
        [--arms a,b] [--runs RUNS] [--robustness [--lrs 0.02,0.1,0.2]]

Every arm shares one schedule (1,000 clients of Fashion-MNIST, Dirichlet(0.5), MLP [64, 30],
200 rounds, 10 local SGD steps of batch 16 at lr 0.1, uniform aggregation, expected cohort
50). Each finished run is kept in RUNS (default OUT/runs) as ARM-sSEED.json, so a second
call only rebuilds the report; the `fedavg` runs are shared by both reports when they use
the same RUNS folder. The report is table.md, results.json and accuracy.png in OUT.

`--robustness` runs the claims' arms (`CLAIMS`) again with every arm at each shared client
lr of `--lrs` (default the table's 0.1, a fifth of it and twice it; runs kept as
ARM-lrX-sSEED.json, the table's lr as ARM-sSEED.json) and writes robustness.md /
robustness.json into OUT: per claim and lr the paired per-seed differences and their
verdict (`papers.pairs.verdict_of`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np

import fedjax_appeal  # run_config through the package: tests replace it
from fedjax_appeal import HParams, RunConfig, plot_lines, to_jsonable
from fedjax_appeal.extend import poisson_buffer
from papers.pairs import RULE, held, sign, verdict_of
from papers.reproduce import markdown_table
from papers.robustness import verdict

BASE = dict(dataset="fmnist", clients=1000, unseen_clients=0, cohort=50, rounds=200,
            local_steps=10, batch_size=16, eval_every=20, aggregation="uniform")
BASE_HP = dict(client_lr=0.1)
DELTA = 1e-3  # < 1 / N

# arm -> (RunConfig overrides, HParams overrides, description)
ARMS = {
    "fedavg": ({}, {}, "FedAvg, uniform cohort of 50, no DP, no compression"),
    "dp-fixed": (dict(dp="fixed", dp_delta=DELTA), dict(dp_clip=1.0, dp_noise=1.0),
                 "DP-FedAvg, Poisson q = 0.05, C = 1, z = 1"),
    "dp-adaptive": (dict(dp="adaptive", dp_delta=DELTA),
                    dict(dp_clip=0.1, dp_noise=1.0, dp_quantile=0.5, dp_clip_lr=0.2),
                    "DP-FedAvg, Poisson q = 0.05, adaptive C (C0 = 0.1, gamma = 0.5, "
                    "eta_C = 0.2, sigma_b = 2.5), z = 1"),
    "dp-fixed-size": (dict(dp="fixed", dp_delta=DELTA, dp_sampling="fixed"),
                      dict(dp_clip=1.0, dp_noise=1.0),
                      "DP-FedAvg, fixed-size cohorts of 50 (replace-one accounting), C = 1, "
                      "z = 1"),
    "dp-z0.7": (dict(dp="fixed", dp_delta=DELTA), dict(dp_clip=1.0, dp_noise=0.7),
                "DP-FedAvg, Poisson q = 0.05, C = 1, z = 0.7 (less noise, larger epsilon)"),
    "dp-z2": (dict(dp="fixed", dp_delta=DELTA), dict(dp_clip=1.0, dp_noise=2.0),
              "DP-FedAvg, Poisson q = 0.05, C = 1, z = 2 (more noise, smaller epsilon)"),
    "clip-only": (dict(dp="fixed", dp_delta=DELTA), dict(dp_clip=1.0, dp_noise=0.0),
                  "diagnostic: Poisson q = 0.05, C = 1, no noise (z = 0, no privacy)"),
    "qsgd-s4": (dict(compress="qsgd", compress_levels=4), {},
                "QSGD, s = 4 levels, buckets of 512, no error feedback"),
    "topk-1pc-ef": (dict(compress="topk", compress_fraction=0.01, compress_feedback="on"), {},
                    "top-1% with error feedback"),
    "topk-1pc": (dict(compress="topk", compress_fraction=0.01, compress_feedback="off"), {},
                 "diagnostic: top-1% without error feedback"),
}
PAPERS = {
    "dp": ["", "Papers: McMahan et al. 2018 (DP-FedAvg) and Andrew et al. 2021 (adaptive "
           "clipping) report language models on Reddit / Stack Overflow with up to hundreds of "
           "thousands of users, no Fashion-MNIST table; their claim is qualitative here: with "
           "enough users per round, user-level DP at a single-digit epsilon costs little "
           "accuracy, and adaptive clipping matches a well-chosen fixed clip without tuning "
           "it. The `clip-only` arm (no noise) separates what clipping and Poisson cohorts cost "
           "from what the noise costs."],
    "compress": ["", "Papers: QSGD (Alistarh et al. 2017) and top-k with error feedback (Stich "
                 "et al. 2018) claim that unbiased quantisation to a few levels and "
                 "sparsification with memory keep the accuracy of uncompressed training while "
                 "sending far fewer bits; their experiments are not on this workload. "
                 "`topk-1pc` (no error feedback) shows what the memory buys. Bits use the "
                 "fixed-length code of `local/compress.py` (QSGD's Elias code would be "
                 "smaller)."],
}
# the claims that held in the tables: (first arm, second arm, label); first − second > 0
CLAIMS = {"dp": (("dp-adaptive", "dp-fixed", "adaptive clip − fixed C = 1, test acc"),),
          "compress": (("qsgd-s4", "fedavg", "QSGD s = 4 − FedAvg, test acc"),
                       ("topk-1pc-ef", "topk-1pc", "top-1% with − without error feedback, "
                                                   "test acc"))}
PAIRS = {"dp": (("dp-adaptive", "dp-fixed"), ("clip-only", "dp-fixed")),
         "compress": (("topk-1pc-ef", "topk-1pc"),)}
REPORTS = {"dp": ("fedavg", "dp-fixed", "dp-adaptive", "dp-fixed-size", "dp-z0.7", "dp-z2",
                  "clip-only"),
           "compress": ("fedavg", "qsgd-s4", "topk-1pc-ef", "topk-1pc")}


def config(arm: str, seed: int, client_lr: float | None = None
           ) -> tuple[RunConfig, HParams]:
    """The arm's configuration (with `client_lr` replacing the schedule's lr); DP arms also
    write the statistics outside the guarantee (cohort sizes, clipped share), which the
    table reports as diagnostics."""
    run, hp, _ = ARMS[arm]
    publish = {"dp_publish_client_stats": True} if run.get("dp", "off") != "off" else {}
    lr = {} if client_lr is None else {"client_lr": client_lr}
    return (RunConfig(**{**BASE, **run, **publish, "seed": seed}),
            HParams(**{**BASE_HP, **hp, **lr}))


def run_arm(arm: str, seed: int, runs: Path, client_lr: float | None = None) -> dict:
    """The kept result of (arm, seed) at `client_lr` (None: the schedule's), running it
    first if needed."""
    other = client_lr is not None and client_lr != BASE_HP["client_lr"]
    path = runs / (f"{arm}-lr{client_lr:g}-s{seed}.json" if other else f"{arm}-s{seed}.json")
    if path.exists():
        return json.loads(path.read_text())
    cfg, hp = config(arm, seed, client_lr if other else None)
    print(f"[{arm} seed {seed}{f' lr {client_lr:g}' if other else ''}] running",
          file=sys.stderr, flush=True)
    res, sim = fedjax_appeal.run_config(cfg, hp)
    d = sum(int(x.size) for x in jax.tree.leaves(sim.final_state.params))
    keep = {"arm": arm, "seed": seed, "config": res["config"], "hparams": res["hparams"],
            "param_count": d,
            "history": res["history"], "timing": res["timing"],
            "privacy": res.get("privacy"),
            "round_metrics": {k: v for k, v in res["round_metrics"].items()
                              if k in ("cohort_size", "bits_up", "dp_clip", "dp_clipped",
                                       "dp_noise_std", "dp_overflow", "dp_unclipped_share")}}
    runs.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_jsonable(keep)))
    tmp.replace(path)
    return keep


def _ms(v) -> str:
    v = np.asarray(v, float)
    return f"{v.mean():.4f} ± {v.std(ddof=1) if v.size > 1 else 0.0:.4f}"


def report(kind: str, out: Path, seeds: list[int], runs: Path, arms: tuple[str, ...]) -> None:
    rows, per = [], {}
    for arm in arms:
        got = [run_arm(arm, s, runs) for s in seeds]
        per[arm] = got
    base = per["fedavg"]
    lines = [f"# {'DP-FedAvg' if kind == 'dp' else 'Update compression'} on Fashion-MNIST", "",
             "Schedule (every arm): Fashion-MNIST, 1,000 clients (Dirichlet 0.5, 60% of each "
             "client's rows for training), MLP [64, 30], 200 rounds, 10 local SGD steps of batch "
             "16 at client lr 0.1, server SGD lr 1, uniform aggregation, expected cohort 50; "
             f"seeds {', '.join(map(str, seeds))} (data and training). Accuracy: mean over the "
             "1,000 clients of their test-split accuracy after round 200 (`test_acc_seen`).",
             "", "Command: `python -m papers.extensions.privacy_compress "
             f"{kind} results/{'dp-fedavg' if kind == 'dp' else 'compression'} --runs RUNS` "
             "(each arm is a `fedjax-appeal run` configuration, see `ARMS` in that module).", ""]
    if kind == "dp":
        lines += ["| arm | setting | ε (RDP) | ε (PLD) at δ = 1e-3 | test acc | − FedAvg per "
                  "seed | final C | clipped share |", "| --- | --- | --- | --- | --- | --- | "
                  "--- | --- |"]
    else:
        lines += ["| arm | setting | bits up / round (mean) | vs float32 | test acc | − FedAvg "
                  "per seed |", "| --- | --- | --- | --- | --- | --- |"]
    dense_bits = None
    for arm in arms:
        got = per[arm]
        acc = [g["history"][-1]["test_acc_seen"] for g in got]
        diff = [a - b["history"][-1]["test_acc_seen"] for a, b in zip(acc, base, strict=True)]
        signs = ", ".join(f"{d:+.4f}" for d in diff) if arm != "fedavg" else "—"
        row = {"arm": arm, "setting": ARMS[arm][2], "acc": acc, "diff_vs_fedavg": diff,
               "seeds": seeds}
        if kind == "dp":
            pv = got[0].get("privacy") or {}
            er = pv.get("dp_epsilon_rdp")
            ep = pv.get("dp_epsilon_pld")
            finite = er is not None and np.isfinite(er)
            eps = ((f"{er:.3f}", f"{ep:.3f}" if ep is not None else "— (no PLD event)")
                   if finite else ("∞ (z = 0)", "∞"))
            if arm == "fedavg":
                eps = ("— (no DP)", "—")
            clip = [g["round_metrics"]["dp_clip"][-1] for g in got] if arm != "fedavg" else []
            frac = [np.mean(g["round_metrics"]["dp_clipped"]) for g in got] if clip else []
            row.update(epsilon_rdp=er, epsilon_pld=ep, final_clip=clip, clipped_share=frac)
            lines.append(f"| {arm} | {ARMS[arm][2]} | {eps[0]} | {eps[1]} | {_ms(acc)} | "
                         f"{signs} | {_ms(clip) if clip else '—'} | "
                         f"{_ms(frac) if frac else '—'} |")
        else:
            bits = [np.mean(g["round_metrics"]["bits_up"]) for g in got
                    if "bits_up" in g["round_metrics"]]
            if arm == "fedavg":
                dense_bits = 32.0 * 50 * got[0]["param_count"]  # 50 float32 updates a round
                bits = [dense_bits]
            ratio = f"{dense_bits / np.mean(bits):.1f}× fewer" if arm != "fedavg" else "1×"
            row.update(bits_up=bits)
            lines.append(f"| {arm} | {ARMS[arm][2]} | {np.mean(bits):.3g} | {ratio} | "
                         f"{_ms(acc)} | {signs} |")
        rows.append(row)
    lines += ["", "Signs: each arm's accuracy minus FedAvg's, seed by seed (same data and "
              "initial model per seed)."]
    pairs = {}
    for x, y in PAIRS[kind]:
        if x in per and y in per:
            d = [a["history"][-1]["test_acc_seen"] - b["history"][-1]["test_acc_seen"]
                 for a, b in zip(per[x], per[y], strict=True)]
            pairs[f"{x} - {y}"] = d
            lines.append(f"Paired {x} − {y}: {', '.join(f'{v:+.4f}' for v in d)} "
                         f"(mean {np.mean(d):+.4f}).")
    if kind == "dp":
        poisson = [a for a in arms if a != "fedavg" and ARMS[a][0].get("dp_sampling",
                                                                      "poisson") == "poisson"]
        sizes = [np.asarray(g["round_metrics"]["cohort_size"]) for a in poisson
                 for g in per[a]]
        over = sum(int(np.sum(g["round_metrics"].get("dp_overflow", [0]))) for a in poisson
                   for g in per[a])
        pv = per["dp-fixed"][0].get("privacy") or {}
        allsz = np.concatenate(sizes)
        seed_means = ", ".join(f"{np.mean(g['round_metrics']['cohort_size']):.2f}"
                               for g in per["dp-fixed"])
        lines.append("Poisson cohorts (the same draws in every DP arm of a seed: the selection "
                     f"stream does not depend on z or C): mean per seed {seed_means} clients "
                     f"(expected 50, standard error 0.49 per seed), min {allsz.min()}, max "
                     f"{allsz.max()}; the {poisson_buffer(50, 1000)}-slot buffer "
                     f"overflowed {over} times (`dp_overflow`; probability "
                     f"{pv.get('overflow_probability', float('nan')):.2g} per run, added to "
                     f"delta: {pv.get('dp_delta_total', float('nan')):.10g}). The "
                     "per-coordinate noise std "
                     "on the averaged update is z C / 50 (`dp_noise_std`), i.e. a noise norm "
                     f"of about z x {np.sqrt(per['fedavg'][0]['param_count']) / 50:.1f} C "
                     f"over the {per['fedavg'][0]['param_count']} parameters, against a "
                     "signal of norm at most C.")
        lines.append("Outside the guarantee: the cohort sizes and the clipped share are "
                     "unnoised statistics of the clients; the DP arms write them "
                     "(`dp_publish_client_stats`) as diagnostics, and their results.json "
                     "names them under `privacy.outside_guarantee`. `dp-fixed-size` is "
                     "accounted as m-of-N sampling without replacement under replace-one "
                     "adjacency (RDP only), hence its far larger epsilon at the same noise.")
    lines += PAPERS[kind]
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps(to_jsonable(
        {"kind": kind, "base_config": BASE, "base_hparams": BASE_HP, "rows": rows,
         "pairs": pairs,
         "runs": {a: per[a] for a in arms}}), indent=1))
    hist = []
    for arm in arms:
        h = np.array([[e["test_acc_seen"] for e in g["history"]] for g in per[arm]])
        for i, r in enumerate(e["round"] for e in per[arm][0]["history"]):
            if len(hist) <= i:
                hist.append({"round": r})
            hist[i][arm] = float(h[:, i].mean())
    plot_lines(out / "accuracy.png", "round", hist, {a: a for a in arms},
               "mean client test accuracy (mean over seeds)")
    print((out / "table.md").read_text())


def robustness(kind: str, out: Path, seeds: list[int], runs: Path,
               lrs: tuple[float, ...]) -> None:
    """The claims of `kind` at every shared client lr of `lrs`: robustness.md / .json."""
    table_lr = BASE_HP["client_lr"]
    table = out / "results.json"  # the table's own runs at its lr, kept in its results.json
    for arm, got in (json.loads(table.read_text())["runs"].items() if table.is_file()
                     else ()):
        for g in got:
            path = runs / f"{arm}-s{g['seed']}.json"
            if g["seed"] in seeds and not path.exists():
                runs.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(g))
    rows, claims = [], []
    for first, second, label in CLAIMS[kind]:
        per_lr = {}
        for lr in lrs:
            acc = {arm: [run_arm(arm, s, runs, lr)["history"][-1]["test_acc_seen"]
                         for s in seeds] for arm in (first, second)}
            d = [100 * (a - b) for a, b in zip(acc[first], acc[second], strict=True)]
            signs = "".join(sign(x) for x in d)
            per_lr[lr] = {"diffs": d, "signs": signs, "held": held(d, "+"),
                          "acc": {k: [100 * x for x in v] for k, v in acc.items()}}
            rows.append([label, f"{lr:g}" + (" (the table's)" if lr == table_lr else ""),
                         ", ".join(f"{x:+.2f}" for x in d), signs,
                         verdict_of(d, "+")])
        v = verdict([per_lr[lr]["held"] for lr in lrs],
                    per_lr[table_lr]["held"] if table_lr in per_lr else None)
        claims.append({"claim": label, "first": first, "second": second,
                       "per_lr": {str(lr): x for lr, x in per_lr.items()}, **v})
    md = (f"# Robustness to the shared client lr: {kind}\n\nCommand: `python -m "
          f"papers.extensions.privacy_compress {kind} OUT --robustness --lrs "
          f"{','.join(f'{x:g}' for x in lrs)} --runs RUNS`\n\nEvery arm of the table runs at "
          f"client lr {table_lr:g}; here the arms of each claim rerun at each shared lr, "
          f"everything else as in the table, seeds {', '.join(map(str, seeds))}. Differences "
          f"are in percentage points of test accuracy, seed by seed; {RULE}.\n\n"
          + markdown_table(["claim", "client lr", "first − second per seed (pp)", "signs",
                            "verdict"], rows)
          + f"\n**Verdicts** (\"tuned\" = the table's lr {table_lr:g}):\n\n"
          + "".join(f"- {c['claim']}: {c['text']}\n" for c in claims))
    out.mkdir(parents=True, exist_ok=True)
    (out / "robustness.md").write_text(md)
    (out / "robustness.json").write_text(json.dumps(to_jsonable(
        {"kind": kind, "lrs": list(lrs), "table_lr": table_lr, "seeds": seeds,
         "claims": claims}), indent=1))
    print(md)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="privacy_compress")
    p.add_argument("kind", choices=sorted(REPORTS))
    p.add_argument("out")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", default="", help="comma-separated subset of the report's arms")
    p.add_argument("--runs", default="", help="folder of kept runs (default OUT/runs)")
    p.add_argument("--only-run", action="store_true", help="run the arms, write no report")
    p.add_argument("--robustness", action="store_true",
                   help="the claims at every shared client lr of --lrs (robustness.md)")
    p.add_argument("--lrs", default="0.02,0.1,0.2", help="shared client lrs of --robustness")
    a = p.parse_args(argv)
    if a.robustness:
        lrs = tuple(float(x) for x in a.lrs.split(","))
        robustness(a.kind, Path(a.out), a.seeds, Path(a.runs or Path(a.out) / "runs"), lrs)
        return 0
    arms = tuple(a.arms.split(",")) if a.arms else REPORTS[a.kind]
    runs = Path(a.runs or Path(a.out) / "runs")
    if a.only_run:
        for s in a.seeds:
            for arm in arms:
                run_arm(arm, s, runs)
        return 0
    report(a.kind, Path(a.out), a.seeds, runs, ("fedavg",) + tuple(x for x in arms
                                                                   if x != "fedavg"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
