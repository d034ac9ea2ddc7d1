"""The Exp-alpha reproduce module ("EXP-alpha: Beyond Proportional Aggregation in Federated
Learning"): registration, schedules, and the report builders on fabricated histories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedjax_appeal.reproduce import EXPERIMENTS, Context, _load_modules
from fedjax_appeal.reproduce import expalpha as E

NAMES = ("expalpha-imbalance", "expalpha-flip", "expalpha-adapt", "expalpha-domain",
         "expalpha-alpha")


def _hist(accs, every=2, key="test_acc_seen"):
    return [{"round": i * every, key: a, "train_loss": 1.0} for i, a in enumerate(accs)]


def test_all_five_registered_through_modules():
    _load_modules()
    for n in NAMES:
        assert n in EXPERIMENTS, n
    assert "fedjax_appeal.reproduce.expalpha" in __import__(
        "fedjax_appeal.reproduce", fromlist=["MODULES"]).MODULES


def test_table_rows_accx_half_final_and_paper_columns():
    # R = 10, evaluations every 2 rounds
    s0 = E.run_summary(_hist([0.1, 0.25, 0.41, 0.39, 0.5, 0.6]), 10, "test_acc_seen", 0.2)
    s1 = E.run_summary(_hist([0.1, 0.15, 0.3, 0.45, 0.44, 0.5]), 10, "test_acc_seen", 0.2)
    s2 = E.run_summary(_hist([0.1, 0.12, 0.18, 0.19, 0.21, 0.3]), 10, "test_acc_seen", 0.2)
    assert (s0["acc40"], s0["acc_ours"], s0["acc_half"], s0["acc_final"]) == (4, 2, 0.41, 0.6)
    assert (s1["acc40"], s1["acc_ours"]) == (6, 4)
    assert (s2["acc40"], s2["acc_ours"]) == (None, 8)
    runs = {("FedAvg", "proportional"): [s0, s1],
            ("FedAvg", "exp-alpha"): [s0, s2],
            ("FedBN", "exp-alpha"): [s2, {"seed": 1, "diverged": "NaN in round 3"}]}
    rows = E.table_rows("imbalance", runs, 10, 0.2)
    assert rows[0] == ["FedAvg", "proportional", "5.00 ± 1.00", "43.33", "3.00 ± 1.00",
                       "35.50 ± 5.50", "55.00 ± 5.00", "64.60"]
    assert rows[1][1] == "Exp-α (α=0.2)"
    assert rows[1][2] == "4.00 ± 0.00 (1/2 reached)"
    assert rows[1][3:5] == ["38.00", "5.00 ± 3.00"]
    assert rows[1][7] == "66.86"
    # FedBN: no paper number; one seed diverged, the other never reached 40%
    assert rows[2][:4] == ["FedBN", "Exp-α (α=0.2) (1 diverged)", "never (> 10)", "—"]
    assert rows[2][6] == "30.00 ± 0.00"
    hdr = E.table_header(0.2, 10, ["w"])
    assert len(hdr) == len(rows[0]) + 1 and hdr[4].startswith("acc20")


def test_flip_table_uses_clean_accuracy_and_weight_column():
    h = _hist([0.1, 0.2, 0.45], key="test_acc_clean")
    for e in h:
        e["test_acc_seen"] = 0.05  # the flipped clients' accuracy drags this down
    s = E.run_summary(h, 4, "test_acc_clean", 0.2, {"weight_tagged": 0.1})
    rows = E.table_rows("flip", {("FedAvg", "exp-alpha"): [s]}, 4, 0.2,
                        [("weight_tagged", 3)])
    assert rows[0][2] == "4.00 ± 0.00" and rows[0][3] == "36.33"
    assert rows[0][-1] == "0.100 ± 0.000"
    assert [k for k in s["history"][0]] == ["round", "train_loss", "test_acc_seen",
                                           "test_acc_clean"]


def test_adapt_rows_and_mean_traces():
    gw = lambda a, b: {"group_weight": {"False": a, "True": b}, "acc_final": 0.5}
    res = {"adapt-flip": {"proportional": [gw(0.17, 0.16), gw(0.17, 0.16)],
                          "exp-alpha": [gw(0.2, 0.1), gw(0.22, 0.06)]}}
    rows = E.adapt_rows(res, {"adapt-flip": 6})
    assert rows[2] == ["flip", "Exp-α (α=0.2)", "clean", "0.2100 ± 0.0100", "0.1667",
                       "50.00 ± 0.00"]
    assert rows[3][3] == "0.0800 ± 0.0200"
    tr = E.mean_traces([{"0": [0.1, np.nan, 0.3]}, {"0": [0.3, np.nan, 0.1], "1": [1, 1, 1]}])
    assert tr["0"][0] == pytest.approx(0.2) and np.isnan(tr["0"][1])
    assert tr["1"] == [1.0, 1.0, 1.0]


def test_group_weight_plot_with_traces_shorter_than_the_window(tmp_path: Path):
    from fedjax_appeal.expalpha_metrics import plot_group_weights

    p = tmp_path / "w.png"
    plot_group_weights(p, {"a": {"0": [0.2, 0.3], "1": [np.nan, 0.1, 0.2, 0.3]}}, smooth=5)
    assert p.stat().st_size > 0


@pytest.mark.parametrize("quick", [False, True])
def test_schedules_validate_and_cohort_makeup(quick, monkeypatch):
    from fedjax_appeal.config import ConfigError
    from fedjax_appeal.selection import stratified_counts
    from fedjax_appeal.validate import validate

    monkeypatch.delenv("FEDJAX_APPEAL_EXPALPHA_PROFILE", raising=False)
    monkeypatch.delenv("FEDJAX_APPEAL_EXPALPHA_MODEL", raising=False)
    ctx = Context("t", [0, 1, 2], Path("unused"), quick=quick)
    for setting in E.SCHEDULES["cpu"]:
        for b in E.BACKBONES:
            for agg in E.AGGREGATIONS:
                cfg = E.make_cfg(ctx, setting, 1, b, agg)
                try:
                    validate(cfg, E.make_hp(b))
                except ConfigError as e:  # pragma: no cover - the message is the point
                    raise AssertionError(f"{setting}/{b.label}/{agg}: {e}") from None
                assert not cfg.appeal and cfg.unseen_clients == 0 and cfg.seed == 1
                assert cfg.model == ("cnn_bn" if b.bn or setting == "domain" else "cnn")
    flip = E.make_cfg(ctx, "flip", 0, E.BY_LABEL["FedAvg"], "exp-alpha")
    assert stratified_counts(flip) == (4, 2) and flip.cohort == 6
    adapt = E.make_cfg(ctx, "adapt-imbalance", 0, E.BY_LABEL["FedAvg"], "exp-alpha")
    assert stratified_counts(adapt) == (4, 3, 3)
    assert E.seeds_of(ctx) == ([0] if quick else [0, 1, 2])
    assert len(E.backbones(ctx, "imbalance")) == (2 if quick else 5)
    if quick:  # the quick subsets together cover every backbone
        assert {n for v in E.QUICK_BACKBONES.values() for n in v} == set(E.BY_LABEL)


def test_gpu_profile_and_model_override(monkeypatch):
    ctx = Context("t", [0], Path("unused"))
    monkeypatch.setenv("FEDJAX_APPEAL_EXPALPHA_PROFILE", "gpu")
    cfg = E.make_cfg(ctx, "imbalance", 0, E.BY_LABEL["FedAvg"], "proportional")
    assert cfg.model == "resnet20" and cfg.rounds > 100
    assert E.make_cfg(ctx, "domain", 0, E.BY_LABEL["FedBN"], "proportional").model == "cnn_bn"
    monkeypatch.setenv("FEDJAX_APPEAL_EXPALPHA_PROFILE", "cpu")
    monkeypatch.setenv("FEDJAX_APPEAL_EXPALPHA_MODEL", "resnet20")
    assert E.make_cfg(ctx, "flip", 0, E.BY_LABEL["FedAvg"], "proportional").model == "resnet20"
    monkeypatch.setenv("FEDJAX_APPEAL_EXPALPHA_PROFILE", "tpu")
    with pytest.raises(ValueError, match="cpu or gpu"):
        E.profile()
