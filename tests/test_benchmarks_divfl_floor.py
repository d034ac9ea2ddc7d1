"""benchmarks/divfl_floor.py: the products of a DivFL round counted by hand (LeNet-5 on
28 x 28 MNIST, the selection tables' sizes), against the jaxpr of LeNet-5's gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from fedjax_appeal.core.models import make_model


@pytest.fixture()
def floor(bench_script):
    return bench_script("divfl_floor")


def test_lenet5_products_counted_by_hand(floor):
    n = 7
    prods = floor.products(n)
    # conv1: 28 x 28 outputs (SAME), 5 x 5 x 1 taps, 6 filters: forward and kernel gradient
    # (the image needs no gradient); conv2: 10 x 10 outputs, 5 x 5 x 6 taps, 16 filters;
    # dense 400 -> 120 -> 84 -> 10: forward, kernel and input gradient each
    conv1 = 2 * n * 784 * 25 * 6
    conv2 = 2 * n * 100 * 150 * 16
    dense = 2 * n * (400 * 120 + 120 * 84 + 84 * 10)
    assert len(prods) == 2 + 3 + 9
    assert sum(p["flops"] for p in prods) == 2 * conv1 + 3 * conv2 + 3 * dense
    assert [p["product"] for p in prods if p["layer"] == "conv1"] == ["forward",
                                                                       "kernel gradient"]
    for p in prods:
        m, k, nn = p["mkn"]
        assert p["flops"] == 2 * m * k * nn


def test_products_match_the_jaxpr_of_lenet5s_gradient(floor, bench_script):
    """The hand list has exactly the dot FLOPs of the model's own gradient in the im2col
    form the feature pass runs."""
    common = bench_script("_common")
    n = 5
    m = make_model("lenet5", "x", 10, (28, 28), jnp.uint8, conv_impl="patches_cf")
    p, s = m.init(jax.random.key(0))
    x = jnp.zeros((n, 28, 28), jnp.uint8)
    y = jnp.zeros((n,), jnp.int32)
    jaxpr = jax.make_jaxpr(jax.grad(lambda q: m.loss(q, s, x, y, train=False)[0]))(p).jaxpr
    assert common.jaxpr_flops(jaxpr) == sum(q["flops"] for q in floor.products(n))


def test_round_products_of_the_selection_setting(floor):
    need = floor.round_products(clients=100, rows=6000, cohort=10, steps=10, batch=32,
                                params=61706)
    per_row = sum(q["flops"] for q in floor.products(1))
    assert floor.part_flops(need["gradient features"]) == 6000 * per_row
    assert floor.part_flops(need["cohort training"]) == 10 * 10 * 32 * per_row
    assert floor.part_flops(need["distances"]) == 2 * 100 * 61706 * 100


def test_floor_is_the_fastest_form_per_product_times_the_instances(floor):
    need = {"a": {"instances": 10, "products": [{"flops": 4.0}, {"flops": 6.0}]}}
    times = {"a": [{"dot": {"cpu": 2.0, "wall": 9.0}, "dot^T": {"cpu": 1.0, "wall": 9.0}},
                   {"dot": {"cpu": 0.5, "wall": 0.1}, "conv": {"cpu": 0.25, "wall": 0.1}}]}
    (row,) = floor.floor_rows(need, times, cores=2)
    assert row == {"part": "a", "flops": 100.0, "cpu": 10 * (1.0 + 0.25), "wall": 6.25}


def test_concurrent_seconds_of_hand_made_spans(floor):
    # thread a busy 0-10 and 20-30 ns, b busy 5-15 ns: both at once 5-10 ns
    spans = [(0, 10, "a"), (5, 15, "b"), (20, 30, "a")]
    assert floor.concurrent_s(spans) == pytest.approx(5e-9)
    assert floor.concurrent_s([(0, 10, "a"), (10, 20, "b")]) == 0.0


def test_op_kinds_finds_the_products_and_the_cohort(floor):
    """A dot under a vmap is a product of the cohort's training; the model's gradient
    outside any vmap belongs to the gradient features; an elementwise op is 'other'."""
    w = jnp.ones((8, 4))

    def f(x, w):
        cohort = jax.vmap(lambda a: jnp.tanh(a @ w))(x)
        g = jax.grad(lambda v: jnp.sum(jnp.sin(x[0] @ v)))(w)
        return cohort, g

    hlo = jax.jit(f).lower(jnp.ones((3, 5, 8)), w).compile().as_text()
    kinds = set(floor.op_kinds(hlo).values())
    assert ("product", "cohort training") in kinds
    assert ("product", "gradient features") in kinds
    assert any(kind == "other" for kind, _ in kinds)


def test_op_lines_reads_opcode_shape_and_source_of_each_operation(floor):
    hlo = "\n".join([
        "%fused_computation (p: f32[4,6]) -> f32[6,4] {",
        "  ROOT %t = f32[6,4]{1,0} transpose(%p), dimensions={1,0}",
        "}",
        "ENTRY %main () -> f32[6,4] {",
        '  %dot.3 = f32[4,6]{1,0} dot(%a, %b), lhs_contracting_dims={1}, '
        'metadata={op_name="jit(f)/while/body/closed_call/jvp(LeNet5)/Conv_0/dot_general"}',
        '  ROOT %transpose_copy_fusion = f32[6,4]{1,0} fusion(%dot.3), kind=kLoop, '
        'calls=%fused_computation, metadata={op_name="jit(f)/transpose(jvp(LeNet5))/x"}',
        "}"])
    got = floor.op_lines(hlo)
    assert got["dot.3"] == {"opcode": "dot", "shape": "f32[4,6]{1,0}", "source":
                            "jit(f)/while/body/closed_call/jvp(LeNet5)/Conv_0/dot_general"}
    assert got["transpose_copy_fusion"]["opcode"] == "fusion"
    assert got["transpose_copy_fusion"]["source"] == "jit(f)/transpose(jvp(LeNet5))/x"
    assert got["t"] == {"opcode": "transpose", "shape": "f32[6,4]{1,0}", "source": ""}


def test_ops_table_rows(floor):
    rows = [{"op": "f", "opcode": "fusion", "shape": "f32[2]", "source": "jvp(M)/relu",
             "seconds": 0.0125, "share": 0.25}]
    assert floor.ops_table(rows).splitlines()[-1] == (
        "| f | fusion | `f32[2]` | `jvp(M)/relu` | 12.5 | 25.0% |")
