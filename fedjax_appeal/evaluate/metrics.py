"""Summaries of an all-client evaluation (host side, once per evaluation).

Definitions (all fractions in [0, 1]):
  * `train_loss` / `train_acc`: over all train rows of the seen clients, sample-weighted
    (the FedAvg objective f(w) = sum_k n_k F_k(w) / n).
  * `train_loss_clients`: mean over seen clients of their train loss F_k(w).
  * `test_loss_seen` / `test_acc_seen`: mean over seen clients of each client's loss /
    accuracy on its own test split (every client counts once, as in the MaxFL papers).
  * `test_acc_seen_pooled`: accuracy over all seen test rows, sample-weighted.
  * `test_*_unseen`: the same for the unseen clients (absent when there are none).
  * `client_dissimilarity*`: spread of the seen clients' test accuracy, in percent (see
    `dissimilarity`).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _pooled(values: np.ndarray, counts: np.ndarray) -> float:
    return float(np.sum(values * counts) / np.sum(counts))


def summarize(evals: dict[str, Any]) -> dict[str, float]:
    """Scalars for one history entry from `evaluate(...)`'s per-client arrays."""
    out: dict[str, float] = {}
    tr = evals["train"]
    out["train_loss"] = _pooled(np.asarray(tr.loss), np.asarray(tr.count))
    out["train_acc"] = _pooled(np.asarray(tr.acc), np.asarray(tr.count))
    out["train_loss_clients"] = float(np.mean(tr.loss))
    for split, tag in (("test", "seen"), ("unseen_test", "unseen")):
        if split not in evals:
            continue
        ev = evals[split]
        out[f"test_loss_{tag}"] = float(np.mean(ev.loss))
        out[f"test_acc_{tag}"] = float(np.mean(ev.acc))
        out[f"test_acc_{tag}_pooled"] = _pooled(np.asarray(ev.acc), np.asarray(ev.count))
    if "test" in evals:  # client dissimilarity, in percent
        out.update(dissimilarity(np.asarray(evals["test"].acc)))
    for k, v in evals.get("metrics", {}).items():
        a = np.asarray(v)
        if a.ndim == 0:
            out[k] = float(a)
    return out


def dissimilarity(acc: np.ndarray) -> dict[str, float]:
    """Spread of per-client test accuracy (fractions in, percentage points out).

    `client_dissimilarity`: population standard deviation across clients (the default);
    `client_dissimilarity_range`: max - min; `client_dissimilarity_mad`: mean absolute
    difference over the unordered pairs of distinct clients. The SubTrunc/UnionFL paper's
    wording does not pin down which spread it reports, hence all three.
    """
    a = np.sort(np.asarray(acc, np.float64)) * 100.0
    n = a.size
    mad = (float(np.sum(a * (2.0 * np.arange(n) - n + 1)) / (n * (n - 1) / 2)) if n > 1
           else 0.0)
    return {"client_dissimilarity": float(np.std(a)),
            "client_dissimilarity_range": float(a[-1] - a[0]) if n else 0.0,
            "client_dissimilarity_mad": mad}


def per_client(evals: dict[str, Any]) -> dict[str, list[float]]:
    """Per-client arrays of an evaluation, as lists (for the final results file)."""
    out = {}
    for split, ev in evals.items():
        if split == "metrics":
            for k, v in ev.items():
                a = np.asarray(v)
                if a.ndim == 1:
                    out[k] = a.tolist()
            continue
        out[f"{split}_loss"] = np.asarray(ev.loss).tolist()
        out[f"{split}_acc"] = np.asarray(ev.acc).tolist()
    return out
