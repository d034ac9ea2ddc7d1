"""What a DP run publishes: only what its privacy guarantee covers, unless asked.

User-level DP-FedAvg (`aggregate/privacy.py`) protects the clients' training rows: the
released quantities are the model sequence (each round's noisy aggregate) and, with
adaptive clipping, the noisy clip count. Everything computed from those alone, or from
them and data that training never reads (the clients' held-out test splits, a global test
set), is post-processing and may be published. Other statistics are not noised:

  * training-split evaluations (`train_loss`, `train_acc`, `train_loss_clients`),
  * per-client final losses and accuracies (`final_clients`), participation counts,
  * per-round cohort statistics: `cohort_idx` (removes the secrecy of the sample that
    amplification by sampling relies on), `cohort_size`, `cohort_loss`,
    `cohort_weights`, the exact clipped share `dp_clipped`, `bits_up`, availability and
    deadline counts.

`restrict(results)` keeps the covered part of a run's results and lists in
`privacy.withheld` what it left out; with `--dp-publish-client-stats` everything is
written and `privacy.outside_guarantee` names what the guarantee does not cover. The
checkpoint (`--checkpoint-every`) is the server's working state and is never covered.
"""

from __future__ import annotations

from typing import Any

# Round metrics that are functions of the released quantities (or of the overflow event,
# whose probability is already added to delta).
COVERED_ROUND_METRICS = frozenset({"dp_clip", "dp_unclipped_share", "dp_noise_std",
                                   "dp_overflow", "params_finite"})
# Top-level result blocks computed from the clients' private data.
UNCOVERED_BLOCKS = ("final_clients", "participation")
NOT_COVERED = ("checkpoint.npz (the server's working state, with --checkpoint-every): keep "
               "it private")


def covered_history_key(key: str) -> bool:
    """Whether a history column is computed from the model sequence and held-out data."""
    return (key == "round" or key.startswith("dp_epsilon") or key.startswith("test_")
            or key.startswith("client_dissimilarity"))


def covered_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """The covered columns of one history entry."""
    return {k: v for k, v in entry.items() if covered_history_key(k)}


def uncovered(results: dict[str, Any]) -> list[str]:
    """Names (`history.X`, `round_metrics.X`, blocks) of what the guarantee does not cover."""
    hist = sorted({k for e in results.get("history", []) for k in e
                   if not covered_history_key(k)})
    rm = sorted(k for k in results.get("round_metrics", {}) if k not in COVERED_ROUND_METRICS)
    blocks = [b for b in UNCOVERED_BLOCKS if b in results]
    return ([f"history.{k}" for k in hist] + [f"round_metrics.{k}" for k in rm] + blocks)


def restrict(results: dict[str, Any], publish_client_stats: bool) -> dict[str, Any]:
    """`results` of a DP run as it may be written (see the module docstring)."""
    out = uncovered(results)
    privacy = {**results.get("privacy", {}), "not_covered_files": NOT_COVERED,
               "guarantee_covers": "the model sequence and metrics computed from it on "
                                   "held-out data (test splits)"}
    if publish_client_stats:
        return {**results, "privacy": {**privacy, "outside_guarantee": out}}
    kept = {k: v for k, v in results.items() if k not in UNCOVERED_BLOCKS}
    kept["history"] = [covered_entry(e) for e in results.get("history", [])]
    kept["round_metrics"] = {k: v for k, v in results.get("round_metrics", {}).items()
                             if k in COVERED_ROUND_METRICS}
    kept["privacy"] = {**privacy, "withheld": out, "outside_guarantee": []}
    return kept
