"""benchmarks/_common.py and plain_command.py: where a section lands in RESULTS.md (above
the dated history), and the plain-command table (ratios to the plain command, the layout
chosen) from a hand-made result."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def bench(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    common = importlib.import_module("_common")
    plain = importlib.import_module("plain_command")
    md = tmp_path / "RESULTS.md"
    monkeypatch.setattr(common, "RESULTS_MD", md)
    yield common, plain, md
    for name in ("plain_command",):
        sys.modules.pop(name, None)


def test_section_goes_above_the_history(bench):
    common, _, md = bench
    md.write_text("# Benchmark results\n\n## current — 2026-11-26\n\nA\n\n"
                  f"{common.HISTORY}\n# History\n\n## old — 2026-11-23\n\nB\n")
    common.append_results("new", "| x |\n|---|\n| 1 |")
    text = md.read_text()
    assert text.index("## current") < text.index("## new") < text.index(common.HISTORY)
    assert text.index(common.HISTORY) < text.index("## old")
    assert text.count("## new") == 1


def test_section_appended_without_history(bench):
    common, _, md = bench
    md.write_text("# Benchmark results\n\n## a — 2026-11-20\n\nA\n")
    common.append_results("b", "T")
    text = md.read_text()
    assert text.index("## a") < text.index("## b") and text.rstrip().endswith("T")


def _stats(xs):
    xs = sorted(xs)
    return {"min": xs[0], "median": xs[len(xs) // 2], "n": len(xs)}


def test_plain_table_ratios_and_top_replacement(bench):
    common, plain, md = bench
    row = {"cohort": 100,
           "sides": {"plain": _stats([0.5, 0.6, 0.7]), "manual": _stats([1.0, 1.2, 1.4]),
                     "fedjax": _stats([2.4, 3.0, 3.3])},
           "wall": {"plain": _stats([10, 11, 12]), "manual": _stats([20, 21, 22])},
           "eval": {"plain": _stats([0.1, 0.1, 0.1]), "manual": _stats([0.2, 0.2, 0.2])},
           "ratio": {"plain": 1.0, "manual": 1.2 / 0.6, "fedjax": 3.0 / 0.6},
           "layout": {"devices": 2, "client_lanes": 1}}
    result = {"machine": "test box", "workload": "W", "repeats": 3, "rows": [row],
              "command": "python benchmarks/plain_command.py"}
    table = plain.render(result)
    assert "| 100 | 2 device(s), lanes 1 |" in table
    assert "0.500 / 0.600; 1.00×" in table and "1.000 / 1.200; 2.00×" in table
    assert "2.400 / 3.000; 5.00×" in table and "PyTorch" not in table
    assert "manual (one device) 0.200 s" in table
    md.write_text("# Benchmark results\n\n## kept — 2026-11-23\n")
    plain.write_top(table)
    plain.write_top(table.replace("5.00×", "4.00×"))  # replaced, not added twice
    text = md.read_text()
    assert text.count(plain.TOP_BEGIN) == 1 and "4.00×" in text and "5.00×" not in text
    assert text.index(plain.TOP_END) < text.index("## kept")


def test_plain_table_names_each_torch_variant_after_the_fixed_sides(bench):
    _, plain, _ = bench
    row = {"cohort": 1000,
           "sides": {"plain": _stats([0.02, 0.02, 0.02]),
                     "torch_graph": _stats([0.04, 0.05, 0.06]),
                     "torch": _stats([9.0, 9.5, 10.0]),
                     "torch_batched": _stats([0.08, 0.09, 0.1])},
           "wall": {"plain": _stats([10, 11, 12]), "manual": _stats([20, 21, 22])},
           "eval": {"plain": _stats([0.1, 0.1, 0.1]), "manual": _stats([0.2, 0.2, 0.2])},
           "ratio": {"plain": 1.0, "torch_graph": 2.5, "torch": 475.0, "torch_batched": 4.5},
           "layout": {"devices": 1, "client_lanes": 0}}
    table = plain.render({"machine": "m", "workload": "W", "repeats": 3, "rows": [row],
                          "command": "c"})
    head = next(line for line in table.splitlines() if line.startswith("| cohort"))
    order = [head.index(s) for s in ("`fedjax-appeal run` (plain)", "PyTorch loop",
                                     "PyTorch: torch batched weights + CUDA graph",
                                     "PyTorch: torch batched weights (bmm, hand backward)")]
    assert order[0] < order[1] < min(order[2:])  # fixed sides first, in LABELS order
    assert "0.040 / 0.050; 2.50×" in table and "0.080 / 0.090; 4.50×" in table
    assert plain.torch_side("loop") == "torch" and plain.torch_side("graph") == "torch_graph"


def test_the_recorded_command_names_no_folder_of_the_machine(bench, monkeypatch):
    common, _, _ = bench
    monkeypatch.setattr(sys, "argv", [str(BENCH / "divfl_floor.py"), "--json", "/a/b/c.json",
                                      "--out=/x/y", "rel/d.json", "--repeats", "3"])
    got = common.command()
    assert got.endswith("divfl_floor.py --json c.json --out=y rel/d.json --repeats 3"), got
    assert "/a/" not in got and "/x/" not in got
