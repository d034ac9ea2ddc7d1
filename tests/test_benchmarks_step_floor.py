"""benchmarks/cnn_step_floor.py: the products it finds in simple_cnn's step (counted by hand),
the budget that 2x Flower leaves (worked by hand), and its tables' columns."""

from __future__ import annotations

import pytest


@pytest.fixture()
def floor(bench_script):
    return bench_script("cnn_step_floor")


def test_canonical_form_of_dot_general(floor):
    # [2, 3, 4] x [2, 4, 5], batch dim 0 of both, contracting lhs 2 with rhs 1
    assert floor.canonical((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))) == (2, 3, 4, 5)
    # the transposed-lhs product of a kernel gradient: [5760, 288]^T [5760, 64]
    assert floor.canonical((5760, 288), (5760, 64), (((0,), (0,)), ((), ()))) == (
        1, 288, 5760, 64)


def test_femnist_step_products_counted_by_hand(floor):
    dots = floor.step_dots("femnist", conv_impl="patches_cf_train")
    # conv1 (26x26 outputs, 3x3x1 taps, 32 filters): forward + kernel gradient (the image
    # needs no gradient); conv2 (24x24, 3x3x32, 64): forward + kernel + input gradient;
    # dense 9216 -> 128 and 128 -> 62: forward + kernel + input gradient each
    conv1 = 2 * 10 * 26 * 26 * 9 * 32
    conv2 = 2 * 10 * 24 * 24 * 288 * 64
    dense = 2 * 10 * 9216 * 128 + 2 * 10 * 128 * 62
    assert len(dots) == 2 + 3 + 6
    assert sum(d["flops"] for d in dots) == 2 * conv1 + 3 * conv2 + 3 * dense
    assert sorted(d["flops"] for d in dots)[-3:] == [conv2] * 3
    for d in dots:
        b, m, k, n = d["bmkn"]
        assert d["flops"] == 2 * b * m * k * n


def test_femnist_winograd_step_products_counted_by_hand(floor):
    """The default CPU convolution: conv2 by Winograd F(4x4, 3x3), 36 tile positions x
    (10 x 6 x 6 tiles) x 32 x 64 per product (forward, kernel and input gradient), plus
    the kernel transform G g G^T (two products with G [6, 3], and two in its gradient)."""
    dots = floor.step_dots("femnist", conv_impl="winograd_train")
    conv1 = 2 * 10 * 26 * 26 * 9 * 32
    wino = 2 * 36 * (10 * 6 * 6) * 32 * 64
    dense = 2 * 10 * 9216 * 128 + 2 * 10 * 128 * 62
    transform = [d for d in dots if (6, 3) in (d["lhs"], d["rhs"])]
    assert len(transform) == 4 and len(dots) == 4 + 2 + 3 + 6
    assert sorted(d["flops"] for d in dots if d["bmkn"][0] == 36) == [wino] * 3
    assert sum(d["flops"] for d in dots if d not in transform) == (
        2 * conv1 + 3 * wino + 3 * dense)


def test_budget_of_two_times_flower_by_hand(floor):
    row = {"ours": {"eval_every": 10, "eval_s": [0.3, 0.5, 0.4], "cohort": 10,
                    "local_steps": 10},
           "flower": {"derived_100_s": 120.0}}
    b = floor.budget(row, cores=2)
    # half of Flower's 120 s = 60 s per 100 rounds; our 10 evaluations take 10 x 0.4 = 4 s;
    # 56 s for 100 rounds of 100 client steps -> 100 / 0.56 = 178.6 steps/s; on 2 cores
    # 2000 / 178.6 = 11.2 ms per step per core
    assert b["our_evals_100_s"] == pytest.approx(4.0)
    assert b["train_s_per_round"] == pytest.approx(0.56)
    assert b["need_steps_per_s"] == pytest.approx(100 / 0.56)
    assert b["ms_per_step_per_core"] == pytest.approx(11.2)


def test_budget_over_repeats_takes_the_medians(floor):
    def row(flower_100, eval_s):
        return {"ours": {"eval_every": 10, "eval_s": eval_s, "cohort": 10, "local_steps": 10},
                "flower": {"derived_100_s": flower_100}}

    b = floor.budget([row(100.0, [0.2]), row(150.0, [0.6]), row(120.0, [0.4, 0.5])], cores=2)
    # median Flower 120 s -> 60 s; median of the evaluations 0.2, 0.6, 0.4, 0.5 = 0.45 s, x 10
    # = 4.5 s; 55.5 s for 100 rounds of 100 client steps -> 180.2 steps/s
    assert b["flower_100_s"] == 120.0 and b["repeats"] == 3
    assert b["our_evals_100_s"] == pytest.approx(4.5)
    assert b["need_steps_per_s"] == pytest.approx(100 / 0.555)


def test_tables_by_hand(floor):
    products = [{"bmkn": (1, 100, 10, 10), "flops": 2e4}, {"bmkn": (1, 10, 10, 10), "flops": 2e3}]
    within = {"products": products, "xla_s": [0.004, 0.002], "torch_s": [0.005, 0.001],
              "step_ms": 9.0, "torch_step_ms": 12.0,
              "budget": {"ms_per_step_per_core": 8.0, "need_steps_per_s": 250.0}}
    over = dict(within, xla_s=[0.006, 0.003], torch_s=None, torch_step_ms=None,
                budget={"ms_per_step_per_core": 8.0, "need_steps_per_s": 250.0})
    lines = floor.summary_table({"a": within, "b": over}, cores=2).splitlines()
    # floor = faster of each product: 4 + 1 = 5 ms (sums 6 and 6); ceiling 2 / 0.005 = 400
    assert lines[2] == ("| a | 2 (0.000) | 5.00 (6.00; 6.00) | 9.00; 12.00 | 8.00 (250) | "
                        "400 | yes |")
    # no torch: the floor is XLA's sum, 9 ms > the 8 ms budget
    assert lines[3] == "| b | 2 (0.000) | 9.00 (9.00; —) | 9.00; — | 8.00 (250) | 222 | **no** |"
    rows = floor.products_table({"a": within}).splitlines()
    assert rows[2] == "| a | 1 × 100 × 10 × 10 | 0.0 | 4.000 | 5.000 | 0.0 |"
    prof = {"a": {"profile": [{"op": "dot.1", "source": "Conv_1/dot_general", "ms": 3.0},
                              {"op": "copy", "source": "sub", "ms": 1.0}]}}
    plines = floor.profile_table(prof, top=1).splitlines()
    assert plines[2:] == ["| a | dot.1 | Conv_1/dot_general | 3.00 | 75% |",
                          "| a | all 2 operations | | 4.00 | 100% |"]
