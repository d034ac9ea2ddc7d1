"""What `fedjax-appeal sweep` writes beside `sweep.json`: `sweep.csv` (one row per run,
final metrics), `summary.md` (configurations ranked by the metric, mean ± sample std over
seeds), `sweep.png` (the metric over rounds of the best configurations), and the sweep's
title and recorded hyperparameters."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np

from ..run.records import mean_std_text
from ..run.sweep import groups_of
from ..run.validate import used_hparams


def sweep_csv(rows: list[dict[str, Any]]) -> str:
    """sweep.csv: one row per run (its grid values, seed, rounds and final metrics)."""
    keys_g: list[str] = []
    keys_m: list[str] = []
    for r in rows:
        keys_g += [k for k in [*r["static"], *r["hparams"]] if k not in keys_g]
        keys_m += [k for k in r["final"] if k not in keys_m and k != "round"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", *keys_g, "seed", "rounds", *keys_m, "diverged_round"])
    for r in rows:
        g = {**r["static"], **r["hparams"]}
        w.writerow([r["id"], *[g.get(k, "") for k in keys_g], r["seed"], r["final"]["round"],
                    *[r["final"].get(k, "") for k in keys_m],
                    "" if r["diverged_round"] is None else r["diverged_round"]])
    return buf.getvalue()


def summary_md(summary: list[dict[str, Any]], metric: str, title: str) -> str:
    """summary.md: configurations ranked by the final metric, mean ± sample std over seeds
    (`records.sample_std`, ddof = 1, the std `compare` reports; n/a for one seed)."""
    lines = [f"# {title}", "", f"Ranked by final `{metric}` (mean ± sample std over seeds, "
             "n/a for a single seed).", "",
             f"| rank | configuration | {metric} | per seed |", "|---|---|---|---|"]
    for i, e in enumerate(summary):
        vals = ", ".join("nan" if v != v else f"{v:.4f}" for v in e["values"])
        lines.append(f"| {i + 1} | {e['label']} | "
                     f"{mean_std_text(e[f'{metric}_mean'], e[f'{metric}_std'])} | {vals} |")
    return "\n".join(lines) + "\n"


def plot_sweep(path: Path, rows, summary, metric: str, title: str, top: int = 8) -> None:
    """sweep.png: the metric over rounds of the `top` best configurations (mean over seeds,
    band min-max)."""
    # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for e in summary[:top]:
        rs = [r for r in rows if r["label"] == e["label"]]
        xs = [h["round"] for h in rs[0]["history"]]
        ys = np.array([[h.get(metric, np.nan) for h in r["history"]] for r in rs], float)
        ax.plot(xs, ys.mean(0), marker="o", ms=3, label=e["label"])
        if len(rs) > 1:
            ax.fill_between(xs, ys.min(0), ys.max(0), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(f"{metric} (mean over seeds; band: min-max)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sweep_hparams(cfg, hp, grid: dict[str, list]) -> dict[str, float]:
    """sweep.json's `hparams`: the base values of the hyperparameters that some static
    group of the sweep uses (`validate.used_hparams`), in `HParams` order."""
    used = {k for cfg_g in groups_of(cfg, grid) for k in used_hparams(cfg_g)}
    return {k: v for k, v in hp.to_dict().items() if k in used}


def sweep_title(cfg, grid: dict[str, list]) -> str:
    """'sweep: ALGORITHM(S) on DATASET(S) (PARTITION(S))', naming every gridded value."""
    def name(key: str) -> str:
        vals = grid.get(key)
        return "/".join(str(v) for v in vals) if vals else str(getattr(cfg, key))

    return f"sweep: {name('algorithm')} on {name('dataset')} ({name('partition')})"

