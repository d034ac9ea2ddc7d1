"""benchmarks/cnn_core_scaling.py: the machine rate from its processes' timings, the table's
per-core and scaling columns (hand-computed), and one worker's program."""

from __future__ import annotations

import pytest


@pytest.fixture()
def scaling(bench_script):
    return bench_script("cnn_core_scaling")


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
    rate = lambda r, b, f=1e9: {"steps_per_s": r, "steps_per_s_best": b, "step_flops": f}
    rows = {("femnist", "one core"): rate(50.0, 60.0),
            ("femnist", "one process per core"): rate(80.0, 90.0),
            ("femnist", "torch, one core"): rate(24.0, 26.0, None),
            ("femnist", "torch, one process per core"): rate(40.0, 44.0, None)}
    lines = scaling.table(rows, 2).splitlines()
    # one core: 1000 / 50 = 20 ms per step on its one core, 50 / (2 x 50) of perfect
    # scaling, 50 / 40 = 1.25x torch's one process per core
    assert lines[2] == "| femnist | one core | 50.0; 60.0 | 20.0 | 0.50 | 1.25× | 50.0 |"
    # two cores in use: 2000 / 80 = 25 ms per step per core, 80 / 100 = 0.80, 80 / 40 = 2x
    assert lines[3] == ("| femnist | one process per core | 80.0; 90.0 | 25.0 | 0.80 | 2.00× | "
                        "80.0 |")
    # torch rows: scaled by torch's own one-core rate, FLOPs of the workload's one-core row
    # (1000 / 24 = 41.7 ms, 40 / 48 = 0.83 of perfect scaling)
    assert lines[4] == "| femnist | torch, one core | 24.0; 26.0 | 41.7 | 0.50 | 0.60× | 24.0 |"
    assert lines[5] == ("| femnist | torch, one process per core | 40.0; 44.0 | 50.0 | 0.83 | "
                        "1.00× | 40.0 |")
    # without the peer's rows the ratio column says so
    no_peer = scaling.table({("femnist", "one core"): rate(50.0, 60.0)}, 2).splitlines()
    assert no_peer[2] == "| femnist | one core | 50.0; 60.0 | 20.0 | 0.50 | — | 50.0 |"


def test_worker_runs_the_local_steps(scaling):
    out = scaling.worker("one device, all cores", "femnist", steps=2, repeats=1, cores=1)
    assert out["devices"] == 1 and len(out["secs"]) == 1 and out["secs"][0] > 0
    # simple_cnn's step on 10 FEMNIST rows: the second convolution's three products are at
    # least 2 x 36 x (10 x 6 x 6) x 32 x 64 = 53.1 MFLOP each (Winograd F(4x4, 3x3), the CPU
    # default; 212 MFLOP with im2col), the dense layer's 2 x 10 x 9216 x 128 = 23.6 MFLOP each
    assert out["step_flops"] > 3 * 53.1e6 + 3 * 23.6e6
