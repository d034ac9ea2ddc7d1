"""Exp-alpha metrics: accX, half/final accuracy, per-group aggregation weights, plots.

Definitions (the seed's tables):
  * accX: the first round whose test accuracy reaches X (a fraction, e.g. 0.40 for acc40);
    None if it never does. Resolution is the evaluation schedule (`--eval-every`): the
    reproduce experiments evaluate every round or every few rounds and say so.
  * acc_half / acc_final: test accuracy at the last evaluation at or before round R/2 / R.
  * group weight: mean aggregation weight a group's clients received over training,
    over every (round, cohort slot) in which a member sat, from the round metrics
    `cohort_idx` / `cohort_weights` ([rounds, m]) and a per-client group tag of
    `data.info` (e.g. `imbalanced`, `flipped`, `domain`). Uniform weights give 1/m.
  * test_acc_clean / test_acc_flipped / test_acc_balanced / test_acc_imbalanced: the
    library adds them to every evaluation (`fedjax_appeal/evaluate/expalpha_metrics.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def acc_x(history: Sequence[dict], x: float, key: str = "test_acc_seen") -> int | None:
    """First evaluated round whose `key` is >= x (None if never)."""
    for h in history:
        v = h.get(key)
        if v is not None and v >= x:
            return int(h["round"])
    return None


def acc_at(history: Sequence[dict], r: float, key: str = "test_acc_seen") -> float | None:
    """`key` at the last evaluation at or before round r."""
    pts = [h for h in history if h["round"] <= r and h.get(key) is not None]
    return float(pts[-1][key]) if pts else None


def summary(history: Sequence[dict], rounds: int, x: float = 0.4,
            key: str = "test_acc_seen") -> dict[str, Any]:
    """{'accX': round or None, 'acc_half', 'acc_final'} of one run."""
    return {f"acc{round(100 * x)}": acc_x(history, x, key),
            "acc_half": acc_at(history, rounds / 2, key),
            "acc_final": acc_at(history, rounds, key)}


def group_weights(cohort_idx: np.ndarray, cohort_weights: np.ndarray, groups: np.ndarray
                  ) -> dict[str, Any]:
    """Mean aggregation weight per group value over training, and its per-round trace.

    Args:
      cohort_idx: [R, m] client index of every cohort slot of every round.
      cohort_weights: [R, m] its aggregation weight.
      groups: [M] group tag of every client (bool or int).
    Returns:
      {'mean': {g: mean weight}, 'count': {g: slots}, 'trace': {g: [R] per-round mean
      (NaN in rounds without a member)}} with g = str(group value).
    """
    idx = np.asarray(cohort_idx)
    w = np.asarray(cohort_weights, np.float64)
    tag = np.asarray(groups)[idx]  # [R, m]
    out: dict[str, Any] = {"mean": {}, "count": {}, "trace": {}}
    for g in np.unique(np.asarray(groups)):
        sel = tag == g
        key = str(g.item() if hasattr(g, "item") else g)
        n = int(sel.sum())
        out["count"][key] = n
        out["mean"][key] = float(w[sel].mean()) if n else None
        cnt = sel.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["trace"][key] = np.where(cnt > 0, (w * sel).sum(1) / np.maximum(cnt, 1),
                                         np.nan).tolist()
    return out


def plot_group_weights(path: Path, traces: dict[str, dict[str, Sequence[float]]],
                       names: dict[str, str] | None = None, title: str = "",
                       smooth: int = 5) -> None:
    """Per-round mean aggregation weight of each group, one panel per configuration.

    `traces`: {configuration label: {group key: [R] trace}}; `names` renames group keys.
    A trailing moving average over `smooth` rounds (ignoring NaN) reduces noise.
    """
    # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(traces), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False, sharey=True)
    for ax, (label, tr) in zip(axes[0], traces.items(), strict=False):
        for g, ys in tr.items():
            y = np.asarray(ys, np.float64)
            if y.size == 0:
                continue
            ok = np.isfinite(y)
            cs = np.cumsum(np.where(ok, y, 0.0))
            cn = np.cumsum(ok)
            k = max(1, min(smooth, y.size))  # window no longer than the trace
            s = (cs - np.concatenate([np.zeros(k), cs[:-k]])) / np.maximum(
                cn - np.concatenate([np.zeros(k), cn[:-k]]), 1)
            s = np.where(cn > 0, s, np.nan)
            ax.plot(np.arange(1, len(y) + 1), s, label=(names or {}).get(g, g))
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("mean aggregation weight")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
