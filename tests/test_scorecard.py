"""`reproduce all` and the scorecard (`papers.scorecard`, `papers.tour.logic`): the size
column counted beside the direction, the ETA from a report's cost, and the whole command
on stand-in tables (no JAX: each table's per-seed difference is a function of the seed)."""

from __future__ import annotations

import json

import pytest

from fedjax_appeal.cli.commands import main
from papers import reproduce
from papers.decide import record_claim
from papers.reproduce import EXPERIMENTS, load_modules
from papers.scorecard import cost_text, duration, estimate, scorecard_markdown
from papers.tour import logic

load_modules()

CARD = """
| claim | ours | held? | size | why |
| --- | --- | --- | --- | --- |
| A | +0.1 | **held** (10 seeds) | consistent with the paper's size (+0.12) | - |
| B | +0.006 | inconclusive | smaller than the paper's +0.47, excluded at 95% | - |
| C | -0.3 | reversed | smaller than the paper's +0.2, excluded at 95% | - |
| D | +3 | held | larger than the paper's +1.0, excluded at 95% | - |
| E | +1 | held | — (no paper number) | - |
| F | level | — | consistent | not a direction: not counted |

| claim | held | why |
| --- | --- | --- |
| G | held | no size column: counted by direction only |
"""


def test_sizes_are_counted_beside_the_direction():
    c = logic.count_scorecard(CARD)
    assert (c["held"], c["inconclusive"], c["reversed"], c["rows"]) == (4, 1, 1, 6)
    s = logic.count_sizes(CARD)
    # A consistent; B, C smaller; D larger; E none; F has no direction; G no size column
    assert s == {"consistent": 1, "smaller": 2, "larger": 1, "none": 1, "rows": 5}
    assert logic.size_of_cell("**Smaller** than the paper's") == "smaller"
    assert logic.size_of_cell("inconsistently") == "none"  # whole words only
    line = logic.scorecard_line(c, "X", s)
    assert "4 rows held, 1 inconclusive, 1 reversed" in line
    assert ("size: 1 consistent with the paper's, 2 smaller, 1 larger, 1 without a size "
            "verdict") in line
    assert "size" not in logic.scorecard_line(c, "X")  # without sizes: as before
    assert logic.count_sizes("no table")["rows"] == 0


def test_the_scorecard_file_counts_both_verdicts():
    rows = [{"table": "t1", "claim": "a − b", "want": "+", "seeds": 20, "mean": 0.006,
             "interval": [-0.026, 0.038], "interval_kind": "95% repeated",
             "verdict": "inconclusive", "paper_effect": 0.47, "size": "smaller",
             "wall_s": 3700.0},
            {"table": "t2", "claim": "c − d", "want": "-", "seeds": 10, "mean": -8.0,
             "interval": [-12.5, -3.5], "interval_kind": "95% t", "verdict": "held",
             "paper_effect": None, "size": None, "wall_s": 42.0},
            {"table": "t3", "claim": "e − f", "failed": "ConfigError: no data"}]
    md = scorecard_markdown(rows, "card")
    assert "| t1 | a − b (+) | 20 | +0.006 [-0.026, +0.038] (95% repeated) | inconclusive " \
           "| smaller than the paper's +0.470, excluded at 95% | 1 h 02 min |" in md
    assert "| t2 | c − d (-) | 10 | -8 [-12.5, -3.5] (95% t) | held | no paper number " \
           "| 42 s |" in md
    assert "not run (ConfigError: no data)" in md
    head = md.splitlines()[2]
    assert "1 rows held, 1 inconclusive" in head and "0 consistent" in head
    assert "1 smaller, 0 larger, 1 without a size verdict" in head
    assert duration(None) == "unknown" and duration(59.4) == "59 s"
    assert duration(60 * 61) == "1 h 01 min" and duration(600) == "10 min"
    assert cost_text({"wall_s": 14.2, "runs": {"computed": 1, "cached": 49}}) == (
        "14 s (49 of 50 runs from the run cache)")
    assert cost_text({"wall_s": 600.0, "runs": {"computed": 30, "cached": 0}}) == "10 min"
    assert cost_text({"wall_s": None, "runs": {"computed": 0, "cached": 5}}) == "unknown"


def test_the_eta_comes_from_the_reports_cost(tmp_path):
    # a report on 3 seeds that took 900 s for 30 computed runs, 10 more read from the
    # cache: 30 s a run, 40 runs for 3 seeds; 10 seeds: 40 * 30 * 10 / 3 = 4000 s
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "results.json").write_text(json.dumps(
        {"seeds": [0, 1, 2], "cost": {"time": {"wall": 900.0},
                                      "runs": {"computed": 30, "cached": 10}}}))
    s, src = estimate("t", 10, 3, tmp_path)
    assert s == pytest.approx(4000.0) and "its report's cost" in src
    # no cost: per-run timings (rounds x s/round + evaluation etc.), runs found by seed
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "results.json").write_text(json.dumps(
        {"runs": [{"seed": 0, "final": {"round": 100},
                   "timing": {"sec_per_round": 0.5, "eval_total_s": 2.0, "compile_s": 3.0}},
                  {"seed": 1, "history": [{"round": 50}], "sec_per_round": 1.0}]}))
    s, src = estimate("u", 4, 3, tmp_path)
    # (0.5 * 100 + 2 + 3) + 1.0 * 50 = 105 s on 2 seeds: 210 s on 4
    assert s == pytest.approx(210.0) and "per-run timings" in src
    assert estimate("absent", 10, 3, tmp_path) == (None, "no committed report")


@pytest.fixture
def toys(monkeypatch, tmp_path):
    """Two stand-in tables with main claims (and nothing else in `reproduce all`)."""
    calls = []

    def table(diff_of):
        def fn(ctx):
            calls.append((ctx.name, list(ctx.seeds)))
            ctx.write({"table.md": "# toy\n", "results.json": {
                "seeds": list(ctx.seeds),
                "paired": {"d": {"diffs": [diff_of(s) for s in ctx.seeds]}}}})
        return fn

    claims = {"toy-a": record_claim("paired/d", "+", "a − b", paper=0.5),
              "toy-b": record_claim("paired/d", "-", "c − d")}
    monkeypatch.setattr(reproduce, "CLAIMS", claims)
    monkeypatch.setitem(EXPERIMENTS, "toy-a", (table(lambda s: 1.0 + 0.1 * (s % 3)), "a"))
    monkeypatch.setitem(EXPERIMENTS, "toy-b", (table(lambda s: (1.0 if s % 2 else -1.0)),
                                                "b"))
    monkeypatch.setenv("FEDJAX_APPEAL_CACHE", str(tmp_path / "cache"))
    return calls


def test_reproduce_all_runs_every_table_and_writes_the_scorecard(toys, tmp_path, capsys):
    out = tmp_path / "all"
    assert main(["reproduce", "all", "--seeds", "auto:20", "--out", str(out)]) == 0
    # toy-a decided at its first look (10 seeds); toy-b, no effect, runs to 20
    assert toys == [("toy-a", list(range(10))), ("toy-b", list(range(10))),
                    ("toy-b", list(range(20)))]
    screen = capsys.readouterr().out
    assert "reproduce all: 2 tables into" in screen
    assert "[1/2] toy-a: estimated unknown" in screen and "[2/2] toy-b" in screen
    card = (out / "scorecard.md").read_text()
    assert "| toy-a | a − b (+) | 10 |" in card and "| held | larger than the paper's " \
        "+0.500, excluded at 95% |" in card
    assert "| toy-b | c − d (-) | 20 |" in card and "| inconclusive | no paper number |" \
        in card
    rows = json.loads((out / "scorecard.json").read_text())["rows"]
    assert [r["verdict"] for r in rows] == ["held", "inconclusive"]
    assert (out / "toy-a" / "table.md").is_file() and (out / "toy-b" / "results.json").is_file()
    # fixed seeds: the t interval of each table's main claim decides its row
    assert main(["reproduce", "all", "--seeds", "0,1,2,3,4,5", "--out", str(tmp_path / "f")]) \
        == 0
    rows = json.loads((tmp_path / "f" / "scorecard.json").read_text())["rows"]
    assert [(r["seeds"], r["interval_kind"]) for r in rows] == [(6, "95% t"), (6, "95% t")]
    assert rows[0]["verdict"] == "held" and rows[0]["size"] == "larger"


def test_reproduce_all_plan_and_refusals(toys, tmp_path, capsys):
    assert main(["reproduce", "all", "--plan", "--out", str(tmp_path / "p")]) == 0
    assert toys == [] and not (tmp_path / "p").exists()  # nothing run, nothing written
    assert "estimated total" in capsys.readouterr().out
    for argv, msg in ((["--set", "profile=cpu"], "takes no --set"),
                      (["--robustness"], "--robustness reruns one table")):
        assert main(["reproduce", "all", *argv, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0]
    assert main(["reproduce", "toy-a", "--plan", "--out", str(tmp_path / "x")]) == 2
    assert "--plan goes with `reproduce all`" in capsys.readouterr().err


def test_the_committed_scorecard_reads_the_reports_with_the_most_seeds(toys, tmp_path,
                                                                       monkeypatch, capsys):
    from papers import scorecard

    res = tmp_path / "results"
    for folder, diffs in (("toy-a", [1.0, 1.1, 1.2]), ("toy-a-10", [1.0, 1.1, 1.2] * 3 + [1.1]),
                          ("toy-b-old", [-1.0, -2.0, -3.0])):
        (res / folder).mkdir(parents=True)
        (res / folder / "results.json").write_text(json.dumps(
            {"seeds": list(range(len(diffs))), "paired": {"d": {"diffs": diffs}},
             "cost": {"time": {"wall": 125.0}}}))
    monkeypatch.setattr(scorecard, "RESULTS", res)
    rows = scorecard.committed_rows(res)
    # toy-a: the 10-seed rerun wins over the 3-seed report; toy-b-old is not toy-b's folder
    assert rows[0]["folder"] == "toy-a-10" and rows[0]["seeds"] == 10
    assert rows[0]["mean"] == pytest.approx(1.1) and rows[0]["wall_s"] == 125.0
    assert rows[1] == {"table": "toy-b", "claim": "c − d", "failed": "no committed report"}
    (res / "toy-a-10" / "results.json").unlink()
    row = scorecard.committed_rows(res)[0]
    # 3 seeds: mean 1.1, sd 0.1, t(2, 0.975) = 4.3027: 1.1 ± 0.2484
    assert row["folder"] == "toy-a" and row["interval"] == pytest.approx(
        [1.1 - 0.24841, 1.1 + 0.24841], abs=1e-4)
    assert row["verdict"] == "held" and row["size"] == "larger"  # paper +0.5
    assert row["robust"] is None  # no robustness rerun
    # a rerun at two shared lrs: [1.0, 1.1, 1.2] held; [1, -1, 1] (t interval wide) not
    (res / "toy-a" / "robustness.json").write_text(json.dumps({"verdicts": [
        {"path": "other/d", "per_lr": {"0.5": {"diffs": [1.0, 1.1, 1.2]}}},
        {"path": "paired/d", "per_lr": {"0.1": {"diffs": [1.0, 1.1, 1.2]},
                                        "0.01": {"diffs": [1.0, -1.0, 1.0]}}}]}))
    row = scorecard.committed_rows(res)[0]
    assert row["robust"] == "held at 1 of 2 shared lrs (3 seeds)" and row["verdict"] == "held"
    (res / "toy-a" / "robustness.json").write_text(json.dumps({"verdicts": [
        {"path": "paired/d", "per_lr": {"0.1": {"diffs": [1.0, -1.0, 1.0]}}}]}))
    row = scorecard.committed_rows(res)[0]  # held at the table's lrs, at no shared lr
    assert row["robust"] == "held at 0 of 1 shared lrs (3 seeds)"
    assert row["verdict"] == "held at tuned lrs only"
    # a 10-seed rerun with its own robustness check: the row reads that one, not the 3-seed one
    ten = [1.0, 1.1, 1.2] * 3 + [1.1]
    (res / "toy-a-10" / "results.json").write_text(json.dumps(
        {"seeds": list(range(10)), "paired": {"d": {"diffs": ten}}}))
    (res / "toy-a-10" / "robustness.json").write_text(json.dumps({"verdicts": [
        {"path": "paired/d", "per_lr": {"0.1": {"diffs": ten}, "0.01": {"diffs": ten}}}]}))
    row = scorecard.committed_rows(res)[0]
    assert row["folder"] == "toy-a-10" and row["robust"] == "held at 2 of 2 shared lrs (10 seeds)"
    assert row["verdict"] == "held"
    # ten equal differences: no spread, so the sign-flip interval decides and is named;
    # with 10 seeds it is the point 0 (every shift but 0 has p = 2 / 2^10): inconclusive,
    # and a paper effect of +0.5 lies outside it
    (res / "toy-a-10" / "results.json").write_text(json.dumps(
        {"seeds": list(range(10)), "paired": {"d": {"diffs": [0.0] * 10}}}))
    row = scorecard.committed_rows(res)[0]
    assert row["interval_kind"] == "95% sign-flip" and row["interval"] == [0.0, 0.0]
    assert row["verdict"] == "inconclusive" and row["size"] == "smaller"
    for f in ("results.json", "robustness.json"):
        (res / "toy-a-10" / f).unlink()
    (res / "toy-a" / "robustness.json").unlink()
    assert main(["reproduce", "all", "--from-results"]) == 0
    card = (res / "scorecard.md").read_text()
    assert "| toy-a | a − b (+) | 3 | +1.1 [+0.852, +1.35] (95% t) | held | larger" in card
    assert "| toy-b | c − d | — | — | not run (no committed report) | — | — | — |" in card
    assert toys == []  # nothing ran
    capsys.readouterr()
    assert main(["reproduce", "all", "--from-results", "--seeds", "0,1"]) == 2
    assert "runs nothing" in capsys.readouterr().err
    assert main(["reproduce", "toy-a", "--from-results"]) == 2


def test_the_readme_block_of_the_main_claims_is_the_committed_reports_scorecard():
    """results/README.md's table of the main claims is what `reproduce all --from-results`
    writes from the committed reports (rebuild it after committing a report)."""
    from papers import scorecard

    readme = (scorecard.RESULTS / "README.md").read_text()
    md = scorecard.committed_markdown(scorecard.committed_rows(scorecard.RESULTS))
    assert scorecard.with_main_claims(readme, md) == readme, \
        "stale: run fedjax-appeal reproduce all --from-results"
    assert logic.count_scorecard(readme)["rows"] == len(reproduce.CLAIMS)
    assert logic.count_sizes(readme)["rows"] == len(reproduce.CLAIMS)
