"""The parts of an Exp-alpha report: the header (setting, schedule, hyperparameters), the
accuracy curves, and the JSON of the runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from papers import pairs
from papers.expalpha.settings import (
    model_for_backbone,
    profile,
    schedule,
    seeds_of,
    targets,
)
from papers.expalpha.specs import (
    AGG_LABEL,
    ALPHA,
    CLIENT_LR,
    METRIC,
    PAPER,
    Backbone,
)
from papers.expalpha.summary import PAIRED_HEADER
from papers.reproduce import Context


def setting_text(ctx: Context, setting: str, grid: tuple[int, int] | None = None) -> str:
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
            f"Profile `{profile(ctx)}`. Schedule: {setting_text(ctx, setting)}; no unseen "
            "clients.\n\n"
            f"Hyperparameters: {_hp_text(ctx, bbs, setting)}.\n\n"
            f"Seeds {seeds}; mean ± std (population std) with the per-seed values in "
            f"brackets. Metric: `{METRIC[setting]}`. Targets {xs}: first evaluated round at "
            "or above the target (resolution eval_every; '>R' = not reached, counted as "
            "R + 1 in the paired difference). Δ = Exp-α − proportional per seed (same seed: "
            "same pool, init and cohorts); the paper's direction is fewer rounds and higher "
            f"accuracy; {pairs.RULE}.\n")
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


def plot_curves(path: Path, runs: dict[tuple[str, str], list[dict]], key: str,
                 ylabel: str) -> None:
    """Accuracy vs round (mean over seeds), one panel per backbone."""
    # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
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


def json_runs(runs: dict[tuple[str, str], list[dict]]) -> dict[str, list[dict]]:
    return {f"{bl}/{agg}": rs for (bl, agg), rs in runs.items()}


def meta(ctx: Context, setting: str, bbs: Sequence[Backbone]) -> dict[str, Any]:
    return {"paper": "EXP-alpha: Beyond Proportional Aggregation in Federated Learning",
            "command": ctx.command, "profile": profile(ctx), "quick": ctx.quick,
            "seeds": seeds_of(ctx), "schedule": schedule(ctx, setting),
            "metric": METRIC[setting], "targets": list(targets(ctx, setting)),
            "client_lr": CLIENT_LR[profile(ctx)], "alpha": ALPHA,
            "backbones": [dataclasses.asdict(b) | {"model": model_for_backbone(ctx, b, setting)}
                          for b in bbs],
            "paper_numbers": {f"{b}/{a}": v for (b, a), v in PAPER.get(setting, {}).items()}}


def summary_json(rows: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(PAIRED_HEADER, r, strict=True)) for r in rows]
