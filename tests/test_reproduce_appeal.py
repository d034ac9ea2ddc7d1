"""Tests of `papers/appeal/report.py` (and `appeal.per_cluster`): per-cluster
diagnostics, paired differences."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.arrays import FederatedData


def _six_class_partition(order):
    from fedjax_appeal.data import partition

    labels = np.repeat(np.arange(6), 30)
    parts = partition.clusters(labels, 9, 3, 2, np.random.default_rng(3), 4, order)
    return labels, parts, partition.client_clusters(labels, parts)


def test_pairs_cluster_labels():
    labels, parts, ids = _six_class_partition("pairs")
    for k, idx in enumerate(parts):
        held = sorted(set(labels[idx].tolist()))
        assert held in ([0, 1], [2, 3], [4, 5])
        assert ids[k] == held[0] // 2
    assert sorted(np.bincount(ids).tolist()) == [3, 3, 3]
    labels, parts, ids = _six_class_partition("random")
    sets = {tuple(sorted(set(labels[idx].tolist()))) for idx in parts}
    assert len(sets) == 3 and sorted(x for s in sets for x in s) == list(range(6))
    for k, idx in enumerate(parts):  # same id <=> same label pair
        for j, jdx in enumerate(parts):
            assert (ids[k] == ids[j]) == (set(labels[idx]) == set(labels[jdx]))


def test_per_cluster_equals_numpy():
    from fedjax_appeal.protocols.appeal.appeal import per_cluster
    from papers.appeal.report import cluster_diagnostics

    labels, parts, ids = _six_class_partition("pairs")
    rng = np.random.default_rng(0)
    v = {k: rng.random(9) for k in ("test_loss", "test_acc", "solo_test_loss_seen",
                                    "solo_test_acc_seen", "requirement_seen")}
    v["appeal_seen"] = (rng.random(9) < 0.5).astype(float)
    part = rng.integers(0, 20, 9)
    got = per_cluster(ids, {"acc": v["test_acc"], "appeal": v["appeal_seen"]})
    assert got["cluster"] == [0, 1, 2] and got["clients"] == [3, 3, 3]
    for c in range(3):
        members = [k for k, idx in enumerate(parts) if labels[idx].min() == 2 * c]
        assert got["acc"][c] == pytest.approx(sum(v["test_acc"][k] for k in members) / 3)
        assert got["appeal"][c] == pytest.approx(sum(v["appeal_seen"][k] for k in members) / 3)
    res = {"final_clients": {k: a.tolist() for k, a in v.items()}, "participation": part.tolist()}
    data = FederatedData(train=None, test=None, info={"cluster": jnp.asarray(ids)},
                         num_classes=6, name="toy")
    d = cluster_diagnostics(res, data)["seen"]
    for c in range(3):
        m = ids == c
        assert d["participation"][c] == pytest.approx(part[m].mean())
        assert d["solo_test_loss"][c] == pytest.approx(v["solo_test_loss_seen"][m].mean())
        assert d["global_test_acc"][c] == pytest.approx(v["test_acc"][m].mean())


def test_paired_differences_by_hand():
    from papers.appeal.report import paired
    from papers.spec import Setting

    def rec(vals):
        return {"status": "ok", "runs": [{"seed": s, "final": {"gm_appeal_unseen": v}}
                                         for s, v in zip((0, 1, 2), vals, strict=True)]}

    grid = {"c": {"FedAvg": rec([0.1, 0.2, 0.3]), "MW-Fed": rec([0.3, 0.0, 0.0]),
                  "MaxFL": rec([0.15, 0.1, 0.5])}}
    (row,) = paired(grid, [Setting("c", {})], ["gm_appeal_unseen"])
    assert row["best_baseline"] == "FedAvg"  # mean 0.2 > 0.1
    np.testing.assert_allclose(row["diff"], [0.05, -0.1, 0.2], atol=1e-12)
    assert row["signs"] == "+ − +" and not row["held"]


def test_paired_rows_carry_the_papers_effect_and_the_size_verdict():
    """The IncFL reading of MaxFL Table 2 by hand: MaxFL − MW-Fed per seed +0.01, +0.03,
    +0.02 (t interval [-0.0048, +0.0448]); the paper's MaxFL 0.55 against its best other
    arm run here, FedAvg 0.08 (MW-Fed 0.05): +0.47, far above the interval: smaller."""
    from papers.appeal.report import paired, paired_markdown, paper_effect
    from papers.spec import Setting

    def rec(vals):
        return {"status": "ok", "runs": [{"seed": s, "final": {"gm_appeal_unseen": v}}
                                         for s, v in zip((0, 1, 2), vals, strict=True)]}

    grid = {"c": {"FedAvg": rec([0.0, 0.0, 0.0]), "MW-Fed": rec([0.02, 0.01, 0.03]),
                  "MaxFL": rec([0.03, 0.04, 0.05])}}
    paper = {("c", "FedAvg"): {"gm_appeal_unseen": 0.08},
             ("c", "MW-Fed"): {"gm_appeal_unseen": "0.05 ± 0.01"},
             ("c", "SCAFFOLD"): {"gm_appeal_unseen": 0.30},  # not run here: not compared
             ("c", "MaxFL"): {"gm_appeal_unseen": 0.55}}
    assert paper_effect(paper, "c", "gm_appeal_unseen", "MaxFL",
                        ["FedAvg", "MW-Fed", "MaxFL"]) == (pytest.approx(0.47), "FedAvg")
    (row,) = paired(grid, [Setting("c", {})], ["gm_appeal_unseen"], paper=paper)
    assert row["best_baseline"] == "MW-Fed"
    np.testing.assert_allclose(row["diff"], [0.01, 0.03, 0.02], atol=1e-12)
    half = 4.302653 * 0.01 / np.sqrt(3)
    np.testing.assert_allclose(row["t_interval"], [0.02 - half, 0.02 + half], atol=1e-6)
    assert row["verdict"] == "inconclusive" and row["size"] == "smaller"
    assert row["paper_effect"] == pytest.approx(0.47) and row["paper_baseline"] == "FedAvg"
    md = paired_markdown([row])
    assert "smaller than the paper's +0.47, excluded at 95%" in md and "[-0.00, +0.04]" in md
    # no paper number for the metric: no size verdict, a dash in the table
    (row,) = paired(grid, [Setting("c", {})], ["gm_appeal_unseen"], paper={})
    assert row["paper_effect"] is None and row["size"] is None
    assert paired_markdown([row]).rstrip().endswith("| inconclusive | — |")
