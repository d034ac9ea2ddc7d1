"""The Exp-alpha reproduce module ("EXP-alpha: Beyond Proportional Aggregation in Federated
Learning"): registration, schedules, and the report builders on fabricated histories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedjax_appeal.protocols.appeal.requirement import appeal_on
from papers.expalpha import runs as R
from papers.expalpha import settings as ST
from papers.expalpha import specs as ES
from papers.expalpha import summary as S
from papers.expalpha import tables as E
from papers.reproduce import EXPERIMENTS, Context, load_modules

NAMES = ("expalpha-imbalance", "expalpha-flip", "expalpha-adapt", "expalpha-domain",
         "expalpha-alpha")


def _hist(accs, every=2, key="test_acc_seen"):
    return [{"round": i * every, key: a, "train_loss": 1.0} for i, a in enumerate(accs)]


def test_all_five_registered_through_modules():
    load_modules()
    for n in NAMES:
        assert n in EXPERIMENTS, n
    assert "papers.expalpha.tables" in __import__(
        "papers.reproduce", fromlist=["MODULES"]).MODULES


def test_paired_signs_censoring_and_rows_by_hand():
    # R = 10, evaluations every 2 rounds; targets 0.4 and 0.5
    xs = (0.4, 0.5)
    p0 = S.run_summary(_hist([0.1, 0.25, 0.41, 0.39, 0.5, 0.6]), 10, "test_acc_seen", xs)
    p1 = S.run_summary(_hist([0.1, 0.15, 0.3, 0.45, 0.44, 0.48]), 10, "test_acc_seen", xs)
    e0 = S.run_summary(_hist([0.1, 0.42, 0.45, 0.5, 0.55, 0.62]), 10, "test_acc_seen", xs)
    e1 = S.run_summary(_hist([0.1, 0.2, 0.3, 0.35, 0.41, 0.5]), 10, "test_acc_seen", xs)
    assert p0["reach"] == {"40": 4, "50": 8} and p1["reach"] == {"40": 6, "50": None}
    assert (p0["acc_half"], p0["acc_final"]) == (0.41, 0.6)
    pr = S.paired([4, 6], [2, 8], lower_better=True, censor=11)
    assert pr["diff"] == [-2.0, 2.0] and pr["signs"] == "−+" and not pr["held"]
    # sample std (ddof = 1): sqrt((2² + 2²) / 1) = 2·sqrt(2); t interval 0 ± 12.71·2
    assert pr["mean"] == 0.0 and pr["std"] == pytest.approx(2 * np.sqrt(2))
    assert pr["verdict"] == "inconclusive"
    # a target never reached counts as R + 1 = 11; two seeds both below, but the t interval
    # -1.5 ± t(1, 0.975)·sqrt(0.5)/sqrt(2) = -1.5 ± 12.71·0.5 = [-7.85, +4.85] contains 0
    pr = S.paired([8, None], [6, 10], lower_better=True, censor=11)
    assert pr["diff"] == [-2.0, -1.0] and pr["signs"] == "−−"
    assert pr["std"] == pytest.approx(np.sqrt(0.5))  # ((0.5)² + (0.5)²) / 1
    assert pr["verdict"] == "inconclusive" and not pr["held"]
    # three seeds -2, -1, -2: -5/3 ± 4.303·sqrt(1/3)/sqrt(3) = [-3.10, -0.23], below 0: held
    pr = S.paired([8, None, 8], [6, 10, 6], lower_better=True, censor=11)
    assert pr["signs"] == "−−−" and pr["std"] == pytest.approx(np.sqrt(1 / 3))
    assert pr["verdict"] == "held" and pr["held"]
    # the same difference -2 in every seed: the t interval is the point -2 and says nothing;
    # the sign-flip interval decides, the whole line with 3 seeds, [-2, -2] with 6
    pr = S.paired([8, 8, 8], [6, 6, 6], lower_better=True)
    assert pr["signs"] == "−−−" and pr["verdict"] == "inconclusive" and not pr["held"]
    pr = S.paired([8] * 6, [6] * 6, lower_better=True)
    assert pr["signs"] == "−−−−−−" and pr["verdict"] == "held" and pr["held"]
    # six seeds, Δ = -2, -1, -2, -1, -2, -2: mean -5/3, sample std sqrt(4/15), t interval
    # -5/3 ± 2.571·sqrt(4/15)/sqrt(6) = [-2.21, -1.12]: held
    pr = S.paired([8, None, 6, 6, 8, 4], [6, 10, 4, 5, 6, 2], lower_better=True, censor=11)
    assert pr["diff"] == [-2.0, -1.0, -2.0, -1.0, -2.0, -2.0] and pr["signs"] == "−−−−−−"
    assert pr["verdict"] == "held" and pr["held"]
    assert pr["mean"] == pytest.approx(-5 / 3) and pr["std"] == pytest.approx(np.sqrt(4 / 15))
    # the other way round (Exp-α needs more rounds in every seed): reversed
    pr = S.paired([6, 10, 4, 5, 6, 2], [8, None, 6, 6, 8, 4], lower_better=True, censor=11)
    assert pr["verdict"] == "reversed" and not pr["held"]
    # one seed without a value (None with no censor) makes it inconclusive
    pr = S.paired([8, None, 6, 6, 8, 4], [6, 10, 4, 5, 6, 2], lower_better=True)
    assert pr["signs"] == "−?−−−−" and pr["verdict"] == "inconclusive"
    pr = S.paired([0.5, 0.6], [0.55, 0.6], lower_better=False)
    assert pr["signs"] == "+0" and not pr["held"] and pr["verdict"] == "inconclusive"
    # five of six seeds above (+0.1) and one far below (-0.5): mean 0, inconclusive
    pr = S.paired([0.5] * 6, [0.6, 0.0, 0.6, 0.6, 0.6, 0.6], lower_better=False)
    assert pr["signs"] == "+−++++" and pr["mean"] == pytest.approx(0.0, abs=1e-12)
    assert pr["verdict"] == "inconclusive" and not pr["held"]
    paper = {a: ES.PAPER["imbalance"][("FedAvg", a)] for a in ES.AGGREGATIONS}
    rows = S.paired_rows("FedAvg", [p0, p1], [e0, e1], 10, xs, paper)
    assert len(rows) == 4 and len(rows[0]) == len(S.PAIRED_HEADER)
    # acc40: prop 4, 6 ; Exp-α 2, 8 -> Δ -2, +2 (sample std 2.83)
    assert rows[0][:7] == ["FedAvg", "acc40 (rounds)", "5 ± 1 (4, 6)", "5 ± 3 (2, 8)",
                           "+0.0 ± 2.8", "−+", "inconclusive"]
    assert rows[0][7] == "-5.33 (acc40)"
    # acc50: prop 8, never ; Exp-α 6, 10 -> Δ -2, 10 - 11 = -1 (sample std 0.71); two seeds
    assert rows[1][2] == "8 ± 0 [1/2 reached] (8, >10)"
    assert rows[1][4:7] == ["-1.5 ± 0.7", "−−", "inconclusive"]
    # final accuracy: 60 vs 62, 48 vs 50 -> +2, +2: the same in both seeds, so the
    # sign-flip interval decides, and with two seeds it is the whole line
    assert rows[3][1] == "acc @ R=10 (%)"
    assert rows[3][4:8] == ["+2.00 ± 0.00", "++", "inconclusive", "+2.26 (final)"]
    # the same two seeds three times over (6 seeds): acc50 (−−−−−−, t interval
    # -1.5 ± 2.571·sqrt(0.3)/sqrt(6) = [-2.07, -0.93]) and the final accuracy (+2 in every
    # seed: sign-flip interval [+2, +2]) held, acc40 (−+−+−+, mean 0) still inconclusive
    rows = S.paired_rows("FedAvg", [p0, p1] * 3, [e0, e1] * 3, 10, xs, paper)
    # acc40: Δ ±2 alternating: sample std sqrt(6·4 / 5) = 2.19
    assert rows[0][4:7] == ["+0.0 ± 2.2", "−+−+−+", "inconclusive"]
    # acc50: Δ -2, -1 alternating: mean -1.5, sample std sqrt(6·0.25 / 5) = 0.55
    assert rows[1][4:7] == ["-1.5 ± 0.5", "−−−−−−", "held"]
    assert rows[3][4:7] == ["+2.00 ± 0.00", "++++++", "held"]


def test_adapt_rows_and_mean_traces():
    gw = lambda a, b: {"group_weight": {"False": a, "True": b}, "acc_final": 0.5}
    res = {"adapt-flip": {"proportional": [gw(0.17, 0.16), gw(0.17, 0.16)],
                          "exp-alpha": [gw(0.2, 0.1), gw(0.22, 0.06)]}}
    rows = E.adapt_rows(res, {"adapt-flip": 6})
    assert rows[2] == ["flip", "Exp-α (α=0.2)", "clean", "0.2100 ± 0.0100", "0.1667",
                       "50.00 ± 0.00"]
    assert rows[3][3] == "0.0800 ± 0.0200"
    tr = S.mean_traces([{"0": [0.1, np.nan, 0.3]}, {"0": [0.3, np.nan, 0.1], "1": [1, 1, 1]}])
    assert tr["0"][0] == pytest.approx(0.2) and np.isnan(tr["0"][1])
    assert tr["1"] == [1.0, 1.0, 1.0]


def test_group_weight_plot_with_traces_shorter_than_the_window(tmp_path: Path):
    from papers.expalpha.metrics import plot_group_weights

    p = tmp_path / "w.png"
    plot_group_weights(p, {"a": {"0": [0.2, 0.3], "1": [np.nan, 0.1, 0.2, 0.3]}}, smooth=5)
    assert p.stat().st_size > 0


@pytest.mark.parametrize("quick", [False, True])
def test_schedules_validate_and_cohort_makeup(quick, monkeypatch):
    from fedjax_appeal.core.config import ConfigError
    from fedjax_appeal.run.validate import validate
    from fedjax_appeal.select.selection import stratified_counts

    ctx = Context("t", [0, 1, 2], Path("unused"), quick=quick)
    for setting in ES.SCHEDULES["cpu"]:
        for b in (*ES.BACKBONES, ES.FEDBN):
            for agg in ES.AGGREGATIONS:
                if b.bn and setting != "domain":
                    continue
                cfg = ST.make_cfg(ctx, setting, 1, b, agg)
                try:
                    validate(cfg, ST.make_hp(ctx, b))
                except ConfigError as e:  # pragma: no cover - the message is the point
                    raise AssertionError(f"{setting}/{b.label}/{agg}: {e}") from None
                assert not appeal_on(cfg) and cfg.unseen_clients == 0 and cfg.seed == 1
                assert cfg.model == ("cnn_bn" if setting == "domain" else "mlp")
                if setting != "domain":  # the paper's equal-size clients, a pool >= 100
                    assert cfg.imbalance_size > 0 and cfg.clients >= 100
                    assert cfg.global_test_per_class > 0
    flip = ST.make_cfg(ctx, "flip", 0, ES.BY_LABEL["FedAvg"], "exp-alpha")
    assert flip.flip_protocol == "bernoulli" and flip.cohort == 6
    assert flip.label_flip_fraction == pytest.approx(1 / 3)
    assert ST.make_cfg(ctx, "adapt-flip", 0, ES.BY_LABEL["FedAvg"], "exp-alpha"
                      ).flip_protocol == "fixed"
    adapt = ST.make_cfg(ctx, "adapt-imbalance", 0, ES.BY_LABEL["FedAvg"], "exp-alpha")
    assert stratified_counts(adapt) == (4, 3, 3)
    alpha = ST.make_cfg(ctx, "alpha", 0, ES.BY_LABEL["FedAvg"], "exp-alpha")
    assert stratified_counts(alpha) == (4, 6)
    assert ST.seeds_of(ctx) == ([0] if quick else [0, 1, 2])
    assert len(ST.backbones(ctx, "imbalance")) == (2 if quick else 5)
    assert "FedFor" in [b.label for b in ST.backbones(ctx, "domain")] or quick
    if quick:  # the quick subsets together cover every backbone
        assert {n for v in ES.QUICK_BACKBONES.values() for n in v} == set(ES.BY_LABEL)


def test_gpu_profile_and_model_override(capsys):
    from fedjax_appeal.cli.commands import main
    from fedjax_appeal.core.config import ConfigError
    from papers.reproduce import parse_options

    ctx = Context("t", [0], Path("unused"), options={"profile": "gpu"})
    cfg = ST.make_cfg(ctx, "imbalance", 0, ES.BY_LABEL["FedAvg"], "proportional")
    assert cfg.model == "resnet20" and cfg.rounds > 100 and cfg.dataset == "cifar10"
    assert cfg.imbalance_size * cfg.clients == 35000 and cfg.global_test_per_class == 1000
    assert (cfg.batch_size, ST.make_hp(ctx, ES.BY_LABEL["FedAvg"]).client_lr) == (128, 0.01)
    assert [cfg.local_steps * t for _, t in ES.GRID["gpu"]] and cfg.local_steps == 20
    assert ST.make_cfg(ctx, "domain", 0, ES.BY_LABEL["FedBN"], "proportional").model == "cnn_bn"
    ctx = Context("t", [0], Path("unused"),
                  options=parse_options("expalpha-flip", ["profile=cpu", "model=resnet20"]))
    assert ST.make_cfg(ctx, "flip", 0, ES.BY_LABEL["FedAvg"], "proportional").model == "resnet20"
    with pytest.raises(ConfigError, match="cpu or gpu"):
        ST.profile(Context("t", [0], Path("unused"), options={"profile": "tpu"}))
    # an option the experiment does not declare is one line naming the declared ones
    assert main(["reproduce", "expalpha-flip", "--set", "profil=gpu", "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no option 'profil' (did you mean 'profile'?)" in err[0]


def test_effective_cohort_by_hand():
    res = {"round_metrics": {"cohort_weights": [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0],
                                                [0.25, 0.25, 0.5]]}}
    # 1 / sum w^2: 2, 1, 1 / 0.375
    assert R.effective_cohort(res) == pytest.approx((2 + 1 + 1 / 0.375) / 3)
    assert R.effective_cohort({"round_metrics": {}}) is None
