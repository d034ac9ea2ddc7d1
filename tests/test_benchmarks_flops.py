"""benchmarks/_common.py: the FLOPs of one local SGD step (jaxpr dot count against a
hand count) and which count a benchmark reports when XLA's is missing or incomplete."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from fedjax_appeal.core.models import make_model


@pytest.fixture()
def common(bench_script):
    return bench_script("_common")


def test_pick_flops_prefers_a_complete_xla_count(common):
    assert common.pick_flops(150.0, 100.0) == (150.0, "xla cost_analysis")
    assert common.pick_flops(100.0, 100.0) == (100.0, "xla cost_analysis")
    flops, source = common.pick_flops(35.0, 240.0)  # XLA:GPU without the cuDNN convolutions
    assert flops == 240.0 and source.startswith("jaxpr count") and "below" in source
    flops, source = common.pick_flops(0.0, 240.0)
    assert flops == 240.0 and "no xla cost_analysis" in source


def test_step_flops_counts_the_mlp_step_by_hand(common):
    # MLP 784 -> 64 -> 30 -> 10, b rows: the forward dots F = 2b(784*64 + 64*30 + 30*10);
    # the backward's weight gradients cost F again, and the input gradients of the 2nd and
    # 3rd layers 2b(64*30 + 30*10) (none for the 1st: the data is not differentiated).
    b = 64
    model = make_model("mlp", "fmnist", 10, (28, 28), jnp.uint8)
    flops, source, counted = common.step_flops(model, b)
    fwd = 2 * b * (784 * 64 + 64 * 30 + 30 * 10)
    assert counted == 2 * fwd + 2 * b * (64 * 30 + 30 * 10)
    assert flops >= counted
    assert (flops == counted) == source.startswith("jaxpr count")
