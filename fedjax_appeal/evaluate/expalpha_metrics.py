"""Per-group test accuracy of tagged clients (the evaluation of every round adds it).

  * test_acc_clean / test_acc_flipped / test_acc_balanced / test_acc_imbalanced: mean test
    accuracy over the seen clients of that group, added to every evaluation when the data
    carry the tags (`data.info["flipped"]` / `data.info["imbalanced"]`); with flipped
    clients, accuracy on the clean clients' correctly labelled test rows is the analogue of
    a clean global test accuracy. The Exp-alpha paper's own metrics (accX, group weights,
    plots) are in `papers/expalpha/metrics.py`.
"""

from __future__ import annotations

import jax.numpy as jnp


def tag_metrics(evals: dict, info: dict) -> dict[str, jnp.ndarray]:
    """Mean test accuracy per tagged group of seen clients (traceable; see module doc)."""
    out = {}
    acc = evals["test"].acc
    for tag, (yes, no) in (("flipped", ("flipped", "clean")),
                           ("imbalanced", ("imbalanced", "balanced"))):
        if tag not in info:
            continue
        m = info[tag].astype(bool)
        for name, mask in ((yes, m), (no, ~m)):
            n = jnp.sum(mask)
            out[f"test_acc_{name}"] = jnp.where(
                n > 0, jnp.sum(jnp.where(mask, acc, 0.0)) / jnp.maximum(n, 1), jnp.nan)
    return out
