"""evaluate/evaluation.py: the evaluation chunk sized to the model's largest intermediate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.arrays import ClientArrays
from fedjax_appeal.core.models import make_model
from fedjax_appeal.evaluate import evaluation
from fedjax_appeal.evaluate.evaluation import auto_chunk, evaluate_split, row_bytes


def _setup(name, shape, classes, rows=300, clients=3):
    image = len(shape) == 3
    m = make_model(name, "x", classes, shape, jnp.uint8 if image else jnp.float32, scale=1.0)
    p, s = m.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    x = (rng.integers(0, 255, (rows, *shape)).astype(np.uint8) if image
         else rng.normal(size=(rows, *shape)).astype(np.float32))
    y = rng.integers(0, classes, rows).astype(np.int32)
    parts = np.array_split(np.arange(rows), clients)
    return m, p, s, ClientArrays.from_indices(x, y, parts)


@pytest.mark.parametrize("shape,classes,largest", [
    # conv2's output: (H - 4) x (W - 4) x 64 float32 per row (two VALID 3x3 convolutions)
    ((32, 32, 3), 10, 28 * 28 * 64 * 4),
    ((28, 28, 1), 62, 24 * 24 * 64 * 4),
])
def test_simple_cnn_chunk_from_its_largest_feature_map(shape, classes, largest):
    m, p, s, arr = _setup("simple_cnn", shape, classes)
    assert row_bytes(m, p, s, arr) == largest
    # 32 MiB / 200,704 B = 167 rows, / 147,456 B = 227 rows -> 128 (a power of two)
    assert auto_chunk(m, p, s, arr) == 128


def test_small_models_keep_the_largest_chunk():
    m, p, s, arr = _setup("mlp", (784,), 10)
    assert row_bytes(m, p, s, arr) == 784 * 4  # the normalised input row
    assert auto_chunk(m, p, s, arr) == evaluation.MAX_CHUNK == 2048


def test_chunk_floor_is_64_rows(monkeypatch):
    m, p, s, arr = _setup("mlp", (784,), 10)
    monkeypatch.setattr(evaluation, "CHUNK_BYTES", 1)
    assert auto_chunk(m, p, s, arr) == 64


def test_auto_chunk_gives_the_values_of_any_fixed_chunk():
    m, p, s, arr = _setup("simple_cnn", (28, 28, 1), 62, rows=300)
    auto = jax.jit(lambda q: evaluate_split(m, q, s, arr))(p)
    for chunk in (2048, 7):
        fixed = jax.jit(lambda q, c=chunk: evaluate_split(m, q, s, arr, c))(p)
        np.testing.assert_allclose(auto.loss, fixed.loss, rtol=1e-5)
        np.testing.assert_allclose(auto.acc, fixed.acc)
    # and against the per-row losses computed one client at a time
    loss, _ = m.per_sample(p, s, jnp.asarray(arr.x), jnp.asarray(arr.y))
    owner = np.asarray(arr.owner)
    ref = [float(np.mean(np.asarray(loss)[owner == k])) for k in range(3)]
    np.testing.assert_allclose(auto.loss, ref, rtol=1e-5)
