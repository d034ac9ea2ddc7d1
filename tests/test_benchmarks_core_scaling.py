"""benchmarks/cnn_core_scaling.py: the machine rate from its processes' timings, the table's
per-core and scaling columns (hand-computed), and one worker's program."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def scaling(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    yield importlib.import_module("cnn_core_scaling")
    sys.modules.pop("cnn_core_scaling", None)


def test_rates_of_concurrent_processes_add(scaling):
    # two processes of one device, 50 steps per call: medians 0.5 s and 1.0 s -> 100 + 50
    outs = [{"devices": 1, "secs": [0.6, 0.5, 0.4], "step_flops": 2e8},
            {"devices": 1, "secs": [1.0, 1.2, 0.8], "step_flops": 2e8}]
    r = scaling.machine_rate(outs, 50)
    assert r["steps_per_s"] == pytest.approx(150.0)
    assert r["steps_per_s_best"] == pytest.approx(50 / 0.4 + 50 / 0.8)
    # one process of two devices: each call runs 50 steps on both
    r2 = scaling.machine_rate([{"devices": 2, "secs": [1.0], "step_flops": 1.0}], 50)
    assert r2["steps_per_s"] == pytest.approx(100.0)


def test_table_columns_by_hand(scaling):
    rows = {("femnist", "one core"): {"steps_per_s": 50.0, "steps_per_s_best": 60.0,
                                      "step_flops": 1e9},
            ("femnist", "one process per core"): {"steps_per_s": 80.0,
                                                  "steps_per_s_best": 90.0,
                                                  "step_flops": 1e9}}
    lines = scaling.table(rows, 2).splitlines()
    # one core: 1000 / 50 = 20 ms per step on its one core, 50 / (2 x 50) of perfect scaling
    assert lines[2] == "| femnist | one core | 50.0; 60.0 | 20.0 | 0.50 | 50.0 |"
    # two cores in use: 2000 / 80 = 25 ms per step per core, 80 / 100 = 0.80
    assert lines[3] == "| femnist | one process per core | 80.0; 90.0 | 25.0 | 0.80 | 80.0 |"


def test_worker_runs_the_local_steps(scaling):
    out = scaling.worker("one device, all cores", "femnist", steps=2, repeats=1, cores=1)
    assert out["devices"] == 1 and len(out["secs"]) == 1 and out["secs"][0] > 0
    # simple_cnn's step on 10 FEMNIST rows: the second convolution alone is
    # 2 x 10 x 24 x 24 x (3 x 3 x 32) x 64 = 212 MFLOP forward
    assert out["step_flops"] > 3 * 212e6
