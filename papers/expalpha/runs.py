"""Running an Exp-alpha setting: every backbone x aggregation x seed (data loaded once per
seed, a diverged run kept as such), per-group weights, and the rows of the paired table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import fedjax_appeal  # load_federated through the package: tests replace it
from fedjax_appeal import HParams, NonFiniteError, RunConfig
from papers.expalpha.metrics import group_weights
from papers.expalpha.settings import (
    backbones,
    make_cfg,
    make_hp,
    schedule,
    seeds_of,
    targets,
)
from papers.expalpha.specs import (
    AGG_LABEL,
    AGGREGATIONS,
    DOMAIN_NAMES,
    METRIC,
    PAPER,
    Backbone,
)
from papers.expalpha.summary import paired_rows, run_summary
from papers.reproduce import Context, mean_std


def load(cfg: RunConfig):
    return fedjax_appeal.load_federated(cfg)


def run_one(ctx: Context, cfg: RunConfig, hp: HParams, label: str, data, ds):
    """(results, None) or (None, message) when the run stopped on NaN/Inf parameters."""
    try:
        res, _ = ctx.run(cfg, hp, label=label, data=data, dataset=ds)
    except NonFiniteError as e:
        ctx.log(f"{label} seed {cfg.seed}: diverged ({e})")
        return None, str(e)
    return res, None


def groups_of(data, name: str) -> np.ndarray | None:
    return np.asarray(data.info[name]) if name in data.info else None


def weights_of(res: dict, groups: np.ndarray | None) -> dict | None:
    rm = res["round_metrics"]
    if groups is None or "cohort_idx" not in rm:
        return None
    return group_weights(np.asarray(rm["cohort_idx"]), np.asarray(rm["cohort_weights"]), groups)


def effective_cohort(res: dict) -> float | None:
    """Mean over rounds of the effective cohort size 1 / sum_k w_k^2 (m for uniform
    weights, 1 when one client takes all the weight)."""
    w = np.asarray(res["round_metrics"].get("cohort_weights", []), np.float64)
    if w.ndim != 2 or not w.size:
        return None
    return float(np.mean(1.0 / np.maximum((w ** 2).sum(1), 1e-12)))


def run_grid(ctx: Context, setting: str, tag: str | None, grid: tuple[int, int] | None = None,
          bbs: Sequence[Backbone] | None = None
          ) -> tuple[dict[tuple[str, str], list[dict]], int]:
    """Every backbone x aggregation x seed of a table setting; data loaded once per seed.

    Returns ({(backbone, aggregation): [run_summary per seed]}, rounds). Each summary
    holds `group_weight` (mean weight per value of the data tag `tag`) and, for generated
    imbalance pools, `ratio_weight` (mean weight per imbalance ratio).
    """
    bbs = list(bbs) if bbs is not None else backbones(ctx, setting)
    runs: dict[tuple[str, str], list[dict]] = {(b.label, a): [] for b in bbs
                                              for a in AGGREGATIONS}
    rounds = schedule(ctx, setting, grid)["rounds"]
    key, xs = METRIC[setting], targets(ctx, setting)
    for seed in seeds_of(ctx):
        data = ds = None
        for b in bbs:
            for agg in AGGREGATIONS:
                cfg = make_cfg(ctx, setting, seed, b, agg, grid)
                if data is None:
                    data, ds = load(cfg)
                res, err = run_one(ctx, cfg, make_hp(ctx, b), f"{setting}/{b.label}/{agg}",
                                   data, ds)
                if res is None:
                    runs[(b.label, agg)].append({"seed": seed, "diverged": err})
                    continue
                extra: dict[str, Any] = {"seed": seed,
                                         "sec_per_round": res["timing"].get("sec_per_round")}
                gw = weights_of(res, groups_of(data, tag) if tag else None)
                if gw is not None:  # mean weight per group value ("True"/"False", domain)
                    extra["group_weight"] = gw["mean"]
                extra["eff_cohort"] = effective_cohort(res)
                rw = weights_of(res, groups_of(data, "imbalance_ratio"))
                if rw is not None:
                    extra["ratio_weight"] = rw["mean"]
                if setting == "domain":
                    extra.update(_domain_acc(res, data, cfg))
                runs[(b.label, agg)].append(run_summary(res["history"], rounds, key, xs,
                                                        extra))
    return runs, rounds


def _domain_acc(res: dict, data, cfg: RunConfig) -> dict[str, float]:
    """Final mean test accuracy of each domain's clients ('acc_MNIST', ...)."""
    acc = np.asarray(res["final_clients"]["test_acc"], np.float64)
    dom = np.asarray(data.info["domain"])
    names = [d.strip() for d in cfg.domains.split(",") if d.strip()]
    return {f"acc_{DOMAIN_NAMES[n]}": float(acc[dom == i].mean())
            for i, n in enumerate(names) if np.any(dom == i)}


def grid_rows(ctx: Context, runs: dict[tuple[str, str], list[dict]], rounds: int,
              setting: str, label: str | None = None) -> list[list[str]]:
    """`paired_rows` of every backbone of a `run_grid` result (diverged seeds dropped pairwise)."""
    rows = []
    for bl in dict.fromkeys(b for b, _ in runs):
        p, e = runs[(bl, "proportional")], runs[(bl, "exp-alpha")]
        keep = [i for i in range(len(p)) if not p[i].get("diverged")
                and not e[i].get("diverged")]
        paper = {a: PAPER.get(setting, {}).get((bl, a), {}) for a in AGGREGATIONS}
        lab = label or bl
        if len(keep) < len(p):
            lab += f" ({len(p) - len(keep)} seed(s) diverged)"
        rows += paired_rows(lab, [p[i] for i in keep], [e[i] for i in keep], rounds,
                            targets(ctx, setting), paper)
    return rows


def weight_rows(runs: dict[tuple[str, str], list[dict]], field: str,
                names: dict[str, str]) -> list[list[str]]:
    """Mean aggregation weight per group (mean ± std over seeds), per backbone and
    aggregation: the diagnostic of who Exp-alpha up- or down-weights."""
    rows = []
    for (bl, agg), rs in runs.items():
        ok = [r for r in rs if not r.get("diverged") and field in r]
        row = [bl, AGG_LABEL[agg]]
        for g in names:
            row.append(mean_std([r[field].get(g) for r in ok], digits=4))
        row.append(mean_std([r.get("eff_cohort") for r in ok], digits=2))
        rows.append(row)
    return rows
