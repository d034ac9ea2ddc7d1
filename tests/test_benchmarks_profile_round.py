"""benchmarks/profile_round.py: the HLO loop parser and the byte bounds, against hand counts
and a compiled program of known structure."""

from __future__ import annotations

import jax
import jax.numpy as jnp

HLO = """HloModule m

%body.1 (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_computation
  %d = f32[4]{0} dot(%f, %f), lhs_contracting_dims={}, rhs_contracting_dims={}
  %c = f32[4]{0} copy(%d)
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[4]) tuple(%n, %c)
}

%cond.1 (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %k = s32[] constant(7)
  ROOT %lt = pred[] compare(%i, %k), direction=LT
}

ENTRY %main (a: f32[4]) -> (s32[], f32[4]) {
  %a = f32[4]{0} parameter(0)
  %z = s32[] constant(0)
  %t = (s32[], f32[4]) tuple(%z, %a)
  ROOT %w = (s32[], f32[4]) while(%t), condition=%cond.1, body=%body.1, TRIPS
}
""".replace("TRIPS", 'backend_config={"known_trip_count":{"n":"7"}}')


def test_loop_kernels_counts_the_body_of_the_loop_with_that_trip_count(bench_script):
    pr = bench_script("profile_round")
    comps = pr.computations(HLO)
    assert set(comps) == {"body.1", "cond.1", "main"}
    # by hand: fusion, dot, copy, add move data; parameter, get-tuple-element, constant and
    # tuple do not
    assert pr.loop_kernels(HLO, 7) == {"fusion": 1, "dot": 1, "copy": 1, "add": 1}
    assert pr.loop_kernels(HLO, 8) == {}


def test_loop_kernels_finds_a_compiled_scan(bench_script):
    pr = bench_script("profile_round")

    def run(w, xs):
        def step(w, x):
            g = jax.grad(lambda v: jnp.sum((x @ v) ** 2))(w)
            return w - 0.1 * g, None
        return jax.lax.scan(step, w, xs)[0]

    hlo = jax.jit(run).lower(jnp.ones((8, 3)), jnp.ones((11, 5, 8))).compile().as_text()
    ops = pr.loop_kernels(hlo, 11)
    assert sum(ops.values()) >= 1 and not pr.loop_kernels(hlo, 12)


def test_step_bytes_by_hand(bench_script):
    pr = bench_script("profile_round")
    # MLP 784-64-30-10: 784*64 + 64 + 64*30 + 30 + 30*10 + 10 = 52,650 parameters
    b = pr.step_bytes(52_650, 64, 784)
    data = 64 * (784 + 4)
    assert b == {"fused": 2 * 52_650 * 4 + data, "unfused": 5 * 52_650 * 4 + data,
                 "data": data}
    assert round(b["unfused"] / 1e6, 2) == 1.10 and round(b["fused"] / 1e6, 2) == 0.47
    assert pr.bandwidth_for("NVIDIA H200") == 4.8e12
    assert pr.bandwidth_for("NVIDIA H100 PCIe") == 2.0e12
    assert pr.bandwidth_for("cpu") is None
