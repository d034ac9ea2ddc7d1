"""`reproduce tour`: its paired verdicts, the scorecard count and the screen block on
hand-made numbers, and one end-to-end run with the tiny schedule (files written, at most
40 lines on screen)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from papers.tour import logic
from papers.tour.specs import EXPALPHA, FAMILIES, SELECTION

ROOT = Path(__file__).resolve().parent.parent


def test_paired_verdict_comes_from_the_intervals_not_from_the_signs():
    seeds = range(10)
    first = {s: 0.80 + 0.01 * s for s in seeds}
    second = {s: 0.78 + 0.01 * s for s in reversed(seeds)}  # matched by seed, not order
    v = logic.paired_verdict(first, second, "+")
    assert v["diffs"] == pytest.approx([0.02] * 10) and v["signs"] == "+" * 10
    assert v["verdict"] == "held" and v["held"] and v["toward"] == 10
    assert logic.paired_verdict(first, second, "-")["verdict"] == "reversed"
    # every sign agrees, but three seeds cannot decide: the sign-flip interval is the line
    three = logic.paired_verdict({0: 0.8, 1: 0.7, 2: 0.9}, {0: 0.7, 1: 0.6, 2: 0.8}, "+")
    assert three["signs"] == "+++" and three["verdict"] == "inconclusive"
    assert not three["held"]
    # 9 of 10 seeds on the paper's side, one far on the other: inconclusive
    mixed = logic.paired_verdict({s: (1.0 if s else -20.0) for s in seeds},
                                 {s: 0.0 for s in seeds}, "+")
    assert mixed["toward"] == 9 and mixed["verdict"] == "inconclusive"
    assert logic.paired_verdict({}, {}, "+")["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="want must be"):
        logic.paired_verdict(first, second, "up")
    line = logic.verdict_line(v, 100, 1)
    assert line.startswith("held: mean +2.0, 95% t [+2.0, +2.0], sign-flip [+2.0, +2.0]")
    assert line.endswith("10 of 10 seeds in the paper's direction")


def test_held_at_counts_the_lrs_whose_verdict_is_held():
    up = {s: 2.0 + 0.1 * s for s in range(8)}
    flat = {s: 1.0 for s in range(8)}
    grid = {0.01: logic.paired_verdict(up, flat, "+"),
            0.05: logic.paired_verdict({s: 1.0 + (0.5 if s % 2 else -0.5) for s in range(8)},
                                       flat, "+"),
            0.1: logic.paired_verdict(up, flat, "+")}
    assert logic.held_at(grid) == (2, 3)


SCORECARD = """# Results

| table | ours | held? | why |
| --- | --- | --- | --- |
| T1 | +0.1 | **held** (all 3 seeds) | not held before the fix |
| T2 | +0.0 | direction **held** (3/3); size **not** | - |
| T3 | −0.2 | **not held** | ... |
| T4 | +0.3 | held at tuned lrs only (not at a shared lr) | ... |
| T5 | — | — | not held |
| T6 | +0.1 | 5%: **held**; 10%: GM-Appeal **not held** | |
| T7 | +0.1 | **inconclusive** (3 seeds; was: held) | |
| T8 | −0.3 | **reversed** (10 seeds) | inconclusive before |

Text between tables: not held, held.

| claim | ours | held / not | why |
| --- | --- | --- | --- |
| C1 | x | not held (direction in 4 of 5 seeds) | held in the mean |
| C2 | x | Random: held; PoC: not held | |

| folder | headline (not held) |
| --- | --- |
| a | held |
"""


def test_scorecard_counts_the_held_column_by_its_leftmost_phrase():
    c = logic.count_scorecard(SCORECARD)
    # held: T1, T2, T6, C2; not held: T3, C1; tuned only: T4; inconclusive: T7; reversed:
    # T8; T5 names none; the last table has no "held" column, other columns never count
    assert c == {"held": 4, "tuned_only": 1, "inconclusive": 1, "reversed": 1,
                 "not_held": 2, "rows": 9}
    assert logic.row_verdict("**Not Held** (ties)") == "not held"
    assert logic.row_verdict("withheld") is None  # whole words only
    assert logic.count_scorecard("no tables here") == {
        "held": 0, "tuned_only": 0, "inconclusive": 0, "reversed": 0, "not_held": 0,
        "rows": 0}
    line = logic.scorecard_line(c, "results/README.md")
    assert ("4 rows held, 1 held at tuned lrs only, 1 inconclusive, 1 reversed, 2 not held"
            in line)
    assert "not found" in logic.scorecard_line(None, "results/README.md")


def test_the_real_scorecard_has_rows_of_every_verdict_it_names():
    c = logic.count_scorecard((ROOT / "results" / "README.md").read_text())
    assert c["rows"] > 0
    assert c["rows"] == sum(v for k, v in c.items() if k != "rows")


def test_throughput_counts_client_steps_over_training_time():
    g = [{"runs": 3, "rounds": 10, "cohort": 5, "local_steps": 2, "run_s": 2.0,
          "compile_s": 5.0, "eval_s": 1.0},
         {"runs": 1, "rounds": 10, "cohort": 10, "local_steps": 1, "run_s": 3.0,
          "compile_s": 4.0, "eval_s": 0.5}]
    t = logic.throughput(g)
    assert t["client_steps"] == 3 * 10 * 5 * 2 + 10 * 10
    assert t["client_steps_per_s"] == pytest.approx(400 / 5.0)
    assert t["rounds_per_s"] == pytest.approx(40 / 5.0)
    assert t["compile_s"] == 9.0 and t["runs"] == 4


def test_family_block_shows_values_signed_differences_and_the_verdict():
    a, b = EXPALPHA.arms[0][0], EXPALPHA.arms[1][0]
    vals = {a: {0: 0.81, 1: 0.80, 2: 0.83}, b: {0: 0.80, 1: 0.82, 2: 0.81}}
    v = logic.paired_verdict(vals[a], vals[b], EXPALPHA.want)
    lines = logic.family_lines(1, 3, EXPALPHA, "a setting", vals, v, [0, 1, 2], 0.05)
    assert lines[0].startswith("1/3 Exp-α vs proportional")
    diff = next(x for x in lines if x.strip().startswith("difference"))
    assert "+1.0" in diff and "-2.0" in diff and "+2.0" in diff
    verdict = next(x for x in lines if x.strip().startswith("→"))
    # +1, -2, +2 pp: mean +0.33, sd 2.08, t half-width 4.303 * 2.082 / sqrt(3) = 5.17; three
    # seeds: the sign-flip interval is the whole line, printed as n/a
    assert verdict.strip().startswith("→ inconclusive: mean +0.3, 95% t [-4.8, +5.5], "
                                      "sign-flip n/a (needs at least 6 seeds)")
    assert "2 of 3 seeds in the paper's direction" in verdict
    assert "client lr 0.05 for both arms" in lines[2]
    c, d = SELECTION.arms[0][0], SELECTION.arms[1][0]
    seeds = list(range(6))
    vs = {c: {s: 0.1 + 0.01 * s for s in seeds}, d: {s: 0.01 * s for s in seeds}}
    lines = logic.family_lines(3, 3, SELECTION, "s", vs, logic.paired_verdict(
        vs[c], vs[d], "-"), seeds, 0.05, second=vs, grid_held=(2, 3))
    assert "→ reversed" in lines[-3]  # DivFL 0.1 above Random in every seed: the other side
    assert lines[-2].strip().startswith("test acc. (pp) DivFL − Random: mean +10.0")
    assert lines[-1].endswith("held at 2 of 3 (table.md)")
    assert len(FAMILIES) == 3 and {f.want for f in FAMILIES} <= {"+", "-"}


def test_tour_refuses_one_seed_and_a_bad_tiny_value_in_one_line():
    from fedjax_appeal import ConfigError
    from papers.reproduce import Context, load_modules
    from papers.tour.tour import tour

    load_modules()
    with pytest.raises(ConfigError, match="at least two seeds"):
        tour(Context("tour", [0], Path("unused")))
    with pytest.raises(ConfigError, match="give 1/true/yes/on"):
        tour(Context("tour", [0, 1], Path("unused"), options={"tiny": "maybe"}))


@pytest.mark.slow
@pytest.mark.data
def test_tour_end_to_end_tiny_writes_its_files_in_at_most_40_lines(tmp_path):
    from tests.conftest import shared_data_dir

    out = tmp_path / "tour"
    env = {**os.environ, "FEDJAX_APPEAL_DATA": shared_data_dir(),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "fedjax_appeal", "reproduce", "tour",
                        "--set", "tiny=1", "--out", str(out),
                        "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    screen = (p.stdout + p.stderr).splitlines()
    assert p.returncode == 0, p.stderr[-2000:]
    # the lines of the tour itself; a step that lasts 10 s adds a progress line (as many
    # as the machine is slow), which says how long it has run so far
    screen = [x for x in screen if not re.search(r": \d+(\.\d)? (s|min|h) so far", x)]
    assert len(screen) <= 40, "\n".join(screen)
    assert sum(x.strip().startswith(("→ held", "→ inconclusive", "→ reversed"))
               for x in screen) == 3
    assert any(x.startswith("time: ") and "compile" in x and "other" in x for x in screen)
    assert any(x.startswith("throughput:") and "client-steps/s" in x for x in screen)
    assert any(x.startswith("layout:") for x in screen)
    assert any(x.startswith("scorecard") and "held at tuned lrs only" in x for x in screen)
    assert not any(x.startswith("- ") and "client_lr=" in x for x in screen)  # dumps in file
    res = json.loads((out / "results.json").read_text())
    assert res["tiny"] and res["layout"]["devices"] >= 1
    for fam in FAMILIES:
        rec = res["families"][fam.key]
        for arm, _ in fam.arms:
            assert sorted(rec["values"][arm], key=int) == [str(s) for s in range(10)]
            assert "client_lr" in rec["settings"][arm]
        assert len(rec["paired"]["diffs"]) == 10  # the default seeds: 0..9
        assert rec["paired"]["verdict"] in ("held", "reversed", "inconclusive")
    assert len(res["families"]["maxfl"]["lr_grid"]) == 3
    table = (out / "table.md").read_text()
    assert "Settings of each arm" in table and "Shared client lr grid" in table
    assert (out / "tour.png").read_bytes()[:4] == b"\x89PNG"
