"""`fedjax-appeal reproduce NAME --robustness`: does a table's claimed direction survive one
shared client learning rate?

The appeal tables (Cho et al., "Maximizing Global Model Appeal in Federated Learning",
TMLR) run every arm at its own client lr, tuned on one setting (`papers.appeal.tune`, TMLR
App. D.1). A direction that holds only at those lrs may come from the tuning rather than
the algorithm. This mode reruns each setting of the table with ONE client lr shared by all
arms, for every lr of the grid the table was tuned over (`Table.robustness["lrs"]`), with
the same seeds, and otherwise the table's configuration (per-algorithm local steps, the
appeal protocol, the solo models trained with the run's client lr).

Each (arm, seed) is one `fedjax_appeal.sweep` over the lrs: the lrs are HParams, so they
share one compiled program. Each lr runs as a batch of one (`max_parallel=1`): such a row is
the run's own program, equal bit for bit to the table's run of that configuration, while in
a batch of several lrs rows can differ from the single runs (measured: MaxFL, TMLR Table 2
setting, seed 2, lr 0.1: GM-Appeal unseen 0.01 in a batch with lr 0.05, 0.05 alone and in
the table's run; FedAvg, Table 1 setting, seed 2, lr 0.1: test accuracy 0.5901 in a batch
of four lrs, 0.5877 alone). On CPU a batch runs its combinations one after another
anyway, so this costs no time. Seeds are separate sweeps
because each seed of a table has its own data partition, while a sweep fixes one partition
per static group (`--data-seed` as a grid key would run every seed on every partition).
Fine-tuning personalization is not evaluated by sweeps; the headline metrics do not use it
(`finetune_steps` 0 here). A finished sweep is kept in `<cache>/runs` keyed by
configuration, hyperparameters, lr grid and code.

Per lr and headline metric the claimed-better arm (`Table.report["target"]`, default
MaxFL) is compared with the best other arm at that lr (by mean over seeds), seed by seed
(`compare`); `verdict` turns the per-lr results and the verdict of the table's own run at
the tuned lrs (its `results.json`, when present) into the scorecard text. Output, into the
table's folder: `robustness.md` and `robustness.json`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import fedjax_appeal  # load_federated through the package: tests replace it
from fedjax_appeal import data_fields, program_cache_folder, sweep
from fedjax_appeal.extend import ALGORITHMS
from papers import pairs
from papers.reproduce import Context, markdown_table, mean_std, run_cache, run_key
from papers.runner import hparams
from papers.spec import Table

METRIC_SCALE = {"test_acc": 100.0, "preferred_acc": 100.0}  # shown in %; appeal in [0, 1]


def _scale(metric: str) -> float:
    return next((s for p, s in METRIC_SCALE.items() if metric.startswith(p)), 1.0)


def compare(values: Mapping[str, Mapping[int, float]], target: str) -> dict[str, Any]:
    """The claimed-better arm against the best other arm, seed by seed.

    Args:
      values: arm -> seed -> the metric (higher is better; NaN for a failed run).
      target: the arm the paper claims better.

    Returns:
      {"best_other", "seeds", "diff" (target − best other per seed), "signs" ("+", "−",
      "0" per seed; "?" for NaN), "held"}: the best other arm is the one with the highest
      mean over seeds (arms with a NaN rank last); `held` when the verdict of the
      differences is "held" (`papers.pairs.verdict_of`: the 95% t interval above 0; a NaN
      seed makes it inconclusive).
    """
    t = values[target]
    others = {a: v for a, v in values.items() if a != target and v}
    if not others or not t:
        return {"best_other": None, "seeds": [], "diff": [], "signs": "", "held": False}

    def rank(arm: str) -> tuple[bool, float]:
        m = float(np.mean(list(others[arm].values())))
        return (math.isfinite(m), m if math.isfinite(m) else -math.inf)

    best = max(others, key=rank)
    seeds = sorted(set(t) & set(others[best]))
    diff = [float(t[s]) - float(others[best][s]) for s in seeds]
    signs = " ".join("?" if not math.isfinite(d) else "+" if d > 0 else "−" if d < 0 else "0"
                     for d in diff)
    return {"best_other": best, "seeds": seeds, "diff": diff, "signs": signs,
            "held": pairs.held(diff, "+")}


def verdict(held_by_lr: Sequence[bool], tuned_held: bool | None) -> dict[str, Any]:
    """The robustness verdict of one metric from its per-lr results.

    Args:
      held_by_lr: for each shared lr, whether the verdict there is "held".
      tuned_held: whether it held at the tuned (per-arm) lrs; None when not known.

    Returns:
      {"k", "n", "tuned_held", "text", "phrase"}: `text` is "held at k of n shared lrs"
      with "(and at the tuned lrs)", "(not at the tuned lrs)" or "(tuned lrs not run)";
      `phrase` is the scorecard's short form: "held at tuned lrs only" when k = 0 but the
      tuned lrs held, otherwise `text`.
    """
    k, n = sum(bool(h) for h in held_by_lr), len(held_by_lr)
    tail = {True: "and at the tuned lrs", False: "not at the tuned lrs",
            None: "tuned lrs not run"}[tuned_held]
    text = f"held at {k} of {n} shared lrs ({tail})"
    phrase = "held at tuned lrs only" if k == 0 and tuned_held else text
    return {"k": k, "n": n, "tuned_held": tuned_held, "text": text, "phrase": phrase}


def tuned_values(ctx: Context) -> dict[str, dict[str, dict[str, dict[int, float]]]]:
    """{setting: {arm: {metric: {seed: value}}}} of the table's own run (the tuned lrs),
    read from `results.json` in the output folder, with the arm's lr as metric "client_lr"
    (seed -1); {} when the table was not run there."""
    path = ctx.out / "results.json"
    if not path.is_file():
        return {}
    grid = json.loads(path.read_text()).get("grid", {})
    out: dict[str, Any] = {}
    for col, recs in grid.items():
        for arm, rec in (recs or {}).items():
            if rec.get("status") != "ok":
                continue
            lr = (rec.get("hparams") or {}).get("client_lr")
            if lr is not None:
                out.setdefault(col, {}).setdefault(arm, {})["client_lr"] = {-1: float(lr)}
            for r in rec["runs"]:
                for m, x in r["final"].items():
                    if isinstance(x, (int, float)):
                        out.setdefault(col, {}).setdefault(arm, {}).setdefault(m, {})[
                            r["seed"]] = float(x)
    return out


def _grid_key(lrs: Sequence[float]) -> str:
    return hashlib.sha256(json.dumps([float(x) for x in lrs]).encode()).hexdigest()[:8]


def shared_lr_runs(ctx: Context, table: Table, lrs: Sequence[float],
                   columns: Sequence[str]) -> dict[str, Any]:
    """Run every (setting, arm, seed) of `table` at each shared client lr of `lrs`.

    Returns {setting: {arm: {"config", "hparams", "runs": [{"seed", "client_lr", "final":
    {metric: value}}]}}} (None for a setting not run in --quick mode), keeping every metric
    of the table.
    """
    metrics = list(dict.fromkeys([*table.robustness.get("metrics", ()), *table.metrics]))
    out: dict[str, Any] = {}
    for col in table.settings:
        if columns and col.label not in columns:
            continue
        spec = col.spec(ctx.quick)
        if spec is None:
            ctx.log(f"{col.label}: not run in --quick mode")
            out[col.label] = None
            continue
        recs = out[col.label] = {}
        arms = [v for v in table.arms if v.label in table.robustness.get("arms", [v.label])
                and v.algorithm in ALGORITHMS
                and hparams(table.base_hp, col.hp, col.tuned(v.algorithm)[1], v.hp) is not None]
        cache: dict[tuple, Any] = {}
        for seed in table.seeds(ctx.seeds, ctx.quick):
            for v in arms:
                t_cfg, t_hp = col.tuned(v.algorithm)
                cfg = ctx.base(**{**table.base_cfg, **spec, **t_cfg, **v.cfg,
                                  "algorithm": v.algorithm, "seed": seed,
                                  "finetune_steps": 0})
                hp = hparams(table.base_hp, col.hp, t_hp, v.hp)
                rec = recs.setdefault(v.label, {"config": None, "hparams": None, "runs": []})
                path = run_cache(ctx.cache_dir) / (f"shared-lr-{run_key(cfg, hp)}-"
                                                   f"{_grid_key(lrs)}-single.json")
                what = f"{col.label}/{v.label} seed {seed}"
                if ctx.reuse and path.is_file():
                    ctx.log(f"{what}: lrs {list(lrs)} finished earlier (cached in "
                            f"{path.parent})")
                    runs = json.loads(path.read_text())
                    ctx.spent.cached += len(runs)
                else:
                    dkey = tuple(getattr(cfg, f) for f in data_fields())
                    if dkey not in cache:
                        cache.clear()
                        with ctx.phase(f"loading the data ({cfg.dataset})"):
                            cache[dkey] = fedjax_appeal.load_federated(cfg)
                    data, ds = cache[dkey]
                    ctx.log(f"{what}: sweeping client lr {list(lrs)}, {cfg.rounds} rounds")
                    res = sweep(cfg, {"client_lr": list(lrs)}, [seed], hp=hp,
                                metric=metrics[0], max_parallel=1, data=data, dataset=ds,
                                progress=ctx.log, program_cache=program_cache_folder(),
                                heartbeat=ctx.heartbeat)
                    ctx.spent.add_sweep(res.timing, len(res.rows))
                    runs = [{"seed": seed, "client_lr": float(r["hparams"]["client_lr"]),
                             "final": {k: float(r["final"].get(k, math.nan)) for k in metrics},
                             "diverged_round": r.get("diverged_round")} for r in res.rows]
                    if ctx.reuse:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_text(json.dumps(runs))
                    ctx.log(f"{what}: done in {res.timing['total_s']:.0f}s")
                rec["config"] = {k: getattr(cfg, k) for k in ("dataset", "partition", "clients",
                                                              "unseen_clients", "cohort",
                                                              "rounds", "local_steps",
                                                              "batch_size", "rho_steps")}
                rec["hparams"] = {k: x for k, x in hp.to_dict().items()
                                  if k != "client_lr"}
                rec["runs"] += runs
    return out


def analyse(grid: dict[str, Any], lrs: Sequence[float], metrics: Sequence[str], target: str,
            tuned: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (setting, metric): the per-lr comparison (`compare`) and the `verdict`; the
    tuned-lr comparison uses the same arms and seeds from the table's own run (`tuned`, as
    `tuned_values`)."""
    rows = []
    for col, recs in grid.items():
        if not recs or target not in recs:
            continue
        for m in metrics:
            per_lr = []
            for lr in lrs:
                vals = {arm: {r["seed"]: r["final"][m] for r in rec["runs"]
                              if r["client_lr"] == float(lr)} for arm, rec in recs.items()}
                c = compare(vals, target)
                c["diff"] = [_scale(m) * d for d in c["diff"]]
                per_lr.append({"client_lr": float(lr), **c,
                               "means": {a: mean_std(list(v.values()), _scale(m))
                                         for a, v in vals.items()}})
            seeds = set(per_lr[0]["seeds"]) if per_lr else set()
            tv = {arm: {s: x for s, x in tuned.get(col, {}).get(arm, {}).get(m, {}).items()
                        if s in seeds} for arm in recs}
            t = None
            if target in tv and all(len(v) == len(seeds) and v for v in tv.values()):
                t = compare(tv, target)
                t["diff"] = [_scale(m) * d for d in t["diff"]]
                t["means"] = {a: mean_std(list(v.values()), _scale(m)) for a, v in tv.items()}
                t["client_lr"] = {a: tuned[col][a].get("client_lr", {}).get(-1) for a in tv}
            rows.append({"column": col, "metric": m, "per_lr": per_lr, "tuned": t,
                         **verdict([p["held"] for p in per_lr],
                                   None if t is None else t["held"])})
    return rows


def markdown(ctx: Context, table: Table, rows: list[dict[str, Any]], lrs: Sequence[float],
             target: str, schedule: str) -> str:
    parts = [f"# Robustness to one shared client lr: {table.title}\n\n"
             f"Command: `{ctx.command}`\n\nSchedule: {schedule}. Seeds: "
             f"{table.seeds(ctx.seeds, ctx.quick)}. Shared client lrs: "
             f"{', '.join(f'{x:g}' for x in lrs)} (the grid the table's per-arm lrs were "
             "tuned over); at each lr every arm uses it (solo models too), everything else "
             "as in the table. Per lr: mean ± std over seeds of each arm (accuracies in %), "
             f"and {target} minus the best other arm at that lr (by mean), seed by seed; "
             f"{pairs.RULE}. "
             "\"Tuned\": the same arms and seeds in the table's own run at each arm's tuned "
             "lr (`results.json` of this folder, as written by its last run); a shared-lr "
             "row at an arm's tuned lr is a separate run of the current code (a sweep) and "
             "need not equal that run to the last digit.\n"]
    for r in rows:
        arms = list(r["per_lr"][0]["means"])
        body = [[f"{p['client_lr']:g}"] + [p["means"][a] for a in arms]
                + [p["best_other"] or "—", ", ".join(f"{d:+.2f}" for d in p["diff"]),
                   p["signs"], pairs.verdict_of(p["diff"], "+")] for p in r["per_lr"]]
        t = r["tuned"]
        if t is not None:
            lrs_t = ", ".join(f"{a} {x:g}" for a, x in t.get("client_lr", {}).items()
                              if x is not None)
            body.append([f"tuned (table's run{': ' + lrs_t if lrs_t else ''})"]
                        + [t["means"].get(a, "—") for a in arms]
                        + [t["best_other"], ", ".join(f"{d:+.2f}" for d in t["diff"]),
                           t["signs"], pairs.verdict_of(t["diff"], "+")])
        parts.append(f"\n## {r['column']}: {r['metric']}\n\n" + markdown_table(
            ["client lr"] + arms + ["best other", f"{target} − best other, per seed", "signs",
                                    "verdict"], body)
            + f"\n**Verdict**: {r['text']}. Scorecard: {r['phrase']}.\n")
    return "".join(parts)


def run_robustness(ctx: Context, table: Table) -> None:
    """The `--robustness` mode of a table experiment: runs, analysis, files."""
    opts = table.robustness
    lrs = [float(x) for x in opts["lrs"]]
    metrics = list(opts.get("metrics") or table.metrics[:1])
    target = table.report.get("target", "MaxFL")
    grid = shared_lr_runs(ctx, table, lrs, opts.get("settings", ()))
    tuned = tuned_values(ctx)
    if not tuned:
        ctx.log(f"no results.json in {ctx.out}: the tuned-lr verdict is 'not run'")
    rows = analyse(grid, lrs, metrics, target, tuned)
    cols = [c for c in table.settings if c.label in grid and grid[c.label] is not None]
    first = next((c.spec(ctx.quick) for c in cols), {}) or {}
    schedule = ("--quick (reduced setting: " if ctx.quick else "the table's full schedule (") \
        + ", ".join(f"{k}={first[k]}" for k in ("clients", "unseen_clients", "rounds",
                                                 "local_steps", "batch_size", "rho_steps",
                                                 "max_samples") if k in first) + ")"
    text = markdown(ctx, table, rows, lrs, target, schedule)
    print(text)
    ctx.write({"robustness.md": text,
               "robustness.json": {"title": table.title, "command": ctx.command,
                                   "schedule": schedule, "quick": ctx.quick,
                                   "seeds": table.seeds(ctx.seeds, ctx.quick), "lrs": lrs,
                                   "target": target, "metrics": metrics,
                                   "verdicts": rows, "grid": grid}})
