"""Tests of `aggregate/aggregation.py`: weight rules (Exp-alpha, masked softmax)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.aggregate.aggregation import (
    AGGREGATIONS,
    exp_alpha,
    masked_softmax,
    weight_rule,
)
from fedjax_appeal.core.config import HParams, RunConfig


def test_exp_alpha_hand_numbers():
    before = jnp.array([2.0, 1.0, 3.0])
    after = jnp.array([1.0, 0.8, 0.5])
    valid = jnp.array([True, True, True])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(0.5)))
    # gaps -1.0, -0.2, -2.5 / 0.5 -> exp(-2), exp(-0.4), exp(-5)
    raw = np.exp([-2.0, -0.4, -5.0])
    np.testing.assert_allclose(w, raw / raw.sum(), rtol=1e-6)
    np.testing.assert_allclose(w, [0.166588, 0.825118, 0.008294], atol=1e-5)


def test_exp_alpha_n_scaled_and_masked():
    before = jnp.array([2.0, 1.0, 3.0, 9.0])
    after = jnp.array([1.0, 0.8, 0.5, 0.0])
    valid = jnp.array([True, True, True, False])
    n = jnp.array([10, 30, 60, 1000])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(1.0), n))
    raw = np.array([10, 30, 60]) * np.exp([-1.0, -0.2, -2.5])
    np.testing.assert_allclose(w[:3], raw / raw.sum(), rtol=1e-6)
    assert w[3] == 0.0


def test_exp_alpha_extreme_gaps_no_overflow():
    valid = jnp.array([True, True, True, False])
    before = jnp.zeros(4)
    # gaps of 1e4 / alpha 0.2 = 5e4 in the exponent, both signs, and an invalid huge slot
    after = jnp.array([1e4, 0.0, -1e4, 1e6])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(0.2)))
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, [1.0, 0.0, 0.0, 0.0], atol=0)
    after = jnp.array([1e4, 1e4 - 0.2 * np.log(3.0), -1e4, 0.0])
    w = np.asarray(exp_alpha(before, after, valid, jnp.float32(0.2)))
    # float32 spacing at 1e4 is ~1e-3, i.e. ~5e-3 in the exponent: compare to 1e-3
    np.testing.assert_allclose(w, [0.75, 0.25, 0.0, 0.0], atol=1e-3)
    w = np.asarray(exp_alpha(before, -after, valid, jnp.float32(0.2)))
    np.testing.assert_allclose(w, [0.0, 0.0, 1.0, 0.0], atol=0)


def test_masked_softmax_nothing_valid_and_large_alpha():
    w = masked_softmax(jnp.array([1.0, 2.0]), jnp.array([False, False]))
    assert np.asarray(w).tolist() == [0.0, 0.0]
    # alpha -> inf: uniform over valid slots
    w = exp_alpha(jnp.array([5.0, 1.0, 2.0]), jnp.array([0.0, 1.0, 0.1]),
                  jnp.array([True, False, True]), jnp.float32(1e9))
    np.testing.assert_allclose(np.asarray(w), [0.5, 0.0, 0.5], rtol=1e-6)


def test_weight_rule_exp_alpha_reads_losses():
    from fedjax_appeal.core.round import ClientUpdate

    for name, scaled in (("exp-alpha", False), ("exp-alpha-n", True)):
        rule = weight_rule(RunConfig(aggregation=name))
        assert rule.needs == {"loss_before", "loss_after"}
        upd = ClientUpdate(delta=None, model_state={}, num_samples=jnp.array([1, 3]),
                           loss=jnp.zeros(2),
                           loss_before=jnp.array([1.0, 1.0]),
                           loss_after=jnp.array([0.0, 1.0]))
        hp = HParams(exp_alpha=1.0).as_arrays()
        w = np.asarray(rule.fn(upd, jnp.array([0, 1]), jnp.array([True, True]), None, hp))
        raw = np.exp([-1.0, 0.0]) * (np.array([1, 3]) if scaled else 1)
        np.testing.assert_allclose(w, raw / raw.sum(), rtol=1e-6)


def _stats(m=7, seed=0):
    from fedjax_appeal.core.parts import ClientUpdate
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 20, m).astype(np.int32)
    n[2] = 0  # an empty client: weight 0 under the proportional rule
    upd = ClientUpdate(delta=None, model_state={}, num_samples=jnp.asarray(n),
                       loss=jnp.zeros(m),
                       loss_before=jnp.asarray(rng.uniform(0.5, 3.0, m), jnp.float32),
                       loss_after=jnp.asarray(rng.uniform(0.0, 2.0, m), jnp.float32))
    valid = jnp.asarray(rng.random(m) < 0.8).at[0].set(True).at[2].set(True)
    return upd, valid


@pytest.mark.parametrize("name", sorted(AGGREGATIONS))
def test_rules_with_logits_are_their_masked_softmax(name):
    """A rule's `logits` (used by the one-pass chunked round) give exactly its weights."""
    rule = AGGREGATIONS[name]
    if rule.logits is None:
        assert name in ("fednova",)  # reads every client's steps: two passes
        return
    hp = HParams(exp_alpha=0.3).as_arrays()
    for seed in range(3):
        upd, valid = _stats(seed=seed)
        w = rule.fn(upd, jnp.arange(7), valid, None, hp)
        z = rule.logits(upd, jnp.arange(7), valid, None, hp)
        np.testing.assert_allclose(np.asarray(masked_softmax(z, valid)), np.asarray(w),
                                   rtol=1e-6, atol=1e-7)
    assert set(n for n in AGGREGATIONS if AGGREGATIONS[n].logits is not None) == {
        "proportional", "uniform", "exp-alpha", "exp-alpha-n"}
