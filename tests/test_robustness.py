"""Tests of `papers/robustness.py` (`reproduce NAME --robustness`, the shared-client-lr check of
the MaxFL appeal tables): the per-seed comparison and the verdict on hand-made numbers, and
one end-to-end run through the command line on a tiny synthetic table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from papers.pairs import verdict_of
from papers.robustness import analyse, compare, verdict


def test_compare_best_other_by_mean_and_per_seed_signs():
    # six seeds; FedAvg's mean 0.2 beats MW-Fed's 0.1; MaxFL − FedAvg 0.4 or 0.5 in every seed
    vals = {"FedAvg": {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.1, 4: 0.2, 5: 0.3},
            "MW-Fed": {0: 0.3, 1: 0.0, 2: 0.0, 3: 0.3, 4: 0.0, 5: 0.0},
            "MaxFL": {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.6, 4: 0.6, 5: 0.8}}
    c = compare(vals, "MaxFL")
    assert c["best_other"] == "FedAvg" and c["seeds"] == [0, 1, 2, 3, 4, 5]
    np.testing.assert_allclose(c["diff"], [0.4, 0.4, 0.4, 0.5, 0.4, 0.5])
    # t interval 0.433 ± 2.571·0.0516/sqrt(6) = [0.379, 0.488]
    assert c["signs"] == "+ + + + + +" and c["held"]
    # seeds 0-2 only: the same difference 0.4 in every seed, so the t interval is a point
    # and the sign-flip interval decides, which with three seeds is the whole line
    c = compare({a: {s: v[s] for s in range(3)} for a, v in vals.items()}, "MaxFL")
    assert c["best_other"] == "FedAvg" and c["seeds"] == [0, 1, 2]
    np.testing.assert_allclose(c["diff"], [0.4, 0.4, 0.4])
    assert c["signs"] == "+ + +" and not c["held"]
    assert verdict_of(c["diff"], "+") == "inconclusive"
    # seeds 3-5: 0.5, 0.4, 0.5, t interval 0.467 ± 4.303·0.0577/sqrt(3) = [0.32, 0.61]
    c = compare({a: {s: v[s] for s in (3, 4, 5)} for a, v in vals.items()}, "MaxFL")
    assert c["signs"] == "+ + +" and c["held"]


def test_one_flipped_seed_is_not_held():
    c = compare({"FedAvg": {0: 0.1, 1: 0.2, 2: 0.3}, "MaxFL": {0: 0.5, 1: 0.1, 2: 0.7}},
                "MaxFL")
    assert c["signs"] == "+ − +" and not c["held"]
    # six seeds, five +0.1 and one -0.5: mean 0, so the t interval contains 0
    c = compare({"FedAvg": {s: 0.5 for s in range(6)},
                 "MaxFL": {0: 0.6, 1: 0.0, 2: 0.6, 3: 0.6, 4: 0.6, 5: 0.6}}, "MaxFL")
    assert c["signs"] == "+ − + + + +" and not c["held"]
    assert verdict_of(c["diff"], "+") == "inconclusive"


def test_ties_and_nan_are_not_held():
    tie = compare({"FedAvg": {0: 0.0, 1: 0.0}, "MaxFL": {0: 0.0, 1: 0.2}}, "MaxFL")
    assert tie["signs"] == "0 +" and not tie["held"]
    nan = compare({"FedAvg": {0: 0.1, 1: 0.1}, "MaxFL": {0: float("nan"), 1: 0.2}}, "MaxFL")
    assert nan["signs"] == "? +" and not nan["held"]
    # six ties: no difference at all, inconclusive
    tie = compare({"FedAvg": {s: 0.1 for s in range(6)}, "MaxFL": {s: 0.1 for s in range(6)}},
                  "MaxFL")
    assert tie["signs"] == "0 0 0 0 0 0" and not tie["held"]
    assert verdict_of(tie["diff"], "+") == "inconclusive"
    # five ties and one seed +0.3: mean 0.05, sample std sqrt(0.015), so the standard error
    # is sqrt(0.015 / 6) = 0.05 and the t interval 0.05 ± 2.571·0.05 contains 0
    tie = compare({"FedAvg": {s: 0.0 for s in range(6)},
                   "MaxFL": {s: 0.3 if s == 5 else 0.0 for s in range(6)}}, "MaxFL")
    assert tie["signs"] == "0 0 0 0 0 +" and not tie["held"]
    assert verdict_of(tie["diff"], "+") == "inconclusive"
    # six seeds, five above and one NaN: inconclusive, not dropped
    nan = compare({"FedAvg": {s: 0.1 for s in range(6)},
                   "MaxFL": {0: float("nan"), **{s: 0.2 + s / 100 for s in range(1, 6)}}},
                  "MaxFL")
    assert nan["signs"] == "? + + + + +" and not nan["held"]
    assert verdict_of(nan["diff"], "+") == "inconclusive"
    # an arm with a NaN ranks last as "best other" (A would otherwise be best, and above
    # MaxFL); against B, MaxFL is above in all six seeds: held
    c = compare({"A": {0: float("nan"), **{s: 0.9 for s in range(1, 6)}},
                 "B": {s: 0.1 for s in range(6)},
                 "MaxFL": {s: 0.2 + s / 50 for s in range(6)}}, "MaxFL")
    assert c["best_other"] == "B" and c["held"]
    np.testing.assert_allclose(c["diff"], [0.1, 0.12, 0.14, 0.16, 0.18, 0.2])
    # three seeds: 0.1, 0.12, 0.14, t interval 0.12 ± 4.303·0.02/sqrt(3) = [0.07, 0.17]
    c = compare({"A": {0: float("nan"), 1: 0.9, 2: 0.9}, "B": {s: 0.1 for s in range(3)},
                 "MaxFL": {s: 0.2 + s / 50 for s in range(3)}}, "MaxFL")
    assert c["best_other"] == "B" and c["held"]
    # the same difference 0.1 in every seed: the sign-flip interval decides (6 seeds needed)
    for n, held in ((3, False), (6, True)):
        c = compare({"A": {0: float("nan"), **{s: 0.9 for s in range(1, n)}},
                     "B": {s: 0.1 for s in range(n)}, "MaxFL": {s: 0.2 for s in range(n)}},
                    "MaxFL")
        assert c["best_other"] == "B" and c["held"] == held


def test_verdict_strings():
    v = verdict([True, False, True, True], True)
    assert (v["k"], v["n"]) == (3, 4)
    assert v["text"] == "held at 3 of 4 shared lrs (and at the tuned lrs)" == v["phrase"]
    v = verdict([False] * 4, True)
    assert v["text"] == "held at 0 of 4 shared lrs (and at the tuned lrs)"
    assert v["phrase"] == "held at tuned lrs only"
    v = verdict([True, False], False)
    assert v["text"] == "held at 1 of 2 shared lrs (not at the tuned lrs)" == v["phrase"]
    assert verdict([False], None)["text"] == "held at 0 of 1 shared lrs (tuned lrs not run)"
    assert verdict([False], None)["phrase"] == "held at 0 of 1 shared lrs (tuned lrs not run)"


def test_analyse_flips_one_seed_at_one_lr():
    lrs = [0.1, 0.01]

    def runs(by_lr):
        return [{"seed": s, "client_lr": lr, "final": {"gm": x}}
                for lr, xs in by_lr.items() for s, x in enumerate(xs)]

    # six seeds: MaxFL above FedAvg in every seed at lr 0.1 (0.2, 0.1, 0.3 twice: t interval
    # 0.2 ± 2.571·sqrt(0.008)/sqrt(6) = [0.11, 0.29]), far below in seed 1 at lr 0.01
    # (+0.2 five times and -0.7: mean 0.05, standard error 0.15, t interval [-0.34, 0.44])
    grid = {"col": {"FedAvg": {"runs": runs({0.1: [0.1] * 6,
                                             0.01: [0.0, 0.9, 0.0, 0.0, 0.0, 0.0]})},
                    "MaxFL": {"runs": runs({0.1: [0.3, 0.2, 0.4] * 2, 0.01: [0.2] * 6})}}}
    tuned = {"col": {"FedAvg": {"gm": {s: 0.0 for s in range(6)}},
                     "MaxFL": {"gm": dict(enumerate([0.5, 0.4, 0.6] * 2))}}}
    (row,) = analyse(grid, lrs, ["gm"], "MaxFL", tuned)
    assert [p["signs"] for p in row["per_lr"]] == ["+ + + + + +", "+ − + + + +"]
    assert [p["held"] for p in row["per_lr"]] == [True, False]
    assert row["tuned"]["held"] and row["tuned"]["signs"] == "+ + + + + +"
    assert row["text"] == "held at 1 of 2 shared lrs (and at the tuned lrs)"
    (row,) = analyse(grid, lrs, ["gm"], "MaxFL", {})
    assert row["tuned"] is None and row["text"].endswith("(tuned lrs not run)")
    # the same pattern over seeds 0-2 only: at lr 0.1, 0.2 ± 4.303·0.1/sqrt(3) =
    # [-0.05, 0.45] contains 0; the tuned run's 0.5 ± 0.248 = [0.25, 0.75] does not
    grid3 = {"col": {arm: {"runs": [r for r in rec["runs"] if r["seed"] < 3]}
                     for arm, rec in grid["col"].items()}}
    (row,) = analyse(grid3, lrs, ["gm"], "MaxFL", tuned)
    assert [p["signs"] for p in row["per_lr"]] == ["+ + +", "+ − +"]
    assert [p["held"] for p in row["per_lr"]] == [False, False]
    assert row["tuned"]["signs"] == "+ + +" and row["tuned"]["held"]
    assert row["text"] == "held at 0 of 2 shared lrs (and at the tuned lrs)"
    assert row["phrase"] == "held at tuned lrs only"


@pytest.mark.slow
def test_robustness_end_to_end(tmp_path, monkeypatch):
    """`reproduce NAME --robustness` on a tiny synthetic table: both files, the lr grid,
    every per-seed number, and the tuned verdict read from the table's results.json."""
    import argparse

    from papers import cli, reproduce
    from papers.appeal.tables import run_and_report
    from papers.spec import Arm, Setting, Table

    tiny = dict(dataset="synthetic", partition="natural", clients=6, unseen_clients=0,
                cohort=2, rounds=2, local_steps=1, batch_size=4, eval_every=1, min_samples=4,
                rho_steps=2, opt_out_after=0, finetune_steps=0)
    table = Table("tiny-robust", "tiny", "Tiny", settings=(Setting("s", tiny, tiny),),
                  arms=(Arm("FedAvg", "fedavg"), Arm("MaxFL", "maxfl")),
                  metrics=("gm_appeal_seen", "test_acc_seen"), base_cfg={"appeal": "on"},
                  base_hp={"client_lr": 0.05, "solo_lr": 0.0},
                  robustness={"lrs": (0.1, 0.05, 0.01), "metrics": ("test_acc_seen",)})
    monkeypatch.setattr(reproduce, "load_modules", lambda: None)
    monkeypatch.setitem(reproduce.EXPERIMENTS, "tiny-robust",
                        (lambda ctx: run_and_report(ctx, table), "tiny"))
    monkeypatch.setattr(reproduce, "ROBUST", {"tiny-robust"})
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"grid": {"s": {
        arm: {"status": "ok", "runs": [{"seed": s, "final": {"test_acc_seen": x}}
                                       for s, x in ((0, a), (1, b))]}
        for arm, a, b in (("FedAvg", 0.5, 0.6), ("MaxFL", 0.7, 0.8))}}}))
    p = argparse.ArgumentParser()
    cli.configure(p)
    args = p.parse_args(["tiny-robust", "--robustness", "--seeds", "0,1", "--out", str(out),
                         "--cache-dir", str(tmp_path / "cache")])
    assert cli.cmd(args) == 0
    res = json.loads((out / "robustness.json").read_text())
    assert res["lrs"] == [0.1, 0.05, 0.01] and res["seeds"] == [0, 1]
    for arm in ("FedAvg", "MaxFL"):
        got = sorted((r["client_lr"], r["seed"]) for r in res["grid"]["s"][arm]["runs"])
        assert got == sorted((lr, s) for lr in (0.1, 0.05, 0.01) for s in (0, 1))
    (row,) = res["verdicts"]
    assert [p["client_lr"] for p in row["per_lr"]] == [0.1, 0.05, 0.01]
    # the tuned run: MaxFL +20 pp in both seeds, the same difference, so the sign-flip
    # interval decides, and with two seeds it is the whole line: inconclusive
    assert row["tuned"]["signs"] == "+ +" and row["tuned"]["diff"] == pytest.approx([20, 20])
    assert not row["tuned"]["held"] and row["n"] == 3
    # each shared lr: held exactly when its per-seed differences' verdict is "held"
    got = [p["held"] for p in row["per_lr"]]
    assert got == [verdict_of(p["diff"], "+") == "held" for p in row["per_lr"]]
    assert row["k"] == sum(got)
    assert row["text"] == f"held at {row['k']} of 3 shared lrs (not at the tuned lrs)"
    text = (out / "robustness.md").read_text()
    assert "Verdict" in text and "0.005" not in text and row["text"] in text
    assert "inconclusive" in text and "not held" not in text
    assert "seed by seed; a direction counts as held only when" in text  # the rule, once
    # a second run is served from the run cache (same numbers)
    assert cli.cmd(args) == 0
    assert json.loads((out / "robustness.json").read_text())["grid"] == res["grid"]
    # a table without the mode refuses the flag
    args.name = "no-such-mode"
    monkeypatch.setitem(reproduce.EXPERIMENTS, "no-such-mode", (lambda ctx: None, "x"))
    with pytest.raises(Exception, match="no --robustness mode"):
        cli.cmd(args)


def test_expalpha_robustness_verdicts_by_hand():
    """Exp-α vs proportional at three shared lrs over six seeds: held where the paired
    interval lies above 0, inconclusive where one seed far below brings the mean to 0; the
    table's lr (0.05) is the "tuned" one. With two seeds nothing is held."""
    from papers.expalpha.robust import analyse

    six = lambda *xs: dict(enumerate(xs))
    # 0.01: +0.01 in every seed (the same difference: the sign-flip interval [0.01, 0.01]
    # decides); 0.05: +0.02, +0.01 alternating (t: 0.015 ± 2.571·0.0055/sqrt(6) =
    # [0.009, 0.021]); 0.1: +0.01 five times and -0.05 (mean 0: contains 0)
    ea = {0.01: six(0.80, 0.81, 0.80, 0.81, 0.80, 0.81),
          0.05: six(0.85, 0.84, 0.85, 0.84, 0.85, 0.84),
          0.1: six(0.86, 0.75, 0.86, 0.86, 0.86, 0.86)}
    pr = {0.01: six(0.79, 0.80, 0.79, 0.80, 0.79, 0.80),
          0.05: six(0.83, 0.83, 0.83, 0.83, 0.83, 0.83),
          0.1: six(0.85, 0.80, 0.85, 0.85, 0.85, 0.85)}
    runs = {"FedAvg": {"exp-alpha": ea, "proportional": pr}}
    r = analyse(runs, (0.01, 0.05, 0.1), 0.05)["FedAvg"]
    assert [r["per_lr"][lr]["held"] for lr in (0.01, 0.05, 0.1)] == [True, True, False]
    assert r["per_lr"][0.1]["signs"] == "+ − + + + +"
    assert verdict_of(r["per_lr"][0.1]["diff"], "+") == "inconclusive"
    assert r["verdict"]["text"] == "held at 2 of 3 shared lrs (and at the tuned lrs)"
    # the same numbers for seeds 0 and 1 only: inconclusive at every lr (0.01: the sign-flip
    # interval of two seeds is the whole line; 0.05: 0.015 ± 12.71·0.005 = [-0.05, 0.08])
    two = {bb: {agg: {lr: {s: v[s] for s in (0, 1)} for lr, v in by.items()}
                for agg, by in aggs.items()} for bb, aggs in runs.items()}
    r = analyse(two, (0.01, 0.05, 0.1), 0.05)["FedAvg"]
    assert r["per_lr"][0.01]["signs"] == "+ +" and not r["per_lr"][0.01]["held"]
    assert r["verdict"]["text"] == "held at 0 of 3 shared lrs (not at the tuned lrs)"
    # below in every seed at the table's lr: reversed there, "not at the tuned lrs"
    ea[0.05] = six(0.82, 0.81, 0.82, 0.81, 0.82, 0.81)
    r = analyse(runs, (0.01, 0.05, 0.1), 0.05)["FedAvg"]
    assert verdict_of(r["per_lr"][0.05]["diff"], "+") == "reversed"
    assert r["verdict"]["text"] == "held at 1 of 3 shared lrs (not at the tuned lrs)"


def test_expalpha_shared_lrs_around_the_tables_lr():
    from pathlib import Path

    from papers.expalpha.robust import lrs_of
    from papers.reproduce import Context

    assert lrs_of(Context("expalpha-flip", [0], Path("unused"))) == (0.01, 0.05, 0.1)


def test_shared_lr_reruns_the_experiment_and_judges_each_claim(tmp_path, monkeypatch):
    """`papers.shared_lr`: the experiment reruns at every lr but the table's (read from the
    table's results.json), each run's client lr is replaced, forced options reach the
    rerun, and each claim is judged against the paper's sign seed by seed."""
    import argparse

    from fedjax_appeal import HParams, RunConfig
    from papers import cli, reproduce
    from papers.shared_lr import Claim, SharedLr, judge, lookup

    seen = []

    def fake_run_config(cfg, hp, **kw):
        seen.append(float(hp.client_lr))
        return {"history": [{"round": 1, "test_acc_seen": 0.5}]}, None

    monkeypatch.setattr("fedjax_appeal.run_config", fake_run_config)

    def table(ctx):  # "B − A" per seed = 10·lr − 0.5 + seed/100: < 0 at 0.01, > 0 at 0.1
        ctx.run(RunConfig(dataset="synthetic"), HParams(client_lr=0.05))
        lr = ctx.client_lr
        diffs = [10 * lr - 0.5 + s / 100 for s in ctx.seeds]
        ctx.write({"results.json": {"opt": ctx.option("k"), "paired": {"B − A": {
            "diffs": diffs, "signs": "".join("+" if d > 0 else "-" if d < 0 else "0"
                                             for d in diffs)}}}})

    spec = SharedLr(0.05, (0.01, 0.05, 0.1), (Claim("paired/B − A", "+", "B above A"),
                                              Claim("paired/missing", "-", "absent")),
                    options={"k": "forced"})
    reproduce.experiment("tiny-shared", "tiny", options={"k": "x"}, shared_lr=spec)(table)
    monkeypatch.setattr(reproduce, "load_modules", lambda: None)
    out = tmp_path / "out"
    out.mkdir()  # the table's own run at 0.05: above in all six seeds
    (out / "results.json").write_text(json.dumps({"paired": {"B − A": {
        "diffs": [0.3, 0.2, 0.3, 0.2, 0.3, 0.2], "signs": "++++++"}}}))
    p = argparse.ArgumentParser()
    cli.configure(p)
    args = p.parse_args(["tiny-shared", "--robustness", "--seeds", "0,1,2,3,4,5", "--out",
                         str(out),
                         "--cache-dir", str(tmp_path / "cache"), "--fresh"])
    try:
        assert cli.cmd(args) == 0
    finally:
        for reg in (reproduce.EXPERIMENTS, reproduce.OPTIONS):
            reg.pop("tiny-shared", None)
        reproduce.ROBUST.discard("tiny-shared")
    assert seen == [0.01, 0.1]  # the table's lr is not rerun; every run's lr replaced
    res = json.loads((out / "robustness.json").read_text())
    assert res["sources"] == {"0.01": "rerun", "0.05": "the table's own run", "0.1": "rerun"}
    v = {x["claim"]: x for x in res["verdicts"]}
    b = v["B above A"]
    assert b["per_lr"]["0.01"]["diffs"] == pytest.approx([-0.4, -0.39, -0.38, -0.37, -0.36,
                                                          -0.35])
    assert b["per_lr"]["0.1"]["diffs"] == pytest.approx([0.5, 0.51, 0.52, 0.53, 0.54, 0.55])
    assert [b["per_lr"][k]["held"] for k in ("0.01", "0.05", "0.1")] == [False, True, True]
    assert b["text"] == "held at 2 of 3 shared lrs (and at the tuned lrs)"
    assert "absent" not in v and res["absent"] == ["absent"]
    md = (out / "robustness.md").read_text()
    assert "Not in these runs: absent." in md
    # the table's rows: below in every seed at 0.01 (reversed), above at 0.05 and 0.1
    verdicts = [line.rstrip(" |").rsplit("| ", 1)[1] for line in md.splitlines()
                if line.startswith("| B above A |")]
    assert verdicts == ["reversed", "held", "held"]
    rerun = tmp_path / "cache" / "shared-lr" / "tiny-shared" / "lr-0.1" / "results.json"
    assert json.loads(rerun.read_text())["opt"] == "forced"
    # the pieces by hand
    assert lookup({"a": {"b": {"diffs": [1.0]}}}, "a/b") == {"diffs": [1.0]}
    assert lookup({"a": {"b": 1}}, "a/b") is None and lookup({}, "a") is None
    assert judge({"diffs": [-1.0, 0.0]}, "-") == {"diffs": [-1.0, 0.0], "signs": "-0",
                                                  "held": False}
    assert judge(None, "+")["held"] is False
    six = [0.3, 0.2, 0.3, 0.2, 0.3, 0.2]
    assert judge({"diffs": six}, "+")["held"] and not judge({"diffs": six}, "-")["held"]
    # three seeds 0.3, 0.2, 0.3: 0.267 ± 4.303·0.0577/sqrt(3) = [0.12, 0.41], held; two
    # seeds 0.3, 0.2: 0.25 ± 12.71·0.05 = [-0.39, 0.89], not held
    assert judge({"diffs": six[:3]}, "+")["held"]
    assert not judge({"diffs": [0.3, 0.2], "signs": "++"}, "+")["held"]
    assert verdict_of([0.3, 0.2], "+") == "inconclusive"
    # the same difference in every seed: the sign-flip interval decides, 6 seeds needed
    assert not judge({"diffs": [0.3] * 3}, "+")["held"] and judge({"diffs": [0.3] * 6}, "+")[
        "held"]


def test_privacy_compress_robustness_pairs_each_lr(tmp_path, monkeypatch):
    """`privacy_compress compress OUT --robustness`: the claims' arms at each lr (run files
    named by lr; the table's lr taken from the table's results.json, not rerun) and the
    per-seed verdicts."""
    from papers.extensions import privacy_compress as pc

    calls = []

    def fake(cfg, hp, **kw):  # accuracy = 0.5 + lr + arm bonus (qsgd below FedAvg at 0.2)
        lr = float(hp.client_lr)
        calls.append((cfg.compress, cfg.seed, lr))
        bonus = {"none": 0.0, "qsgd": 0.01 if lr < 0.15 else -0.01}.get(cfg.compress, 0.0)
        if cfg.compress == "topk":
            bonus = 0.02 if cfg.compress_feedback == "on" else 0.0
        return ({"config": {}, "hparams": {}, "timing": {}, "round_metrics": {},
                 "history": [{"round": 1, "test_acc_seen": 0.5 + lr + bonus + cfg.seed / 100}]},
                type("S", (), {"final_state": type("F", (), {"params": {}})()})())

    monkeypatch.setattr("fedjax_appeal.run_config", fake)
    out = tmp_path / "compression"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"runs": {
        arm: [{"seed": s, "history": [{"round": 1, "test_acc_seen": 0.6 + b + s / 1000}]}
              for s in range(6)]
        for arm, b in (("fedavg", 0.0), ("qsgd-s4", 0.001), ("topk-1pc-ef", 0.0),
                       ("topk-1pc", 0.01))}}))
    six = [str(s) for s in range(6)]
    assert pc.main(["compress", str(out), "--seeds", *six, "--robustness",
                    "--lrs", "0.02,0.1,0.2", "--runs", str(tmp_path / "runs")]) == 0
    assert {lr for _, _, lr in calls} == {0.02, 0.2}  # 0.1: the table's runs
    assert (tmp_path / "runs" / "qsgd-s4-lr0.2-s5.json").is_file()
    res = json.loads((out / "robustness.json").read_text())
    q, t = res["claims"]
    # each claim has the same difference in every seed (the seed's offset cancels), so the
    # t interval is a point and the sign-flip interval decides: with six seeds it is that
    # point, held or reversed
    assert [q["per_lr"][k]["held"] for k in ("0.02", "0.1", "0.2")] == [True, True, False]
    assert q["per_lr"]["0.1"]["diffs"] == pytest.approx([0.1] * 6)
    assert q["per_lr"]["0.2"]["diffs"] == pytest.approx([-1.0] * 6)
    assert q["text"] == "held at 2 of 3 shared lrs (and at the tuned lrs)"
    assert [t["per_lr"][k]["held"] for k in ("0.02", "0.1", "0.2")] == [True, False, True]
    assert t["per_lr"]["0.1"]["diffs"] == pytest.approx([-1.0] * 6)
    assert t["text"] == "held at 2 of 3 shared lrs (not at the tuned lrs)"
    md = (out / "robustness.md").read_text()
    cells = [line.rstrip(" |").rsplit("| ", 1)[1] for line in md.splitlines()
             if line.startswith(("| QSGD", "| top-1%"))]
    assert cells == ["held", "held", "reversed", "held", "reversed", "held"]
    # the same runs for seeds 0-2 only: the sign-flip interval of three seeds is the whole
    # line, so every lr is inconclusive and nothing held
    assert pc.main(["compress", str(out), "--seeds", "0", "1", "2", "--robustness",
                    "--lrs", "0.02,0.1,0.2", "--runs", str(tmp_path / "runs")]) == 0
    res = json.loads((out / "robustness.json").read_text())
    q, t = res["claims"]
    assert q["per_lr"]["0.02"]["signs"] == "+++" and q["per_lr"]["0.2"]["signs"] == "---"
    assert not any(c["per_lr"][k]["held"] for c in (q, t) for k in ("0.02", "0.1", "0.2"))
    assert q["text"] == "held at 0 of 3 shared lrs (not at the tuned lrs)"
    md = (out / "robustness.md").read_text()
    assert md.count("| inconclusive |") == 6 and "| held |" not in md
