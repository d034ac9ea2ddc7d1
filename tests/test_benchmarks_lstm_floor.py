"""benchmarks/lstm_step_floor.py: the matrix-product FLOPs it counts in a character LSTM's
local step, against a count by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_appeal.core.models import make_model


def test_char_lstm_step_products_counted_by_hand(bench_script):
    floor = bench_script("lstm_step_floor")
    v, t, b, e, h = 7, 5, 3, 8, 256  # char_lstm: 8-d embedding, 2 layers of 256
    m = make_model("char_lstm", "toy", v, (t,), jnp.int32, vocab_size=v, per_position=True)
    params, state = m.init(jax.random.key(0))
    x = jnp.ones((b, t), jnp.int32)
    step = jax.make_jaxpr(jax.grad(lambda p: m.loss(p, state, x, x, train=True)[0]))
    rows = t * b
    # per layer of input width d: the input projection, its input and weight gradients
    # (3 x rows x d x 4h), the recurrence forward and backward (2 x t steps of b x h x 4h)
    # and the recurrent weights' gradient (rows x h x 4h); the output layer: forward, input
    # and weight gradients (3 x rows x h x v)
    layer = lambda d: 3 * rows * d * 4 * h + 2 * t * b * h * 4 * h + rows * h * 4 * h  # noqa: E731
    want = 2 * (layer(e) + layer(h) + 3 * rows * h * v)
    assert floor.dot_flops(step(params).jaxpr) == want
