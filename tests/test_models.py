"""Models: output shapes, normalisation inside the model, dropout only in training."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.models import MODELS, make_model
from fedjax_appeal.core.sequence import SEQUENCE_MODELS

SHAPES = {"mlp": (28, 28), "sent_mlp": (50,), "cnn": (32, 32, 3), "lenet5": (28, 28),
          "logistic": (60,), "cnn_bn": (28, 28), "resnet20": (32, 32, 3),
          "simple_cnn": (32, 32, 3), "lstm": (25,), "char_lstm": (80,), "transformer": (25,)}
VOCAB = 20  # token ids of the sequence models' case


def test_every_registered_model_has_a_shape_case():
    assert set(MODELS) == set(SHAPES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_output_shape_and_param_count(name):
    shape = SHAPES[name]
    seq = name in SEQUENCE_MODELS  # token ids: a classifier of the sequence
    dtype = jnp.int32 if seq else jnp.uint8 if len(shape) > 1 else jnp.float32
    m = make_model(name, "x", 10, shape, dtype, vocab_size=VOCAB if seq else 0)
    params, state = m.init(jax.random.key(0))
    x = jnp.zeros((3, *shape), dtype)
    out, _ = m.apply(params, state, x, train=True, key=jax.random.key(1))
    assert out.shape == (3, 10)
    n = sum(a.size for a in jax.tree.leaves(params))
    if name == "mlp":
        assert n == 784 * 64 + 64 + 64 * 30 + 30 + 30 * 10 + 10
    if name == "cnn":  # conv 5x5x3x6, 5x5x6x16, FC 400-120-100-84-50-10
        assert n == (75 * 6 + 6) + (150 * 16 + 16) + (400 * 120 + 120) + (120 * 100 + 100) + (
            100 * 84 + 84) + (84 * 50 + 50) + (50 * 10 + 10)
    if name == "cnn_bn":  # 28x28x1: conv 5x5x1x6 (+BN 6), 5x5x6x16 (+BN 16), FC 256-120 (+BN)
        assert n == (25 * 6 + 6 + 12) + (150 * 16 + 16 + 32) + (256 * 120 + 120 + 240) + (
            120 * 84 + 84) + (84 * 10 + 10)
        assert set(state) == {"batch_stats"}
    if name == "resnet20":  # He et al. 2016: ~0.27M weights; BN scale+bias per channel
        def block(cin, cout):  # two 3x3 convs + BNs, 1x1 projection + BN when shapes change
            proj = cin * cout + 2 * cout if cin != cout else 0
            return 9 * cin * cout + 9 * cout * cout + 4 * cout + proj
        expected = (27 * 16 + 32) + 3 * block(16, 16) + block(16, 32) + 2 * block(32, 32) + (
            block(32, 64) + 2 * block(64, 64)) + (64 * 10 + 10)
        assert n == expected
        assert 0.26e6 < n < 0.28e6
    if name == "lstm":  # LEAF's Sent140 stacked_lstm: embedding 100, 2 x LSTM 100, FC 128
        lstm = lambda d, h: d * 4 * h + h * 4 * h + 4 * h  # noqa: E731
        assert n == VOCAB * 100 + lstm(100, 100) * 2 + (100 * 128 + 128) + (128 * 10 + 10)
    if name == "char_lstm":  # FedJAX's Shakespeare LSTM: embedding 8, 2 x LSTM 256
        lstm = lambda d, h: d * 4 * h + h * 4 * h + 4 * h  # noqa: E731
        assert n == VOCAB * 8 + lstm(8, 256) + lstm(256, 256) + (256 * 10 + 10)
    if name == "simple_cnn":  # conv 3x3x3x32, 3x3x32x64 (32 -> 30 -> 28, pool 14), FC 12544-128-10
        assert n == (27 * 32 + 32) + (288 * 64 + 64) + (14 * 14 * 64 * 128 + 128) + (128 * 10 + 10)


def test_normalisation_happens_inside_the_model():
    m = make_model("logistic", "x", 2, (3,), jnp.uint8, scale=1 / 255, mean=[0.5, 0.5, 0.5],
                   std=[0.25, 0.25, 0.25])
    params, st = m.init(jax.random.key(0))
    params = jax.tree.map(jnp.zeros_like, params)
    params["Dense_0"]["kernel"] = jnp.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    out, _ = m.apply(params, st, jnp.array([[255, 0, 0]], jnp.uint8), train=False)
    assert float(out[0, 0]) == pytest.approx((1.0 - 0.5) / 0.25)


def test_dropout_only_in_training():
    m = make_model("mlp", "x", 10, (20,), jnp.float32, scale=1.0)
    params, st = m.init(jax.random.key(0))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 20)), jnp.float32)
    e1, _ = m.apply(params, st, x, train=False)
    e2, _ = m.apply(params, st, x, train=False, key=jax.random.key(5))
    np.testing.assert_array_equal(np.asarray(e1), np.asarray(e2))
    t1, _ = m.apply(params, st, x, train=True, key=jax.random.key(1))
    t2, _ = m.apply(params, st, x, train=True, key=jax.random.key(2))
    assert not np.allclose(np.asarray(t1), np.asarray(t2))
