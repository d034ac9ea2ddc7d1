"""Experiments of the Exp-alpha paper ("EXP-alpha: Beyond Proportional Aggregation in
Federated Learning", anonymous ICLR submission).

Exp-alpha replaces FedAvg's proportional weights n_i / n by rho_i ∝ exp((F_i(w_i) -
F_i(w)) / alpha): a client whose local update lowers its own risk a lot (easy, imbalanced
or label-flipped data it can memorise) gets an exponentially smaller share
(`aggregation.exp_alpha`, `--aggregation exp-alpha`).

The paper's setting (Sec. 4, App. A), which every table follows:
  * every client holds the same amount of data (s_i = 1, so proportional = uniform
    weights) and differs only in its class mix: `--imbalance-size N` with class shares ∝
    ratio^(c/(C-1)); the largest class is class 0 for every client (`--imbalance-major
    shared`, the reading of Imbalanced CIFAR-10, the default) or drawn per client
    (`random`); both are reported;
  * clients are drawn fresh every round: a uniform cohort from a pool of 200 generated
    clients (the paper re-creates clients every round; a pool of 20 cohorts is our
    stand-in, so a client recurs about every 20 rounds);
  * accuracy on the balanced global test set (`test_acc_global`, rows held out from every
    client, clean labels);
  * backbones FedAvg, FedProx, FedFor, FedAvgM, FedAdam (Digits: FedAvg, FedFor, FedBN).

Registered experiments:
  * `expalpha-imbalance` (Table 1): the 5 backbones x {proportional, Exp-alpha (alpha =
    0.2)}, ratios drawn per client from {1, .5, .1, .05, .01, .005, .001}, cohorts of 10;
    shared and random majors; plus FedAvg on the scaled-down (E, t) grid.
  * `expalpha-flip` (Table 2): balanced equal-size clients, cohorts of 6, each sampled
    client flipped with probability 1/3 every round (`--flip-protocol bernoulli`, flip
    ratio 1.0: every label wrong).
  * `expalpha-adapt` (Fig. 2): FedAvg, mean weight per client group: '1.0x4,0.01x3,0.1x3'
    cohorts (4 + 3 + 3, stratified) and 2 of 6 flipped every round (`--flip-protocol
    fixed`), with `weights.png`.
  * `expalpha-alpha` (App. A.5): FedAvg, alpha in {0.2, 1, 5, 25, 125} and proportional,
    cohorts of 4 balanced + 6 imbalanced clients of ratio 0.001, 2 local epochs (and
    alpha 0.2 vs proportional with random majors).
  * `expalpha-domain` (Table 3): Digits domain shift (MNIST, USPS, MNIST-M; SVHN and
    SynthDigits are not in the data directory), all clients every round, BatchNorm CNN;
    FedAvg, FedFor and FedBN.
  * `expalpha-gaps` (diagnostic): F_k(w), F_k(w_k) and the Exp-alpha logit per imbalance
    ratio at the global model of a proportional FedAvg run, shared vs random majors.

Every table reports, per backbone, rounds to each accuracy target and accuracy at R/2 and
R for both aggregations, each as mean ± std over the seeds with the per-seed values, and
the paired per-seed difference Exp-alpha − proportional with its sign in every seed (the
direction counts as held only when the sign holds in every seed).

Compute profiles. `cpu` (default): Fashion-MNIST and the MLP, 200-row clients, the
paper's (E, t) grid scaled down by 4 in E·t; targets 70/75/80% that the proportional
baseline crosses inside the budget. `gpu` (`reproduce NAME --set profile=gpu`; code only,
not run here): CIFAR-10 with ResNet20 (option-A zero-padding shortcuts), 35k train rows for
the clients, 10k balanced held-out test rows (the paper's 15k validation split is not
separate: acc40 is read on the held-out test set every round), SGD lr 0.01, batch 128,
alpha 0.2, the paper's (E, t). `--set model=NAME` overrides the model of the non-Digits
settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_appeal import ConfigError, HParams, RunConfig
from papers.expalpha.metrics import group_weights, plot_group_weights
from papers.expalpha.specs import (
    ADAPT_GROUPS,
    AGG_LABEL,
    AGGREGATIONS,
    ALPHA,
    ALPHAS,
    BACKBONES,
    BY_LABEL,
    CLIENT_LR,
    DOMAIN_BACKBONES,
    DOMAIN_NAMES,
    DOMAIN_TARGETS,
    GRID,
    METRIC,
    MODELS,
    OPTIONS,
    PAPER,
    PAPER_GRID,
    QUICK_BACKBONES,
    SCHEDULES,
    TARGETS,
    Backbone,
)
from papers.expalpha.summary import PAIRED_HEADER, mean_traces, paired_rows, run_summary, sign
from papers.reproduce import Context, experiment, markdown_table, mean_std


def profile(ctx: Context) -> str:
    """The compute profile: `reproduce NAME --set profile=gpu` (default cpu)."""
    p = ctx.option("profile", "cpu") or "cpu"
    if p not in MODELS:
        raise ConfigError(f"--set profile={p}: the profile must be cpu or gpu")
    return p


def schedule(ctx: Context, setting: str, grid: tuple[int, int] | None = None
             ) -> dict[str, Any]:
    """RunConfig keys of a setting in the context's profile (with the --quick overrides);
    `grid` = (E, t) replaces local steps and rounds."""
    s = dict(SCHEDULES[profile(ctx)][setting])
    if grid is not None:
        e, t = grid
        s.update(local_steps=e, rounds=t, eval_every=max(1, t // 50))
    if ctx.quick:
        s.update(SCHEDULES["quick"][setting])
    return s


def targets(ctx: Context, setting: str) -> tuple[float, ...]:
    return DOMAIN_TARGETS if setting == "domain" else TARGETS[profile(ctx)]


def model_for_backbone(ctx: Context, b: Backbone, setting: str) -> str:
    """`mlp` (cpu, FMNIST) or `resnet20` (gpu, CIFAR-10); `cnn_bn` for every Digits run;
    `--set model=NAME` replaces the model of the other settings."""
    if setting == "domain":
        return "cnn_bn"
    plain, bn = MODELS[profile(ctx)]
    return ctx.option("model") or (bn if b.bn else plain)


def backbones(ctx: Context, setting: str) -> list[Backbone]:
    key = setting.removesuffix("-random")
    if ctx.quick and key in QUICK_BACKBONES:
        return [BY_LABEL[n] for n in QUICK_BACKBONES[key]]
    if setting == "domain":  # the paper's Table 3 rows (FedAvg, FedBN) and FedFor
        return [BY_LABEL[n] for n in DOMAIN_BACKBONES]
    return list(BACKBONES)


def seeds_of(ctx: Context) -> list[int]:
    return ctx.seeds[:1] if ctx.quick else list(ctx.seeds)


def make_cfg(ctx: Context, setting: str, seed: int, b: Backbone, aggregation: str,
             grid: tuple[int, int] | None = None) -> RunConfig:
    return ctx.base(**schedule(ctx, setting, grid), algorithm=b.algorithm,
                    server_opt=b.server_opt, aggregation=aggregation,
                    model=model_for_backbone(ctx, b, setting), unseen_clients=0, appeal="off",
                    seed=seed)


def make_hp(ctx: Context, b: Backbone | None = None, **kw) -> HParams:
    return HParams(**{"client_lr": CLIENT_LR[profile(ctx)], "exp_alpha": ALPHA,
                      **(b.hp if b is not None else {}), **kw})


# ----------------------------------------------------------------------------- running


def _load(cfg: RunConfig):
    from fedjax_appeal import load_federated

    return load_federated(cfg)


def _run(ctx: Context, cfg: RunConfig, hp: HParams, label: str, data, ds):
    """(results, None) or (None, message) when the run stopped on NaN/Inf parameters."""
    from fedjax_appeal import NonFiniteError

    try:
        res, _ = ctx.run(cfg, hp, label=label, data=data, dataset=ds)
    except NonFiniteError as e:
        ctx.log(f"{label} seed {cfg.seed}: diverged ({e})")
        return None, str(e)
    return res, None


def _groups(data, name: str) -> np.ndarray | None:
    return np.asarray(data.info[name]) if name in data.info else None


def _weights(res: dict, groups: np.ndarray | None) -> dict | None:
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


def _grid(ctx: Context, setting: str, tag: str | None, grid: tuple[int, int] | None = None,
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
                    data, ds = _load(cfg)
                res, err = _run(ctx, cfg, make_hp(ctx, b), f"{setting}/{b.label}/{agg}", data, ds)
                if res is None:
                    runs[(b.label, agg)].append({"seed": seed, "diverged": err})
                    continue
                extra: dict[str, Any] = {"seed": seed,
                                         "sec_per_round": res["timing"].get("sec_per_round")}
                gw = _weights(res, _groups(data, tag) if tag else None)
                if gw is not None:  # mean weight per group value ("True"/"False", domain)
                    extra["group_weight"] = gw["mean"]
                extra["eff_cohort"] = effective_cohort(res)
                rw = _weights(res, _groups(data, "imbalance_ratio"))
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
    """`paired_rows` of every backbone of a `_grid` result (diverged seeds dropped pairwise)."""
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


# ----------------------------------------------------------------------------- reports


def _setting_text(ctx: Context, setting: str, grid: tuple[int, int] | None = None) -> str:
    s = schedule(ctx, setting, grid)
    parts = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()]
    return ", ".join(parts)


def _hp_text(ctx: Context, bbs: Sequence[Backbone], setting: str) -> str:
    out = [f"client lr {CLIENT_LR[profile(ctx)]} (local SGD), Exp-α α = {ALPHA} unless varied "
           "(plain form, `--aggregation exp-alpha`)"]
    for b in bbs:
        opts = {"server_opt": b.server_opt, **({"server_lr": 1.0} if not b.hp else b.hp)}
        out.append(f"{b.label} (`{b.algorithm}`, model `{model_for_backbone(ctx, b, setting)}`): "
                   + ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in opts.items()))
    return "; ".join(out)


def header(ctx: Context, setting: str, title: str, bbs: Sequence[Backbone],
           note: str = "") -> str:
    """The table's header: command, profile, models, schedule, hyperparameters, caveats."""
    seeds = seeds_of(ctx)
    xs = ", ".join(f"acc{round(100 * x)}" for x in targets(ctx, setting))
    text = (f"# {ctx.name} ({title})\n\nCommand: `{ctx.command}`\n\n"
            f"Profile `{profile(ctx)}`. Schedule: {_setting_text(ctx, setting)}; no unseen "
            "clients.\n\n"
            f"Hyperparameters: {_hp_text(ctx, bbs, setting)}.\n\n"
            f"Seeds {seeds}; mean ± std (population std) with the per-seed values in "
            f"brackets. Metric: `{METRIC[setting]}`. Targets {xs}: first evaluated round at "
            "or above the target (resolution eval_every; '>R' = not reached, counted as "
            "R + 1 in the paired difference). Δ = Exp-α − proportional per seed (same seed: "
            "same pool, init and cohorts); 'direction held' = the paper's direction (fewer "
            "rounds, higher accuracy) in every seed.\n")
    if note:
        text += "\n" + note + "\n"
    if ctx.quick:
        text += ("\n**Quick variant** (a few rounds, one seed, a subset of the backbones): "
                 "checks the pipeline; the numbers are not comparable to the paper.\n")
    elif profile(ctx) == "cpu" and setting != "domain":
        text += ("\nThe paper trains ResNet20 on CIFAR-10 (acc40, hundreds of rounds); this "
                 "CPU profile trains an MLP on Fashion-MNIST with E·t scaled down by 4, so "
                 "compare directions, not values. The paper's Δ column quotes its FedAvg-"
                 "style E=20 numbers (acc40 rounds, final test %).\n")
    return text


def _plot_curves(path: Path, runs: dict[tuple[str, str], list[dict]], key: str,
                 ylabel: str) -> None:
    """Accuracy vs round (mean over seeds), one panel per backbone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(bl for bl, _ in runs))
    fig, axes = plt.subplots(1, len(labels), figsize=(3.6 * len(labels), 3.2), squeeze=False,
                             sharey=True)
    for ax, bl in zip(axes[0], labels, strict=True):
        for (b2, agg), rs in runs.items():
            ok = [r for r in rs if not r.get("diverged")]
            if b2 != bl or not ok:
                continue
            hs = [r["history"] for r in ok]
            n = min(len(h) for h in hs)
            x = [h["round"] for h in hs[0][:n]]
            y = np.mean([[np.nan if h.get(key) is None else 100 * h[key] for h in hh[:n]]
                         for hh in hs], axis=0)
            ax.plot(x, y, marker="o", ms=2, label=AGG_LABEL.get(agg, agg))
        ax.set_title(bl, fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        lo = np.nanmin([100 * h.get(key, np.nan) for rs in runs.values() for r in rs
                        if not r.get("diverged") for h in r["history"][len(r["history"]) // 4:]
                        if h.get(key) is not None] or [0])
        ax.set_ylim(max(0, lo - 5), None)
    axes[0][0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _json_runs(runs: dict[tuple[str, str], list[dict]]) -> dict[str, list[dict]]:
    return {f"{bl}/{agg}": rs for (bl, agg), rs in runs.items()}


def _meta(ctx: Context, setting: str, bbs: Sequence[Backbone]) -> dict[str, Any]:
    return {"paper": "EXP-alpha: Beyond Proportional Aggregation in Federated Learning",
            "command": ctx.command, "profile": profile(ctx), "quick": ctx.quick,
            "seeds": seeds_of(ctx), "schedule": schedule(ctx, setting),
            "metric": METRIC[setting], "targets": list(targets(ctx, setting)),
            "client_lr": CLIENT_LR[profile(ctx)], "alpha": ALPHA,
            "backbones": [dataclasses.asdict(b) | {"model": model_for_backbone(ctx, b, setting)}
                          for b in bbs],
            "paper_numbers": {f"{b}/{a}": v for (b, a), v in PAPER.get(setting, {}).items()}}


def _summary_json(rows: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(PAIRED_HEADER, r, strict=True)) for r in rows]


# ----------------------------------------------------------------------------- experiments



def _ratio_key_names(runs) -> dict[str, str]:
    keys = sorted({k for rs in runs.values() for r in rs for k in r.get("ratio_weight", {})},
                  key=lambda k: -float(k))
    return {k: f"ratio {float(k):g}" for k in keys}


@experiment("expalpha-imbalance", "Exp-alpha Table 1: 5 backbones x {prop, Exp-alpha}, "
                                  "equal-size class-imbalanced clients (shared and random "
                                  "majors) + FedAvg on the (E, t) grid",
            options=OPTIONS)
def expalpha_imbalance(ctx: Context) -> None:
    bbs = backbones(ctx, "imbalance")
    shared, rounds = _grid(ctx, "imbalance", "imbalanced")
    rand, _ = _grid(ctx, "imbalance-random", "imbalanced")
    fedavg = BY_LABEL["FedAvg"]
    grid_pts = GRID[profile(ctx)][:1] if ctx.quick else GRID[profile(ctx)]
    grid_runs = {}
    for e, t in grid_pts:
        grid_runs[(e, t)] = _grid(ctx, "imbalance", "imbalanced", (e, t), [fedavg])
    rows_s = grid_rows(ctx, shared, rounds, "imbalance")
    rows_r = grid_rows(ctx, rand, rounds, "imbalance")
    rows_g = []
    for (e, t), (gr, rr) in grid_runs.items():
        rows_g += grid_rows(ctx, gr, rr, "imbalance-grid", f"FedAvg E={e}, t={t}")
    names = _ratio_key_names(shared)
    note = ("Clients: every client holds 200 train rows with class shares ∝ ratio^(r/9) "
            "(rank r of its class order), its ratio drawn from {1, .5, .1, .05, .01, .005, "
            ".001}; a pool of 200 such clients, a uniform cohort of 10 every round. Test: "
            "500 rows per class held out from every client (`test_acc_global`). Table A: "
            "class 0 is every client's largest class (`--imbalance-major shared`, the "
            "default reading of Imbalanced CIFAR-10); Table B: a random class order per "
            "client (`random`). Table C: FedAvg on the (E, t) grid (paper: (20, 400), "
            "(40, 200), (80, 100), (160, 50); here E·t = 2000), shared majors. Table D: mean "
            "aggregation weight of a cohort slot per imbalance ratio (uniform = 0.1), "
            "shared majors, and the effective cohort size 1/Σw² (10 for uniform weights); "
            "Table E: the same for random majors — the diagnostics of whom Exp-α favours "
            "and how much it concentrates the weight.")
    paper_grid = "; ".join(f"E={e}: acc40 {v[0]:.2f} → {v[1]:.2f}, test {v[2]:.2f} → {v[3]:.2f}"
                           for e, v in PAPER_GRID.items())
    table = (header(ctx, "imbalance", "Table 1, class imbalance", bbs, note)
             + "\n## A. Shared majors (class 0 largest for every client)\n\n"
             + markdown_table(PAIRED_HEADER, rows_s)
             + "\n\n## B. Random majors (class order drawn per client)\n\n"
             + markdown_table(PAIRED_HEADER, rows_r)
             + "\n\n## C. FedAvg on the (E, t) grid (shared majors)\n\n"
             + f"Paper (FedAvg, proportional → Exp-α): {paper_grid}.\n\n"
             + markdown_table(PAIRED_HEADER, rows_g)
             + "\n\n## D. Mean aggregation weight per imbalance ratio (shared majors)\n\n"
             + markdown_table(["backbone", "aggregation", *names.values(),
                               "effective cohort 1/Σw²"],
                              weight_rows(shared, "ratio_weight", names))
             + "\n\n## E. Mean aggregation weight per imbalance ratio (random majors)\n\n"
             + markdown_table(["backbone", "aggregation", *names.values(),
                               "effective cohort 1/Σw²"],
                              weight_rows(rand, "ratio_weight", names)) + "\n")
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "imbalance", bbs),
                                "schedule_random": schedule(ctx, "imbalance-random"),
                                "summary": {"shared": _summary_json(rows_s),
                                            "random": _summary_json(rows_r),
                                            "grid": _summary_json(rows_g)},
                                "runs": {"shared": _json_runs(shared),
                                         "random": _json_runs(rand),
                                         "grid": {f"E{e}_t{t}": _json_runs(g[0])
                                                  for (e, t), g in grid_runs.items()}}},
               "curves.png": lambda p: _plot_curves(p, shared, METRIC["imbalance"],
                                                    "global test accuracy (%)"),
               "curves_random.png": lambda p: _plot_curves(p, rand, METRIC["imbalance"],
                                                           "global test accuracy (%)")})


@experiment("expalpha-flip", "Exp-alpha Table 2: 5 backbones x {prop, Exp-alpha}, each "
                             "sampled client flipped with probability 1/3",
            options=OPTIONS)
def expalpha_flip(ctx: Context) -> None:
    bbs = backbones(ctx, "flip")
    runs, rounds = _grid(ctx, "flip", "flipped")
    rows = grid_rows(ctx, runs, rounds, "flip")
    note = ("Clients: 200 balanced clients of 200 train rows; a uniform cohort of 6 every "
            "round, each sampled client flipped with probability 1/3 in that round "
            "(`--flip-protocol bernoulli`, the paper's Table 2 protocol; flip ratio 1.0: a "
            "fixed derangement per client, every label wrong). Accuracy on 500 held-out "
            "rows per class with clean labels (`test_acc_global`). Second table: mean "
            "aggregation weight of flipped and clean cohort slots (uniform = 1/6 = 0.1667).")
    wn = {"False": "clean", "True": "flipped"}
    table = (header(ctx, "flip", "Table 2, label flipping", bbs, note) + "\n"
             + markdown_table(PAIRED_HEADER, rows)
             + "\n\n## Mean aggregation weight per cohort slot\n\n"
             + markdown_table(["backbone", "aggregation", "clean", "flipped",
                               "effective cohort 1/Σw²"],
                              weight_rows(runs, "group_weight", wn)) + "\n")
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "flip", bbs), "summary": _summary_json(rows),
                                "runs": _json_runs(runs)},
               "curves.png": lambda p: _plot_curves(p, runs, METRIC["flip"],
                                                    "clean global test accuracy (%)")})




def adapt_rows(results: dict[str, dict[str, list[dict]]], cohorts: dict[str, int]
               ) -> list[list[str]]:
    """Rows (setting, aggregation, group, mean weight ± std over seeds, uniform 1/m,
    final accuracy) of the `expalpha-adapt` table."""
    rows = []
    for setting, by_agg in results.items():
        names = ADAPT_GROUPS[setting][1]
        for agg, rs in by_agg.items():
            for g, name in names.items():
                w = [r["group_weight"].get(g) for r in rs]
                rows.append([setting.removeprefix("adapt-"), AGG_LABEL[agg], name,
                             mean_std(w, digits=4), f"{1 / cohorts[setting]:.4f}",
                             mean_std([r["acc_final"] for r in rs], 100)])
    return rows


@experiment("expalpha-adapt", "Exp-alpha Fig. 2: per-group aggregation weights over training "
                              "(imbalanced / flipped clients)",
            options=OPTIONS)
def expalpha_adapt(ctx: Context) -> None:
    fedavg = BY_LABEL["FedAvg"]
    results: dict[str, dict[str, list[dict]]] = {}
    traces: dict[str, dict[str, list[float]]] = {}
    cohorts, sign_rows = {}, []
    for setting, (tag, names) in ADAPT_GROUPS.items():
        s = schedule(ctx, setting)
        cohorts[setting] = s["cohort"]
        results[setting] = {a: [] for a in AGGREGATIONS}
        per_seed: dict[str, list[dict]] = {a: [] for a in AGGREGATIONS}
        for seed in seeds_of(ctx):
            data = ds = None
            for agg in AGGREGATIONS:
                cfg = make_cfg(ctx, setting, seed, fedavg, agg)
                if data is None:
                    data, ds = _load(cfg)
                res, _ = ctx.run(cfg, make_hp(ctx, fedavg), label=f"{setting}/{agg}", data=data,
                                 dataset=ds)
                gw = _weights(res, _groups(data, tag))
                per_seed[agg].append(gw["trace"])
                results[setting][agg].append(run_summary(
                    res["history"], s["rounds"], METRIC[setting], targets(ctx, setting),
                    {"seed": seed, "group_weight": gw["mean"], "group_slots": gw["count"],
                     "weight_trace": gw["trace"]}))
        for agg in AGGREGATIONS:
            tr = mean_traces(per_seed[agg])
            traces[f"{setting.removeprefix('adapt-')}: {AGG_LABEL[agg]}"] = {
                names.get(g, g): v for g, v in tr.items()}
        sign_rows += paired_rows(setting.removeprefix("adapt-"),
                                 results[setting]["proportional"],
                                 results[setting]["exp-alpha"], s["rounds"], targets(ctx, setting))
        # the paper's claim: the least shifted group gets the highest Exp-α weight
        first, other = list(names)[0], list(names)[1:]
        w = [r["group_weight"] for r in results[setting]["exp-alpha"]]
        gaps = [min(x[first] - x[g] for g in other) for x in w]
        results[setting]["top_group_gap"] = gaps
    note = ("FedAvg, proportional vs Exp-α. imbalance: a pool of 200 equal-size clients, "
            "40% balanced, 30% ratio 0.01, 30% ratio 0.1 (shared majors), every cohort of "
            "10 holds 4 + 3 + 3 of them (stratified). flip: 200 balanced clients, cohorts of "
            "6 with exactly 2 flipped every round (`--flip-protocol fixed`, the paper's "
            "Fig. 2b protocol). Mean weight = mean aggregation weight over every (round, "
            "cohort slot) of the group's clients; `weights.png` shows its per-round mean "
            "(5-round moving average, mean over seeds). 'top-group gap' = Exp-α weight of "
            "the least shifted group (balanced / clean) minus the largest other group's, "
            "per seed.")
    hdr = header(ctx, "adapt-imbalance", "Fig. 2, weights adapt to the client groups",
                 [fedavg], note)
    hdr += f"\nflip setting schedule: {_setting_text(ctx, 'adapt-flip')}.\n"
    gap_rows = [[k.removeprefix("adapt-"), ", ".join(f"{g:+.4f}" for g in v["top_group_gap"]),
                 "".join(sign(g) for g in v["top_group_gap"])]
                for k, v in results.items()]
    for v in results.values():
        v.pop("top_group_gap")
    table = (hdr + "\n" + markdown_table(
        ["setting", "aggregation", "client group", "mean weight", "uniform 1/m",
         "final acc (%)"], adapt_rows(results, cohorts))
        + "\n\n## Top-group gap of the Exp-α weights (per seed)\n\n"
        + markdown_table(["setting", "gap per seed", "signs"], gap_rows)
        + "\n\n## Accuracy, paired seeds\n\n" + markdown_table(PAIRED_HEADER, sign_rows)
        + "\n")
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "adapt-imbalance", [fedavg]),
                                "schedule_flip": schedule(ctx, "adapt-flip"),
                                "top_group_gap": {r[0]: r[1] for r in gap_rows},
                                "summary": _summary_json(sign_rows), "runs": results},
               "weights.png": lambda p: plot_group_weights(
                   p, traces, title="FedAvg: mean aggregation weight per client group")})


@experiment("expalpha-domain", "Exp-alpha Table 3: Digits domain shift (MNIST, USPS, MNIST-M)",
            options=OPTIONS)
def expalpha_domain(ctx: Context) -> None:
    bbs = backbones(ctx, "domain")
    runs, rounds = _grid(ctx, "domain", "domain")
    s = schedule(ctx, "domain")
    names = [DOMAIN_NAMES[d.strip()] for d in s["domains"].split(",") if d.strip()]
    note = ("Digits domain shift (FedBN's benchmark): one domain per client, round-robin, "
            f"{s['domain_samples']} rows per client (60% train), every client in every round. "
            "Domains here: " + ", ".join(names) + ". **Missing**: SVHN and SynthDigits of the "
            "paper's (FedBN's) five-domain Digits benchmark are not in the data directory. "
            "Accuracy = mean over clients of their own test split (FedBN: each client with "
            "its own BN layers). Backbones: the paper's Table 3 rows FedAvg and FedBN, plus "
            "FedFor (FedProx, FedAvgM, FedAdam left out of the CPU budget). Second table: "
            "final accuracy per domain and the mean "
            "aggregation weight of each domain's clients (uniform = 1/cohort). The paper's "
            "Digits numbers (FedAvg avg 81.89 → 81.92, FedBN 85.22 → 85.24: no change) are "
            "on five domains.")
    rows = grid_rows(ctx, runs, rounds, "domain")
    dom_rows = []
    for (bl, agg), rs in runs.items():
        ok = [r for r in rs if not r.get("diverged")]
        row = [bl, AGG_LABEL[agg]] + [mean_std([r.get(f"acc_{n}") for r in ok], 100)
                                      for n in names]
        row.append(" / ".join(
            f"{np.mean([r['group_weight'][str(i)] for r in ok]):.3f}" if ok else "n/a"
            for i in range(len(names))))
        dom_rows.append(row)
    table = (header(ctx, "domain", "Table 3, Digits domain shift", bbs, note) + "\n"
             + markdown_table(PAIRED_HEADER, rows) + "\n\n## Per domain (final)\n\n"
             + markdown_table(["backbone", "aggregation", *[f"{n} (%)" for n in names],
                               "mean weight " + " / ".join(names)], dom_rows) + "\n")
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "domain", bbs), "summary": _summary_json(rows),
                                "runs": _json_runs(runs)},
               "curves.png": lambda p: _plot_curves(p, runs, "test_acc_seen",
                                                    "test accuracy (%)")})


@experiment("expalpha-alpha", "Exp-alpha App. A.5: alpha sweep {0.2, 1, 5, 25, 125} (FedAvg, "
                              "4 balanced + 6 ratio-0.001 clients per cohort)",
            options=OPTIONS)
def expalpha_alpha(ctx: Context) -> None:
    fedavg = BY_LABEL["FedAvg"]
    s = schedule(ctx, "alpha")
    rounds, xs = s["rounds"], targets(ctx, "alpha")
    alphas = ALPHAS[::2] if ctx.quick else ALPHAS
    by_alpha: dict[str, list[dict]] = {"proportional": []}
    by_alpha.update({f"α = {a:g}": [] for a in alphas})
    for seed in seeds_of(ctx):
        data = ds = None
        for lab in by_alpha:
            agg = "proportional" if lab == "proportional" else "exp-alpha"
            cfg = make_cfg(ctx, "alpha", seed, fedavg, agg)
            if data is None:
                data, ds = _load(cfg)
            hp = make_hp(ctx, fedavg) if agg == "proportional" else make_hp(
                ctx, fedavg, exp_alpha=float(lab.split("= ")[1]))
            res, _ = ctx.run(cfg, hp, label=f"alpha/{lab}", data=data, dataset=ds)
            gw = _weights(res, _groups(data, "imbalanced"))
            by_alpha[lab].append(run_summary(res["history"], rounds, METRIC["alpha"], xs,
                                             {"seed": seed, "group_weight": gw["mean"],
                                              "eff_cohort": effective_cohort(res)}))
    rand: dict[str, list[dict]] = {"proportional": [], f"α = {ALPHA:g}": []}
    for seed in seeds_of(ctx):  # the same cohorts with a random class order per client
        data = ds = None
        for lab in rand:
            agg = "proportional" if lab == "proportional" else "exp-alpha"
            cfg = make_cfg(ctx, "alpha-random", seed, fedavg, agg)
            if data is None:
                data, ds = _load(cfg)
            res, _ = ctx.run(cfg, make_hp(ctx, fedavg), label=f"alpha-random/{lab}", data=data,
                             dataset=ds)
            gw = _weights(res, _groups(data, "imbalanced"))
            rand[lab].append(run_summary(res["history"], rounds, METRIC["alpha"], xs,
                                         {"seed": seed, "group_weight": gw["mean"],
                                          "eff_cohort": effective_cohort(res)}))
    rows = []
    for a in alphas:
        rows += paired_rows(f"α = {a:g}", by_alpha["proportional"], by_alpha[f"α = {a:g}"],
                            rounds, xs)
    rows_r = paired_rows(f"α = {ALPHA:g}, random majors", rand["proportional"],
                         rand[f"α = {ALPHA:g}"], rounds, xs)
    wrows = [[lab, mean_std([r["group_weight"].get("False") for r in rs], digits=4),
              mean_std([r["group_weight"].get("True") for r in rs], digits=4),
              mean_std([r["eff_cohort"] for r in rs], digits=2)]
             for lab, rs in [*by_alpha.items(),
                             *((f"{k} (random majors)", v) for k, v in rand.items())]]
    note = ("The paper's App. A.5 setting: imbalance ratio 0.001, every cohort of 10 holds 4 "
            "balanced and 6 imbalanced clients (stratified, from a pool of 200 equal-size "
            "clients, 40% balanced), 2 local epochs (13 steps of 32 over 200 rows). The "
            "paper: smaller α is better, α = 0.2 best, every α at or above proportional "
            "(its Fig. 3, no numbers). Rows compare each α with proportional on the same "
            "seeds; the imbalanced clients' largest class is class 0 for all (shared "
            "majors). Second table: α = 0.2 against proportional with a random class order "
            "per client (random majors). Third table: mean weight of a balanced / "
            "imbalanced cohort slot (uniform = 0.1).")
    table = (header(ctx, "alpha", "α sweep", [fedavg], note) + "\n"
             + markdown_table([*PAIRED_HEADER[:-1], "paper"], [r[:-1] + ["—"] for r in rows])
             + "\n\n## Random majors\n\n"
             + markdown_table([*PAIRED_HEADER[:-1], "paper"],
                              [r[:-1] + ["—"] for r in rows_r])
             + "\n\n## Mean aggregation weight\n\n"
             + markdown_table(["aggregation", "balanced slot", "imbalanced slot",
                               "effective cohort 1/Σw²"], wrows)
             + "\n")
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "alpha", [fedavg]), "alphas": list(alphas),
                                "summary": _summary_json(rows),
                                "summary_random_majors": _summary_json(rows_r),
                                "runs": by_alpha, "runs_random_majors": rand},
               "alpha.png": lambda p: _plot_alpha(p, by_alpha, alphas)})


def _plot_alpha(path: Path, by_alpha: dict[str, list[dict]], alphas: Sequence[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = METRIC["alpha"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    fin = [np.mean([100 * r["acc_final"] for r in by_alpha[f"α = {a:g}"]]) for a in alphas]
    sd = [np.std([100 * r["acc_final"] for r in by_alpha[f"α = {a:g}"]]) for a in alphas]
    axes[0].errorbar(alphas, fin, yerr=sd, marker="o", capsize=3, label="Exp-α")
    ref = [100 * r["acc_final"] for r in by_alpha["proportional"]]
    axes[0].axhline(np.mean(ref), color="gray", ls="--", label="proportional")
    axes[0].set(xscale="log", xlabel="α", ylabel="final global test accuracy (%)")
    axes[0].legend(fontsize=8)
    for lab, rs in by_alpha.items():
        hs = [r["history"] for r in rs]
        n = min(len(h) for h in hs)
        axes[1].plot([h["round"] for h in hs[0][:n]],
                     np.mean([[100 * h[key] for h in hh[:n]] for hh in hs], 0), label=lab)
    axes[1].set(xlabel="round", ylabel="global test accuracy (%)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- diagnostics


def client_gaps(model, cfg: RunConfig, hp: HParams, params, mstate, data, key
                ) -> dict[str, np.ndarray]:
    """F_k(w), F_k(w_k) and the Exp-alpha logit gap F_k(w_k) − F_k(w) of every pool client
    after `cfg.local_steps` local SGD steps from the global model w (vmapped, one jit)."""
    import jax

    from fedjax_appeal.extend import client_loss, local_sgd

    def one(k, kk):
        res = local_sgd(model, params, mstate, data.train, k, kk, hp.client_lr,
                        steps=cfg.local_steps, batch_size=cfg.batch_size)
        before = client_loss(model, params, mstate, data.train, k)[0]
        after = client_loss(model, res.params, res.state, data.train, k)[0]
        return before, after

    ks = jax.numpy.arange(data.num_clients)
    before, after = jax.jit(jax.vmap(one))(ks, jax.random.split(key, data.num_clients))
    before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
    return {"before": before, "after": after, "gap": after - before}


@experiment("expalpha-gaps", "Exp-alpha diagnostic: F_k(w), F_k(w_k) and the weight logit "
                             "per imbalance ratio at the global model of a FedAvg run",
            options=OPTIONS)
def expalpha_gaps(ctx: Context) -> None:
    import jax

    from fedjax_appeal import run_config
    from fedjax_appeal.extend import model_for

    fedavg = BY_LABEL["FedAvg"]
    checkpoints = (10, 50) if not ctx.quick else (2,)
    rows, raw = [], {}
    for setting in ("imbalance", "imbalance-random"):
        for seed in seeds_of(ctx):
            for r in checkpoints:
                cfg = make_cfg(ctx, setting, seed, fedavg, "proportional").replace(
                    rounds=r, eval_every=r)
                hp = make_hp(ctx, fedavg).as_arrays()
                data, ds = _load(cfg)
                _, sim = run_config(cfg, make_hp(ctx, fedavg), data=data, dataset=ds)
                model = model_for(cfg.model, data, ds, cfg.conv_impl)
                st = sim.final_state
                g = client_gaps(model, cfg, hp, st.params, st.model_state, data,
                                jax.random.key(1000 + seed))
                ratio = np.asarray(data.info["imbalance_ratio"])
                for rv in sorted(set(ratio.tolist()), reverse=True):
                    m = ratio == rv
                    raw.setdefault((setting, r, f"{rv:g}"), []).append(
                        [g["before"][m].mean(), g["after"][m].mean(), g["gap"][m].mean()])
    for (setting, r, rv), vals in raw.items():
        v = np.asarray(vals)
        rows.append([setting.replace("imbalance-random", "random majors").replace(
            "imbalance", "shared majors"), str(r), rv,
            f"{v[:, 0].mean():.3f} ± {v[:, 0].std():.3f}",
            f"{v[:, 1].mean():.3f} ± {v[:, 1].std():.3f}",
            f"{v[:, 2].mean():+.3f} ± {v[:, 2].std():.3f}",
            f"{np.exp(v[:, 2].mean() / ALPHA):.3g}"])
    note = ("FedAvg with proportional weights in the `expalpha-imbalance` settings, stopped "
            f"after each of {list(checkpoints)} rounds; at that global model w every one of "
            "the 200 pool clients runs the round's local update (E = 20 steps) and reports "
            "F_k(w) and F_k(w_k) on its train rows. Means per imbalance ratio, mean ± std "
            "over seeds. Exp-α's weight is ∝ exp(gap / α): a more negative gap (a larger "
            "local loss drop) means a smaller weight; the last column is exp(mean gap / α), "
            "the relative weight of a typical client of that ratio.")
    table = (header(ctx, "imbalance", "diagnostic: loss gaps per imbalance ratio", [fedavg],
                    note) + "\n" + markdown_table(
        ["majors", "round", "ratio", "F_k(w)", "F_k(w_k)", "gap F_k(w_k) − F_k(w)",
         "exp(gap/α)"], rows) + "\n")
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "imbalance", [fedavg]),
                                "checkpoints": list(checkpoints),
                                "rows": rows}})
