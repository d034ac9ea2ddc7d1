"""`reproduce NAME --seeds auto` (`papers.decide`): the loop over looks, what each look
writes, the main claims the experiments name, and the refusals. An experiment without
JAX stands in for a paper table: its per-seed difference is a fixed function of the seed,
and it counts which seeds it was asked for."""

from __future__ import annotations

import json
import math

import pytest

from fedjax_appeal.cli.commands import main
from papers import reproduce
from papers.decide import record_claim, runs_claim
from papers.reproduce import CLAIMS, EXPERIMENTS, load_modules

load_modules()


def _experiment(diff_of, calls):
    """A stand-in table: per seed the difference diff_of(seed), written as the tables do."""
    def fn(ctx):
        calls.append(list(ctx.seeds))
        diffs = [diff_of(s) for s in ctx.seeds]
        ctx.write({"table.md": "# toy\n",
                   "results.json": {"seeds": list(ctx.seeds),
                                    "paired": {"d": {"diffs": diffs}}}})
    return fn


@pytest.fixture
def toy(monkeypatch, tmp_path):
    calls: list[list[int]] = []

    def register(name, diff_of, paper=None):
        monkeypatch.setitem(EXPERIMENTS, name, (_experiment(diff_of, calls), "toy"))
        monkeypatch.setitem(CLAIMS, name, record_claim("paired/d", "+", "toy difference",
                                                       paper))
    monkeypatch.setenv("FEDJAX_APPEAL_CACHE", str(tmp_path / "cache"))
    return register, calls


def test_a_large_effect_stops_at_the_first_look(toy, tmp_path, capsys):
    register, calls = toy
    register("toy-big", lambda s: 1.0 + 0.1 * (s % 3), paper=5.0)  # mean 1.09, sd 0.085
    out = tmp_path / "big"
    assert main(["reproduce", "toy-big", "--seeds", "auto:30", "--out", str(out)]) == 0
    assert calls == [list(range(10))]  # one look of the 10 first seeds
    res = json.loads((out / "results.json").read_text())
    s = res["seeds_until_decided"]
    assert s["verdict"] == "held" and s["seeds_used"] == 10 and s["looks_planned"] == [10, 20,
                                                                                      30]
    # the paper's +5.0 lies far above the interval: ours is smaller, excluded at 95%
    assert s["paper_effect"] == 5.0 and s["size"] == "smaller"
    md = (out / "table.md").read_text()
    assert "## Seeds until decided" in md and "It took **10 seeds**" in md
    assert "smaller than the paper's +5.000, excluded at 95%" in md
    assert md.index("## Seeds until decided") < md.index("## Cost")
    assert "toy difference: held after 10 seeds, look 1 of 3" in capsys.readouterr().out


def test_a_small_effect_adds_batches_until_decided(toy, tmp_path):
    register, calls = toy
    # 0.7 + (-1)^(s+1): mean 0.7 at every look, sd sqrt(n / (n - 1)); boundaries
    # c_1 = 2.8905 (t_9 quantile), c_2 = 2.6195: look 1 half-width 2.8905 * 1.0541 / sqrt(10)
    # = 0.963 > 0.7 (contains 0), look 2: 2.6195 * 1.0260 / sqrt(20) = 0.601 < 0.7 (held)
    register("toy-small", lambda s: 0.7 + (1.0 if s % 2 else -1.0))
    out = tmp_path / "small"
    assert main(["reproduce", "toy-small", "--seeds", "auto:40", "--out", str(out)]) == 0
    assert calls == [list(range(10)), list(range(20))]
    s = json.loads((out / "results.json").read_text())["seeds_until_decided"]
    assert s["verdict"] == "held" and s["seeds_used"] == 20
    assert [lk["side"] for lk in s["looks"]] == ["0", "+"]
    assert s["looks"][0]["interval"] == pytest.approx([0.7 - 0.963, 0.7 + 0.963], abs=2e-3)
    assert s["looks"][1]["interval"] == pytest.approx([0.7 - 0.601, 0.7 + 0.601], abs=2e-3)
    assert s["size"] is None and s["paper_effect"] is None  # no paper number


def test_no_effect_runs_to_the_maximum(toy, tmp_path):
    register, calls = toy
    register("toy-null", lambda s: 1.0 if s % 2 else -1.0)
    out = tmp_path / "null"
    assert main(["reproduce", "toy-null", "--seeds", "auto:20", "--seed-batch", "5",
                 "--out", str(out)]) == 0
    assert [len(c) for c in calls] == [5, 10, 15, 20]
    s = json.loads((out / "results.json").read_text())["seeds_until_decided"]
    assert s["verdict"] == "inconclusive" and "maximum of 20 seeds" in s["reason"]


def test_refusals_are_one_line(toy, tmp_path, capsys):
    register, _ = toy
    register("toy-x", lambda s: 1.0)
    cases = [
        (["reproduce", "toy-x", "--seeds", "auto:2"], "at least 3 seeds"),
        (["reproduce", "toy-x", "--seeds", "auto:x"], "auto:MAX"),
        (["reproduce", "toy-x", "--seeds", "auto:20", "--seed-batch", "30"], "below the batch"),
        (["reproduce", "toy-x", "--seeds", "0,1", "--seed-batch", "5"], "goes with --seeds auto"),
        (["reproduce", "mean-estimation", "--seeds", "auto"], "names no main claim"),
        (["reproduce", "expalpha-flip", "--seeds", "auto", "--quick"], "drop --quick"),
        (["reproduce", "appeal-unseen", "--seeds", "auto", "--robustness"], "--robustness"),
    ]
    for argv, msg in cases:
        assert main([*argv, "--out", str(tmp_path / "never")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], (argv, err)
    assert not (tmp_path / "never").exists()


def test_the_paper_tables_name_their_main_claims():
    """Every paper table with paired seeds names a main claim; the tour and the
    diagnostics do not."""
    have = set(CLAIMS)
    assert {"appeal-flexible", "appeal-unseen", "expalpha-flip", "selection-compare",
            "hetero-fednova", "hetero-fedbuff"} <= have
    assert not {"tour", "mean-estimation", "appeal-tune", "expalpha-gaps"} & have
    # the IncFL reading's example: the appeal claim reads the report's paired row
    c = CLAIMS["appeal-unseen"]
    data = {"paired": [{"column": "other", "metric": "gm_appeal_unseen", "seeds": [0],
                        "diff": [9.0]},
                       {"column": "TMLR (cohort 5, 30% flipped)", "metric": "gm_appeal_unseen",
                        "seeds": [0, 1, 2], "diff": [0.01, 0.03, None],
                        "paper_effect": 0.47}]}
    vals = c.values(data, [0, 1, 2])
    assert vals[0] == 0.01 and vals[1] == 0.03 and math.isnan(vals[2])
    assert c.paper_of(data) == 0.47 and c.want == "+"
    # IncFL Fig. 2 has no arm numbers; its text's "at least 5% more clients" sizes the claim
    inc = CLAIMS["incfl-synthetic"]
    row = {"column": "train ratio 40%", "metric": "gm_appeal_seen", "seeds": [0],
           "diff": [0.01], "paper_effect": None}
    assert inc.paper_of({"paired": [row]}) == 0.05
    assert inc.paper_of({"paired": [{**row, "column": "train ratio 80%"}]}) is None
    # selection: the paper's SubTrunc − DivFL on MNIST, 7.96 − 8.89
    assert CLAIMS["selection-compare"].paper == pytest.approx(-0.93)
    assert CLAIMS["selection-compare"].want == "-"


def test_runs_claims_pair_runs_by_seed():
    c = runs_claim("runs/a", "runs/b", lambda r, data: r["v"], "-", "a − b")
    data = {"runs": {"a": [{"seed": 0, "v": 3.0}, {"seed": 1, "v": None},
                           {"seed": 2, "v": 1.0}],
                     "b": [{"seed": 2, "v": 4.0}, {"seed": 0, "v": 1.0},
                           {"seed": 1, "v": 1.0}]}}
    vals = c.values(data, [0, 1, 2])
    assert vals[0] == 2.0 and vals[2] == -3.0 and math.isnan(vals[1])
    assert c.values({"runs": {}}, [0]) is None
    # Exp-α: rounds to the highest target; never reached counts as rounds + 1
    from papers.expalpha.tables import rounds_to_top

    d = {"targets": [0.7, 0.8], "schedule": {"rounds": 100}}
    assert rounds_to_top({"reach": {"70": 4, "80": None}}, d) == 101
    assert rounds_to_top({"reach": {"70": 4, "80": 18}}, d) == 18


def test_a_context_without_a_design_writes_as_before(tmp_path):
    ctx = reproduce.Context("t", [0], tmp_path / "plain")
    ctx.write({"results.json": {"a": 1}, "table.md": "# t\n"})
    res = json.loads((tmp_path / "plain" / "results.json").read_text())
    assert "seeds_until_decided" not in res and "cost" in res


def test_every_main_claim_reads_its_committed_report():
    """Each main claim finds its per-seed differences in the committed report of its
    table, one per seed the report ran; Exp-α's (read from the per-run records) agree with
    the report's own paired row (acc80, FedAvg: its mean and per-seed signs)."""
    from pathlib import Path

    from papers.scorecard import seeds_in

    root = Path(__file__).resolve().parent.parent / "results"
    for name, claim in CLAIMS.items():
        data = json.loads((root / name / "results.json").read_text())
        seeds = data.get("seeds") or sorted(seeds_in(data))
        vals = claim.values(data, seeds)
        assert vals is not None and sorted(vals) == sorted(seeds), name
        assert all(math.isfinite(v) for v in vals.values()), name
    data = json.loads((root / "expalpha-flip" / "results.json").read_text())
    row = next(r for r in data["summary"]
               if r["backbone"] == "FedAvg" and r["metric"] == "acc80 (rounds)")
    vals = CLAIMS["expalpha-flip"].values(data, data["seeds"])
    d = [vals[s] for s in data["seeds"]]
    assert f"{sum(d) / len(d):+.1f}" == row["Δ Exp-α − prop"].split()[0]
    assert "".join("−" if x < 0 else "+" if x > 0 else "0" for x in d) == row["per-seed sign"]
