"""`reproduce expalpha-flip|expalpha-adapt|expalpha-imbalance --robustness`: does Exp-α's
gain over proportional weights survive a change of the shared client learning rate?

Exp-α (Exp-α paper, Table 2, Fig. 2b and Table 1 with random majors) changes only the
aggregation weights, so in the tables both arms of a backbone already run at one shared
client lr (`CLIENT_LR`, 0.05 in the cpu profile). This mode reruns every backbone (of
Fig. 2b: FedAvg; of Table 1: the three whose row held) x {proportional, Exp-α} x seed of
the table at each lr of `LRS` (the table's lr, a fifth of it and twice it), with everything
else as in the table, and compares Exp-α with proportional seed by seed on the final clean test
accuracy (`test_acc_global`). Each (backbone, aggregation, seed) is one
`fedjax_appeal.sweep` over the lrs, each lr a batch of one (`max_parallel=1`, the run's own
program; see `papers.robustness`). Verdicts come from `papers.robustness.compare` and
`verdict`: held at an lr when the verdict of Exp-α − proportional is "held"
(`papers.pairs.verdict_of`).

Output, into the table's folder: `robustness.md` and `robustness.json`.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import fedjax_appeal  # load_federated through the package: tests replace it
from fedjax_appeal import program_cache_folder, sweep
from papers import pairs
from papers.expalpha.settings import backbones, make_cfg, make_hp, profile, seeds_of
from papers.expalpha.specs import AGGREGATIONS, CLIENT_LR
from papers.reproduce import Context, markdown_table, mean_std, run_cache, run_key
from papers.robustness import compare, verdict

METRIC = "test_acc_global"
TARGET, OTHER = "exp-alpha", "proportional"


def lrs_of(ctx: Context) -> tuple[float, ...]:
    """The shared lrs: the table's client lr, a fifth of it and twice it."""
    lr = CLIENT_LR[profile(ctx)]
    return (round(lr / 5, 6), lr, round(2 * lr, 6))


def shared_lr_runs(ctx: Context, setting: str, labels: tuple[str, ...] = ()
                   ) -> dict[str, dict[str, dict[float, dict]]]:
    """{backbone: {aggregation: {lr: {seed: final metric}}}} at every lr of `lrs_of`, for
    the setting's backbones (only those named in `labels` when given)."""
    lrs = lrs_of(ctx)
    gkey = hashlib.sha256(json.dumps(list(lrs)).encode()).hexdigest()[:8]
    out: dict[str, dict[str, dict[float, dict]]] = {}
    for seed in seeds_of(ctx):
        data = ds = None
        for b in backbones(ctx, setting):
            if labels and b.label not in labels:
                continue
            for agg in AGGREGATIONS:
                cfg = make_cfg(ctx, setting, seed, b, agg)
                hp = make_hp(ctx, b)
                path = run_cache(ctx.cache_dir) / f"shared-lr-{run_key(cfg, hp)}-{gkey}.json"
                what = f"{setting}/{b.label}/{agg} seed {seed}"
                if ctx.reuse and path.is_file():
                    got = json.loads(path.read_text())
                    ctx.spent.cached += len(got)
                    ctx.log(f"{what}: lrs {list(lrs)} finished earlier (cached)")
                else:
                    if data is None:
                        data, ds = fedjax_appeal.load_federated(cfg)
                    ctx.log(f"{what}: sweeping client lr {list(lrs)}, {cfg.rounds} rounds")
                    res = sweep(cfg, {"client_lr": list(lrs)}, [seed], hp=hp, metric=METRIC,
                                max_parallel=1, data=data, dataset=ds,
                                program_cache=program_cache_folder(),
                                heartbeat=ctx.heartbeat)
                    ctx.spent.add_sweep(res.timing, len(res.rows))
                    got = {str(float(r["hparams"]["client_lr"])):
                           float(r["final"].get(METRIC, math.nan)) for r in res.rows}
                    if ctx.reuse:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_text(json.dumps(got))
                for lr, v in got.items():
                    out.setdefault(b.label, {}).setdefault(agg, {}).setdefault(
                        float(lr), {})[seed] = v
    return out


def analyse(runs: dict[str, dict[str, dict[float, dict]]], lrs, table_lr: float
            ) -> dict[str, Any]:
    """Per backbone: per lr the paired comparison, and the verdict ("tuned" = the table's
    own lr, which is one of the shared lrs here)."""
    out = {}
    for bb, by_agg in runs.items():
        per_lr = {lr: compare({TARGET: by_agg[TARGET][lr], OTHER: by_agg[OTHER][lr]}, TARGET)
                  for lr in lrs}
        v = verdict([per_lr[lr]["held"] for lr in lrs], per_lr[table_lr]["held"])
        out[bb] = {"per_lr": per_lr, "verdict": v}
    return out


def run_expalpha_robustness(ctx: Context, setting: str, title: str,
                            labels: tuple[str, ...] = ()) -> None:
    """Run the shared-lr check of an Exp-α table setting (its backbones, or those named in
    `labels`) and write its report."""
    lrs = lrs_of(ctx)
    table_lr = CLIENT_LR[profile(ctx)]
    runs = shared_lr_runs(ctx, setting, labels)
    res = analyse(runs, lrs, table_lr)
    rows = []
    for bb, r in res.items():
        for lr in lrs:
            c = r["per_lr"][lr]
            rows.append([bb, f"{lr:g}" + (" (the table's)" if lr == table_lr else ""),
                         mean_std([100 * x for x in runs[bb][OTHER][lr].values()]),
                         mean_std([100 * x for x in runs[bb][TARGET][lr].values()]),
                         ", ".join(f"{100 * d:+.2f}" for d in c["diff"]), c["signs"],
                         pairs.verdict_of(c["diff"], "+")])
    verdicts = "\n".join(f"- {bb}: {r['verdict']['text']}" for bb, r in res.items())
    k = sum(r["verdict"]["k"] for r in res.values())
    n = sum(r["verdict"]["n"] for r in res.values())
    md = (f"# Robustness to the shared client lr: {title}\n\n"
          f"Command: `{ctx.command}`\n\n"
          f"Both arms of a backbone share one client lr in the table ({table_lr:g}); here "
          f"each backbone ({', '.join(runs)}) x {{proportional, Exp-α (α = 0.2)}} x seed "
          f"{seeds_of(ctx)} reruns "
          f"at each shared lr {list(lrs)}, everything else as in the table. Metric: final "
          f"clean test accuracy (`{METRIC}`, %). Exp-α − proportional per seed; "
          f"{pairs.RULE}.\n\n"
          + markdown_table(["backbone", "client lr", "proportional", "Exp-α",
                            "Exp-α − proportional per seed (pp)", "signs", "verdict"], rows)
          + f"\n\n**Verdicts** (\"tuned\" = the table's lr {table_lr:g}):\n\n{verdicts}\n\n"
          f"All backbones together: held at {k} of {n} (backbone, lr) cells.\n")
    ctx.write({"robustness.md": md,
               "robustness.json": {"lrs": list(lrs), "table_lr": table_lr, "metric": METRIC,
                                   "seeds": seeds_of(ctx),
                                   "runs": {bb: {agg: {str(lr): v for lr, v in by_lr.items()}
                                                 for agg, by_lr in d.items()}
                                            for bb, d in runs.items()},
                                   "verdicts": {bb: {"text": r["verdict"]["text"],
                                                     "k": r["verdict"]["k"],
                                                     "n": r["verdict"]["n"],
                                                     "per_lr": {str(lr): c for lr, c in
                                                                r["per_lr"].items()}}
                                                for bb, r in res.items()}}})
