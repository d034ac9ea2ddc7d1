"""Experiments of the Exp-alpha paper ("EXP-alpha: Beyond Proportional Aggregation in
Federated Learning", anonymous ICLR submission).

Exp-alpha replaces FedAvg's proportional weights n_i / n by rho_i ∝ exp((F_i(w_i) -
F_i(w)) / alpha): a client whose local update lowers its own risk a lot (easy, imbalanced
or label-flipped data it can memorise) gets an exponentially smaller share
(`aggregation.exp_alpha`, `--aggregation exp-alpha`). Registered experiments:

  * `expalpha-imbalance` (Table 1): backbones FedAvg, FedProx, FedAvgM, FedAdam, FedBN x
    {proportional, Exp-alpha (alpha = 0.2)} on CIFAR-10 under class imbalance: a pool of
    generated clients whose imbalance ratios are drawn from {1, .5, .1, .05, .01, .005,
    .001} (LDAM recipe, `--imbalance-ratios random`), a cohort sampled from it every round
    (the seed draws fresh clients every round). acc40 (first round at 40% test accuracy),
    accuracy at R/2 and R.
  * `expalpha-flip` (Table 2): the same backbones on CIFAR-10 with 1/3 of the clients'
    labels flipped (flip ratio 1.0: every label wrong), 6 clients per round of which
    exactly 2 are flipped (stratified cohorts). Accuracy = mean test accuracy of the clean
    clients (their correctly labelled test rows).
  * `expalpha-adapt` (Fig. 2): FedAvg, proportional vs Exp-alpha: mean aggregation weight
    per client group over training (balanced vs imbalanced clients of a '1.0x4,0.01x3,0.1x3'
    pool with 4 + 3 + 3 cohorts; clean vs flipped clients), with `weights.png`.
  * `expalpha-domain` (Table 3): Digits domain shift, one domain per client (MNIST, USPS,
    MNIST-M; the paper's Digits, from FedBN, also has SVHN and SynthDigits, which are not
    in the data directory), all clients in every round, BatchNorm CNN for every backbone.
  * `expalpha-alpha`: FedAvg with alpha in {0.2, 1, 5, 25, 125} in the setting of Table 1
    (one vmapped program per seed via `fedjax_appeal.sweep`), proportional as reference.

Every table reports mean ± std over the seeds (`--seeds`, default 0, 1, 2; each seed
draws its own pool, model init, cohorts and minibatches) with the paper's number beside
ours where the paper gives one (only FedAvg in Tables 1 and 2).

Compute profiles. The seed trains ResNet20 on CIFAR-10 for hundreds of rounds; the default
profile `cpu` fits every table into ~30 minutes of a 2-core CPU: the MaxFL `cnn` on
CIFAR-10 (`cnn_bn` for FedBN), small pools and few rounds (see `SCHEDULES`, and every
table's header). Its accuracies are far below the paper's, and 40% is rarely reached, so
the tables add accX at a threshold X the short schedule reaches (`X_OURS`). Set
`FEDJAX_APPEAL_EXPALPHA_PROFILE=gpu` for the `gpu` profile (ResNet20 for every CIFAR-10
backbone, `--model resnet20`; longer schedule; not timed here), and
`FEDJAX_APPEAL_EXPALPHA_MODEL=NAME` to override the CIFAR-10 model of either profile.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..config import HParams, RunConfig
from ..expalpha_metrics import acc_at, acc_x, group_weights, plot_group_weights
from . import Context, experiment, markdown_table, mean_std


@dataclasses.dataclass(frozen=True)
class Backbone:
    """A federated optimiser under which proportional and Exp-alpha weights are compared."""

    label: str
    algorithm: str
    server_opt: str = "sgd"
    hp: dict = dataclasses.field(default_factory=dict)
    bn: bool = False  # needs a BatchNorm model (FedBN keeps BN layers per client)


# Fixed hyperparameters of every table (client lr 0.05 for all; see the module doc).
CLIENT_LR = 0.05
ALPHA = 0.2  # Exp-alpha temperature of Tables 1-3 and Fig. 2
BACKBONES = (
    Backbone("FedAvg", "fedavg"),
    Backbone("FedProx", "fedprox", hp={"prox_mu": 0.01}),
    Backbone("FedAvgM", "fedavg", "momentum", {"server_lr": 1.0, "server_momentum": 0.9}),
    Backbone("FedAdam", "fedavg", "adam", {"server_lr": 0.01, "server_momentum": 0.9,
                                           "server_beta2": 0.99, "server_eps": 1e-3}),
    Backbone("FedBN", "fedbn", bn=True),
)
BY_LABEL = {b.label: b for b in BACKBONES}
AGGREGATIONS = ("proportional", "exp-alpha")
AGG_LABEL = {"proportional": "proportional", "exp-alpha": f"Exp-α (α={ALPHA:g})"}
ALPHAS = (0.2, 1.0, 5.0, 25.0, 125.0)

# --quick: a pipeline check with one seed; each table runs a subset of the backbones so
# that the quick runs together exercise all five.
QUICK_BACKBONES = {"imbalance": ("FedAvg", "FedBN"), "flip": ("FedProx", "FedAdam"),
                   "domain": ("FedAvgM", "FedBN")}

# The paper's numbers (FedAvg, E = 20): acc40 (rounds) and final test accuracy (%).
PAPER = {
    "imbalance": {("FedAvg", "proportional"): {"acc40": 43.33, "acc_final": 64.60},
                  ("FedAvg", "exp-alpha"): {"acc40": 38.00, "acc_final": 66.86}},
    "flip": {("FedAvg", "proportional"): {"acc40": 69.33, "acc_final": 59.47},
             ("FedAvg", "exp-alpha"): {"acc40": 36.33, "acc_final": 67.01}},
}
# Our accX threshold per setting: one that the short CPU schedule reaches (the paper's 40%
# is reported too).
X_OURS = {"imbalance": 0.20, "flip": 0.20, "domain": 0.60}

# Settings (RunConfig keys) per profile; "quick" overrides the cpu profile for --quick.
# cpu: chosen from timed single runs on a shared 2-core CPU (load average ~4.5; s/round
# 1.4 proportional, 2.7 Exp-alpha for the CIFAR-10 settings; FedBN's per-client-BN
# evaluation 3-6 s). Expected full runs (3 seeds): imbalance ~28, flip ~27, adapt ~26,
# domain ~25, alpha ~21 minutes. gpu: not timed (no accelerator was available).
_IMB = dict(dataset="cifar10", imbalance_ratios="random", imbalance_nmax=25,
            imbalance_test_per_class=5, clients=20, cohort=5, local_steps=10, batch_size=16,
            rounds=12, eval_every=2)
_FLIP = dict(dataset="cifar10", partition="dirichlet", alpha=100.0, max_samples=3600,
             clients=18, cohort=6, label_flip_fraction=1 / 3, flip_ratio=1.0,
             selector="stratified", local_steps=10, batch_size=16, rounds=12, eval_every=2)
_ADAPT_IMB = dict(_IMB, imbalance_ratios="1.0x4,0.01x3,0.1x3", clients=30, cohort=10,
                  selector="stratified", rounds=40, eval_every=5)
_DOM = dict(dataset="digits", domains="mnist,usps,mnistm", domain_samples=400, clients=6,
            cohort=6, local_steps=10, batch_size=16, rounds=16, eval_every=2)
SCHEDULES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"imbalance": _IMB, "flip": _FLIP, "adapt-imbalance": _ADAPT_IMB,
            "adapt-flip": dict(_FLIP, rounds=40, eval_every=5), "domain": _DOM,
            "alpha": _IMB},
    "quick": {"imbalance": dict(rounds=3, eval_every=1),
              "flip": dict(rounds=3, eval_every=1),
              "adapt-imbalance": dict(rounds=4, eval_every=2),
              "adapt-flip": dict(rounds=4, eval_every=2),
              "domain": dict(rounds=3, eval_every=1),
              "alpha": dict(rounds=3, eval_every=1)},
    "gpu": {"imbalance": dict(_IMB, imbalance_nmax=100, imbalance_test_per_class=20,
                              clients=100, cohort=10, local_steps=50, batch_size=32,
                              rounds=200, eval_every=1),
            "flip": dict(_FLIP, max_samples=0, clients=30, local_steps=50, batch_size=32,
                         rounds=200, eval_every=1),
            "adapt-imbalance": dict(_ADAPT_IMB, imbalance_nmax=100,
                                    imbalance_test_per_class=20, clients=100,
                                    local_steps=50, batch_size=32, rounds=200, eval_every=5),
            "adapt-flip": dict(_FLIP, max_samples=0, clients=30, local_steps=50,
                               batch_size=32, rounds=200, eval_every=5),
            "domain": dict(_DOM, domain_samples=2000, clients=12, local_steps=50,
                           batch_size=32, rounds=100, eval_every=1),
            "alpha": dict(_IMB, imbalance_nmax=100, imbalance_test_per_class=20, clients=100,
                          cohort=10, local_steps=50, batch_size=32, rounds=200, eval_every=1)},
}
MODELS = {"cpu": ("cnn", "cnn_bn"), "gpu": ("resnet20", "resnet20")}
HISTORY_KEYS = ("round", "train_loss", "test_acc_seen", "test_acc_clean", "test_acc_flipped",
                "test_acc_balanced", "test_acc_imbalanced")
DOMAIN_NAMES = {"mnist": "MNIST", "usps": "USPS", "mnistm": "MNIST-M"}


def profile() -> str:
    """The compute profile: $FEDJAX_APPEAL_EXPALPHA_PROFILE (cpu, the default, or gpu)."""
    p = os.environ.get("FEDJAX_APPEAL_EXPALPHA_PROFILE", "cpu").strip() or "cpu"
    if p not in MODELS:
        raise ValueError(f"FEDJAX_APPEAL_EXPALPHA_PROFILE must be cpu or gpu (got {p!r})")
    return p


def schedule(setting: str, quick: bool) -> dict[str, Any]:
    """RunConfig keys of a setting in the current profile (with the --quick overrides)."""
    s = dict(SCHEDULES[profile()][setting])
    if quick:
        s.update(SCHEDULES["quick"][setting])
    return s


def model_for_backbone(b: Backbone, setting: str) -> str:
    """`cnn`/`cnn_bn` (cpu) or `resnet20` (gpu) on CIFAR-10; `cnn_bn` for every Digits run."""
    if setting == "domain":
        return "cnn_bn"
    plain, bn = MODELS[profile()]
    override = os.environ.get("FEDJAX_APPEAL_EXPALPHA_MODEL", "").strip()
    if override:
        return override
    return bn if b.bn else plain


def backbones(ctx: Context, setting: str) -> list[Backbone]:
    if ctx.quick and setting in QUICK_BACKBONES:
        return [BY_LABEL[n] for n in QUICK_BACKBONES[setting]]
    return list(BACKBONES)


def seeds_of(ctx: Context) -> list[int]:
    return ctx.seeds[:1] if ctx.quick else list(ctx.seeds)


def make_cfg(ctx: Context, setting: str, seed: int, b: Backbone, aggregation: str
             ) -> RunConfig:
    return ctx.base(**schedule(setting, ctx.quick), algorithm=b.algorithm,
                    server_opt=b.server_opt, aggregation=aggregation,
                    model=model_for_backbone(b, setting), unseen_clients=0, appeal=False,
                    seed=seed)


def make_hp(b: Backbone | None = None, **kw) -> HParams:
    return HParams(**{"client_lr": CLIENT_LR, "exp_alpha": ALPHA,
                      **(b.hp if b is not None else {}), **kw})


# ----------------------------------------------------------------------------- summaries


def run_summary(history: Sequence[dict], rounds: int, key: str, x_ours: float,
                extra: dict | None = None) -> dict[str, Any]:
    """acc40, acc{X_ours}, accuracy at R/2 and R (fractions) of one run's history."""
    return {"acc40": acc_x(history, 0.40, key),
            "acc_ours": acc_x(history, x_ours, key),
            "acc_half": acc_at(history, rounds / 2, key),
            "acc_final": acc_at(history, rounds, key),
            "history": [{k: h[k] for k in HISTORY_KEYS if k in h} for h in history],
            **(extra or {})}


def fmt_rounds(values: Sequence[int | None], rounds: int) -> str:
    """accX cell: 'mean ± std' of the seeds that reached X, with how many did."""
    hit = [v for v in values if v is not None]
    if not values:
        return "n/a"
    if not hit:
        return f"never (> {rounds})"
    cell = mean_std(hit)
    return cell if len(hit) == len(values) else f"{cell} ({len(hit)}/{len(values)} reached)"


def fmt_paper(setting: str, backbone: str, agg: str, key: str) -> str:
    v = PAPER.get(setting, {}).get((backbone, agg), {}).get(key)
    return f"{v:.2f}" if v is not None else "—"


def table_rows(setting: str, runs: dict[tuple[str, str], list[dict]], rounds: int,
               x_ours: float, extra_cols: Sequence[tuple[str, int]] = ()) -> list[list[str]]:
    """One row per (backbone, aggregation): ours beside the paper's numbers.

    `runs[(backbone label, aggregation)]` holds the seeds' `run_summary` dicts (a dict with
    `diverged` instead marks a run that stopped on NaN). `extra_cols` are (key, digits)
    of additional per-run scalars, shown as mean ± std.
    """
    rows = []
    for (bl, agg), rs in runs.items():
        ok = [r for r in rs if not r.get("diverged")]
        note = f" ({len(rs) - len(ok)} diverged)" if len(ok) < len(rs) else ""
        row = [bl, AGG_LABEL[agg] + note,
               fmt_rounds([r["acc40"] for r in ok], rounds),
               fmt_paper(setting, bl, agg, "acc40"),
               fmt_rounds([r["acc_ours"] for r in ok], rounds),
               mean_std([r["acc_half"] for r in ok], 100),
               mean_std([r["acc_final"] for r in ok], 100),
               fmt_paper(setting, bl, agg, "acc_final")]
        for key, digits in extra_cols:
            row.append(mean_std([r.get(key) for r in ok], digits=digits))
        rows.append(row)
    return rows


def table_header(x_ours: float, rounds: int, extra: Sequence[str] = ()) -> list[str]:
    x = round(100 * x_ours)
    return ["backbone", "aggregation", "acc40 (ours, round)", "acc40 (paper)",
            f"acc{x} (ours, round)", f"acc @ R/2={rounds // 2} (%)",
            f"acc @ R={rounds} (%, ours)", "final acc (paper, %)", *extra]


def mean_traces(traces: Sequence[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Per group, the nan-mean over seeds of per-round weight traces (equal lengths)."""
    out: dict[str, list[float]] = {}
    for g in sorted({g for t in traces for g in t}):
        arr = np.asarray([t[g] for t in traces if g in t], np.float64)
        with warnings.catch_warnings():  # rounds in which no seed had a member: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            out[g] = np.nanmean(arr, axis=0).tolist()
    return out


# ----------------------------------------------------------------------------- running


def _load(cfg: RunConfig):
    from ..data import load_federated

    return load_federated(cfg)


def _run(ctx: Context, cfg: RunConfig, hp: HParams, label: str, data, ds):
    """(results, None) or (None, message) when the run stopped on NaN/Inf parameters."""
    from ..checkpoint import NonFiniteError

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


def _grid(ctx: Context, setting: str, key: str, tag: str | None
          ) -> tuple[dict[tuple[str, str], list[dict]], int]:
    """Every backbone x aggregation x seed of a table setting; data loaded once per seed.

    Returns ({(backbone, aggregation): [run_summary per seed]}, rounds).
    """
    runs: dict[tuple[str, str], list[dict]] = {(b.label, a): [] for b in backbones(ctx, setting)
                                              for a in AGGREGATIONS}
    rounds = schedule(setting, ctx.quick)["rounds"]
    x = X_OURS[setting]
    for seed in seeds_of(ctx):
        data = ds = None
        for b in backbones(ctx, setting):
            for agg in AGGREGATIONS:
                cfg = make_cfg(ctx, setting, seed, b, agg)
                if data is None:
                    data, ds = _load(cfg)
                res, err = _run(ctx, cfg, make_hp(b), f"{setting}/{b.label}/{agg}", data, ds)
                if res is None:
                    runs[(b.label, agg)].append({"seed": seed, "diverged": err})
                    continue
                extra: dict[str, Any] = {"seed": seed,
                                         "sec_per_round": res["timing"].get("sec_per_round")}
                gw = _weights(res, _groups(data, tag) if tag else None)
                if gw is not None:  # mean weight per group value ("True"/"False", domain)
                    extra["group_weight"] = gw["mean"]
                    extra["weight_tagged"] = gw["mean"].get("True")
                if setting == "domain":
                    extra.update(_domain_acc(res, data, cfg))
                runs[(b.label, agg)].append(run_summary(res["history"], rounds, key, x, extra))
    return runs, rounds


def _domain_acc(res: dict, data, cfg: RunConfig) -> dict[str, float]:
    """Final mean test accuracy of each domain's clients ('acc_MNIST', ...)."""
    acc = np.asarray(res["final_clients"]["test_acc"], np.float64)
    dom = np.asarray(data.info["domain"])
    names = [d.strip() for d in cfg.domains.split(",") if d.strip()]
    return {f"acc_{DOMAIN_NAMES[n]}": float(acc[dom == i].mean())
            for i, n in enumerate(names) if np.any(dom == i)}


# ----------------------------------------------------------------------------- reports


def _setting_text(ctx: Context, setting: str) -> str:
    s = schedule(setting, ctx.quick)
    parts = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()]
    return ", ".join(parts)


def _hp_text(bbs: Sequence[Backbone], setting: str) -> str:
    out = [f"client lr {CLIENT_LR} (local SGD), Exp-α α = {ALPHA} unless varied (plain form, "
           "`--aggregation exp-alpha`)"]
    for b in bbs:
        opts = {"server_opt": b.server_opt, **({"server_lr": 1.0} if not b.hp else b.hp)}
        out.append(f"{b.label} (`{b.algorithm}`, model `{model_for_backbone(b, setting)}`): "
                   + ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in opts.items()))
    return "; ".join(out)


def header(ctx: Context, setting: str, title: str, bbs: Sequence[Backbone],
           note: str = "") -> str:
    """The table's header: command, profile, models, schedule, hyperparameters, caveats."""
    seeds = seeds_of(ctx)
    if setting == "domain":
        models = "`cnn_bn` (BatchNorm CNN) for every backbone"
    else:
        models = ", ".join(dict.fromkeys(f"`{model_for_backbone(b, setting)}`" for b in bbs))
    text = (f"# {ctx.name} ({title})\n\nCommand: `{ctx.command}`\n\n"
            f"Profile `{profile()}`: model {models}; the seed used ResNet20 on CIFAR-10 and "
            "far more rounds (run with FEDJAX_APPEAL_EXPALPHA_PROFILE=gpu for ResNet20).\n\n"
            f"Schedule: {_setting_text(ctx, setting)}; no unseen clients.\n\n"
            f"Hyperparameters: {_hp_text(bbs, setting)}.\n\n"
            f"Seeds {seeds} (mean ± std; population std). accX = first evaluated round with "
            "accuracy >= X (resolution: eval_every); 'never (> R)' if no seed reached it.\n")
    if note:
        text += "\n" + note + "\n"
    if ctx.quick:
        text += ("\n**Quick variant** (a few rounds, one seed, a subset of the backbones): "
                 "checks the pipeline; the numbers are not comparable to the paper.\n")
    else:
        text += ("\nFar fewer rounds and a much smaller model budget than the paper (2-core "
                 "CPU, ~30 minutes per table): accuracies are much lower, compare the "
                 "orderings, not the values.\n")
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
            ax.plot(x, y, marker="o", ms=3, label=AGG_LABEL[agg])
        ax.set_title(bl, fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _json_runs(runs: dict[tuple[str, str], list[dict]]) -> dict[str, list[dict]]:
    return {f"{bl}/{agg}": rs for (bl, agg), rs in runs.items()}


def _meta(ctx: Context, setting: str, bbs: Sequence[Backbone]) -> dict[str, Any]:
    return {"paper": "EXP-alpha: Beyond Proportional Aggregation in Federated Learning",
            "command": ctx.command, "profile": profile(), "quick": ctx.quick,
            "seeds": seeds_of(ctx), "schedule": schedule(setting, ctx.quick),
            "client_lr": CLIENT_LR, "alpha": ALPHA,
            "backbones": [dataclasses.asdict(b) | {"model": model_for_backbone(b, setting)}
                          for b in bbs],
            "paper_numbers": {f"{b}/{a}": v for (b, a), v in PAPER.get(setting, {}).items()}}


# ----------------------------------------------------------------------------- experiments


@experiment("expalpha-imbalance", "Exp-alpha Table 1: 5 backbones x {prop, Exp-alpha}, "
                                  "CIFAR-10 class imbalance")
def expalpha_imbalance(ctx: Context) -> None:
    bbs = backbones(ctx, "imbalance")
    runs, rounds = _grid(ctx, "imbalance", "test_acc_seen", "imbalanced")
    x = X_OURS["imbalance"]
    note = ("Clients: a pool of generated class-imbalanced clients (LDAM counts n_c = n_max "
            "ratio^(c/9), ratio drawn per client from {1, .5, .1, .05, .01, .005, .001}), "
            "a uniform cohort from the pool every round. Test accuracy = mean over the pool "
            "of each client's balanced test split (a proxy for the balanced CIFAR-10 test "
            "set). 'weight imbalanced' = mean aggregation weight of the imbalanced clients' "
            "cohort slots (uniform = 1/cohort).")
    table = (header(ctx, "imbalance", "Table 1, class imbalance", bbs, note) + "\n"
             + markdown_table(table_header(x, rounds, ["weight imbalanced"]),
                              table_rows("imbalance", runs, rounds, x,
                                         [("weight_tagged", 3)])))
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "imbalance", bbs), "runs": _json_runs(runs)},
               "curves.png": lambda p: _plot_curves(p, runs, "test_acc_seen",
                                                    "test accuracy (%)")})


@experiment("expalpha-flip", "Exp-alpha Table 2: 5 backbones x {prop, Exp-alpha}, CIFAR-10, "
                             "1/3 of clients label-flipped")
def expalpha_flip(ctx: Context) -> None:
    bbs = backbones(ctx, "flip")
    runs, rounds = _grid(ctx, "flip", "test_acc_clean", "flipped")
    x = X_OURS["flip"]
    note = ("Clients: CIFAR-10 split Dirichlet(100) (near IID) over the pool; 1/3 of them "
            "have every label remapped by a fixed derangement (flip ratio 1.0); every cohort "
            "of 6 holds 4 clean and 2 flipped clients (`--selector stratified`). Accuracy = "
            "mean test accuracy of the clean clients on their correctly labelled test rows. "
            "'weight flipped' = mean aggregation weight of the flipped clients' cohort "
            "slots (proportional ≈ 1/6).")
    table = (header(ctx, "flip", "Table 2, label flipping", bbs, note) + "\n"
             + markdown_table(table_header(x, rounds, ["weight flipped"]),
                              table_rows("flip", runs, rounds, x, [("weight_tagged", 3)])))
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "flip", bbs), "runs": _json_runs(runs)},
               "curves.png": lambda p: _plot_curves(p, runs, "test_acc_clean",
                                                    "clean clients' test accuracy (%)")})


ADAPT_GROUPS = {"adapt-imbalance": ("group", {"0": "balanced (ratio 1)",
                                              "1": "imbalanced (ratio 0.01)",
                                              "2": "imbalanced (ratio 0.1)"}),
                "adapt-flip": ("flipped", {"False": "clean", "True": "flipped"})}


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
                              "(imbalanced / flipped clients)")
def expalpha_adapt(ctx: Context) -> None:
    fedavg = BY_LABEL["FedAvg"]
    results: dict[str, dict[str, list[dict]]] = {}
    traces: dict[str, dict[str, list[float]]] = {}
    cohorts = {}
    for setting, (tag, names) in ADAPT_GROUPS.items():
        s = schedule(setting, ctx.quick)
        cohorts[setting] = s["cohort"]
        key = "test_acc_clean" if setting == "adapt-flip" else "test_acc_seen"
        results[setting] = {a: [] for a in AGGREGATIONS}
        per_seed: dict[str, list[dict]] = {a: [] for a in AGGREGATIONS}
        for seed in seeds_of(ctx):
            data = ds = None
            for agg in AGGREGATIONS:
                cfg = make_cfg(ctx, setting, seed, fedavg, agg)
                if data is None:
                    data, ds = _load(cfg)
                res, _ = ctx.run(cfg, make_hp(fedavg), label=f"{setting}/{agg}", data=data,
                                 dataset=ds)
                gw = _weights(res, _groups(data, tag))
                per_seed[agg].append(gw["trace"])
                results[setting][agg].append(run_summary(
                    res["history"], s["rounds"], key, 0.4,
                    {"seed": seed, "group_weight": gw["mean"], "group_slots": gw["count"],
                     "weight_trace": gw["trace"]}))
        for agg in AGGREGATIONS:
            tr = mean_traces(per_seed[agg])
            traces[f"{setting.removeprefix('adapt-')}: {AGG_LABEL[agg]}"] = {
                names.get(g, g): v for g, v in tr.items()}
    note = ("FedAvg, proportional vs Exp-α. imbalance: a pool of 40% balanced clients, 30% "
            "with ratio 0.01 and 30% with ratio 0.1 ('1.0x4,0.01x3,0.1x3'), every cohort of "
            "10 holds 4 + 3 + 3 of them (stratified). flip: the setting of `expalpha-flip` "
            "(cohorts of 4 clean + 2 flipped). Mean weight = mean aggregation weight over "
            "every (round, cohort slot) of the group's clients; `weights.png` shows its "
            "per-round mean (5-round moving average, mean over seeds).")
    hdr = header(ctx, "adapt-imbalance", "Fig. 2, weights adapt to the client groups",
                 [fedavg], note)
    hdr += f"\nflip setting schedule: {_setting_text(ctx, 'adapt-flip')}.\n"
    table = hdr + "\n" + markdown_table(
        ["setting", "aggregation", "client group", "mean weight", "uniform 1/m",
         "final acc (%)"], adapt_rows(results, cohorts))
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "adapt-imbalance", [fedavg]),
                                "schedule_flip": schedule("adapt-flip", ctx.quick),
                                "runs": results},
               "weights.png": lambda p: plot_group_weights(
                   p, traces, title="FedAvg: mean aggregation weight per client group")})


@experiment("expalpha-domain", "Exp-alpha Table 3: Digits domain shift (MNIST, USPS, MNIST-M)")
def expalpha_domain(ctx: Context) -> None:
    bbs = backbones(ctx, "domain")
    runs, rounds = _grid(ctx, "domain", "test_acc_seen", "domain")
    x = X_OURS["domain"]
    s = schedule("domain", ctx.quick)
    names = [DOMAIN_NAMES[d.strip()] for d in s["domains"].split(",") if d.strip()]
    note = ("Digits domain shift (FedBN's benchmark): one domain per client, round-robin, "
            f"{s['domain_samples']} rows per client (60% train), every client in every round. "
            "Domains here: " + ", ".join(names) + ". **Missing**: SVHN and SynthDigits of the "
            "paper's (FedBN's) five-domain Digits benchmark are not in the data directory. "
            "Accuracy = mean over clients of their own test split (FedBN: each client with "
            "its own BN layers). 'mean weight' = mean aggregation weight of each domain's "
            "clients (mean over seeds; uniform = 1/cohort). The paper's Table 3 numbers are "
            "not quoted here.")
    rows = table_rows("domain", runs, rounds, x)
    for row, rs in zip(rows, runs.values(), strict=True):
        ok = [r for r in rs if not r.get("diverged")]
        row += [mean_std([r.get(f"acc_{n}") for r in ok], 100) for n in names]
        row.append(" / ".join(
            f"{np.mean([r['group_weight'][str(i)] for r in ok]):.3f}" if ok else "n/a"
            for i in range(len(names))))
    table = (header(ctx, "domain", "Table 3, Digits domain shift", bbs, note) + "\n"
             + markdown_table(table_header(x, rounds, [f"{n} (%)" for n in names]
                                           + ["mean weight " + " / ".join(names)]), rows))
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "domain", bbs), "runs": _json_runs(runs)},
               "curves.png": lambda p: _plot_curves(p, runs, "test_acc_seen",
                                                    "test accuracy (%)")})


def alpha_rows(by_alpha: dict[str, list[dict]], rounds: int, x: float) -> list[list[str]]:
    rows = []
    for lab, rs in by_alpha.items():
        rows.append([lab, fmt_rounds([r["acc40"] for r in rs], rounds),
                     fmt_rounds([r["acc_ours"] for r in rs], rounds),
                     mean_std([r["acc_half"] for r in rs], 100),
                     mean_std([r["acc_final"] for r in rs], 100), "—"])
    return rows


@experiment("expalpha-alpha", "Exp-alpha: alpha sweep {0.2, 1, 5, 25, 125} (FedAvg, Table 1 "
                              "setting; one vmapped program per seed)")
def expalpha_alpha(ctx: Context) -> None:
    from ..sweep import sweep

    fedavg = BY_LABEL["FedAvg"]
    s = schedule("alpha", ctx.quick)
    rounds, x = s["rounds"], X_OURS["imbalance"]
    alphas = ALPHAS[::2] if ctx.quick else ALPHAS
    by_alpha: dict[str, list[dict]] = {f"α = {a:g}": [] for a in alphas}
    by_alpha["proportional (reference)"] = []
    timing = []
    for seed in seeds_of(ctx):
        cfg = make_cfg(ctx, "alpha", seed, fedavg, "exp-alpha")
        data, ds = _load(cfg)
        ctx.log(f"alpha sweep seed {seed}: {len(alphas)} values of alpha as one program")
        sw = sweep(cfg, {"exp_alpha": list(alphas)}, [seed], hp=make_hp(fedavg),
                   max_parallel=len(alphas), data=data, dataset=ds, progress=ctx.log)
        timing.append(sw.timing)
        for row in sw.rows:
            a = row["hparams"]["exp_alpha"]
            by_alpha[f"α = {a:g}"].append(run_summary(row["history"], rounds,
                                                      "test_acc_seen", x, {"seed": seed}))
        cfg_p = make_cfg(ctx, "alpha", seed, fedavg, "proportional")
        res, _ = ctx.run(cfg_p, make_hp(fedavg), label="alpha/proportional", data=data,
                         dataset=ds)
        by_alpha["proportional (reference)"].append(
            run_summary(res["history"], rounds, "test_acc_seen", x, {"seed": seed}))
    note = ("FedAvg under the class imbalance of `expalpha-imbalance` (same schedule), "
            "Exp-α with each α (large α tends to uniform weights, not proportional ones), "
            "and proportional weights as reference. The α values of a seed run as one "
            "vmapped program (`fedjax_appeal.sweep`, α is an HParams field) on that seed's "
            "pool (it matches the separate run of its α up to float reassociation). On a "
            "CPU the vmapped program is slower per run than separate runs (per-run "
            "parameters make every convolution a grouped one), but compiles once.")
    xs = round(100 * x)
    table = (header(ctx, "alpha", "α sweep", [fedavg], note) + "\n" + markdown_table(
        ["aggregation", "acc40 (round)", f"acc{xs} (round)", f"acc @ R/2={rounds // 2} (%)",
         f"acc @ R={rounds} (%)", "paper"], alpha_rows(by_alpha, rounds, x)))
    ctx.write({"table.md": table,
               "results.json": {**_meta(ctx, "alpha", [fedavg]), "alphas": list(alphas),
                                "runs": by_alpha, "sweep_timing": timing},
               "alpha.png": lambda p: _plot_alpha(p, by_alpha, alphas)})


def _plot_alpha(path: Path, by_alpha: dict[str, list[dict]], alphas: Sequence[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    fin = [np.mean([100 * r["acc_final"] for r in by_alpha[f"α = {a:g}"]]) for a in alphas]
    sd = [np.std([100 * r["acc_final"] for r in by_alpha[f"α = {a:g}"]]) for a in alphas]
    axes[0].errorbar(alphas, fin, yerr=sd, marker="o", capsize=3, label="Exp-α")
    ref = [100 * r["acc_final"] for r in by_alpha["proportional (reference)"]]
    axes[0].axhline(np.mean(ref), color="gray", ls="--", label="proportional")
    axes[0].set(xscale="log", xlabel="α", ylabel="final test accuracy (%)")
    axes[0].legend(fontsize=8)
    for lab, rs in by_alpha.items():
        hs = [r["history"] for r in rs]
        n = min(len(h) for h in hs)
        axes[1].plot([h["round"] for h in hs[0][:n]],
                     np.mean([[100 * h["test_acc_seen"] for h in hh[:n]] for hh in hs], 0),
                     label=lab)
    axes[1].set(xlabel="round", ylabel="test accuracy (%)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
