"""execute/cohort.py: the one-pass chunked aggregation (running softmax) against numpy.

A stand-in local update returns a fixed per-client delta and fixed reports, so the
reference is sum_k softmax(z)_k Delta_k computed by hand; the chunk size varies (padding,
one client per chunk, the whole cohort in one chunk) and the logits span gaps where a
later chunk raises the running maximum by 1e4.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.aggregate.aggregation import masked_softmax
from fedjax_appeal.core.parts import ClientUpdate
from fedjax_appeal.execute.cohort import (
    chunked_one_pass,
    chunked_statistics,
    chunked_weighted_delta,
)

M = 9  # clients in the federation
RNG = np.random.default_rng(0)
DELTA = RNG.normal(size=(M, 3, 2)).astype(np.float32)
BIAS = RNG.normal(size=(M,)).astype(np.float32)
LOGIT = np.array([0.3, -1.2, 4.0, 0.0, 2.5, 1e4, -3.0, 0.7, 1e4 + 2.0], np.float32)


class State(NamedTuple):
    params: dict


def local(state, data, k, key, hp):
    return ClientUpdate(delta={"w": jnp.asarray(DELTA)[k], "b": jnp.asarray(BIAS)[k]},
                        model_state={}, num_samples=jnp.int32(1) + k, loss=k * 0.5,
                        report=jnp.asarray(LOGIT)[k])


def logits(upd, idx, valid, state, hp):
    return upd.report


def reference(idx, valid):
    z = LOGIT[idx].astype(np.float64)
    z = np.where(valid, z - z[valid].max() if valid.any() else z, -np.inf)
    e = np.where(valid, np.exp(z), 0.0)
    w = e / e.sum() if e.sum() > 0 else e
    return w, np.tensordot(w, DELTA[idx], 1), np.dot(w, BIAS[idx])


STATE = State({"w": jnp.zeros((3, 2)), "b": jnp.zeros(())})
COHORTS = {
    "mixed": (np.array([0, 1, 2, 3, 4, 6, 7]), np.array([1, 1, 0, 1, 1, 1, 1], bool)),
    "max rises late": (np.array([3, 0, 7, 1, 5, 8]), np.ones(6, bool)),
    "one valid": (np.array([4, 2, 1]), np.array([0, 1, 0], bool)),
    "none valid": (np.array([4, 2, 1]), np.zeros(3, bool)),
}


@pytest.mark.parametrize("cohort", sorted(COHORTS))
@pytest.mark.parametrize("c", [1, 2, 4, 7])
def test_one_pass_equals_softmax_weighted_sum(cohort, c):
    idx, valid = COHORTS[cohort]
    keys = jax.random.split(jax.random.key(0), len(idx))
    args = (local, None, STATE, None, jnp.asarray(idx), keys, jnp.asarray(valid),
            jax.random.key(1), None)
    upd, pseudo = jax.jit(lambda: chunked_one_pass(*args, logits, c))()
    w, dw, db = reference(idx, valid)
    np.testing.assert_allclose(np.asarray(pseudo["w"]), dw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(pseudo["b"]), db, rtol=1e-5, atol=1e-6)
    # the statistics are pass 1's: no deltas, ||Delta_k||^2 kept, one row per cohort slot
    stats = chunked_statistics(*args, c)
    assert upd.delta is None and upd.loss.shape == (len(idx),)
    np.testing.assert_allclose(np.asarray(upd.delta_sq_norm),
                               (DELTA[idx] ** 2).sum((1, 2)) + BIAS[idx] ** 2, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), upd, stats)
    # and the two-pass aggregation with the same weights agrees
    two = chunked_weighted_delta(*args, masked_softmax(jnp.asarray(LOGIT)[idx], valid), c)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 pseudo, two)
    assert np.all(np.isfinite(np.asarray(pseudo["w"])))
