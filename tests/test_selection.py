"""Submodular selection: greedy vs numpy reference and brute force, masks, blocked distances,
stochastic greedy, UnionFL penalty, Power-of-Choice, no retrace, dissimilarity metrics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_appeal.core.config import RunConfig


def test_composition_pool_and_stratified_cohorts():
    from fedjax_appeal.data.heterogeneity import client_ratios, parse_ratio_spec
    from fedjax_appeal.select.selection import stratified, stratified_counts

    assert parse_ratio_spec("1.0x4,0.01x3,0.1x3") == [(1.0, 4), (0.01, 3), (0.1, 3)]
    ratios, groups, _ = client_ratios(20, "1.0x4,0.01x3,0.1x3", np.random.default_rng(0))
    assert np.bincount(groups).tolist() == [8, 6, 6]
    assert sorted(set(ratios.tolist())) == [0.01, 0.1, 1.0]
    np.testing.assert_array_equal(ratios, np.array([1.0, 0.01, 0.1])[groups])
    r, g, _ = client_ratios(500, "random", np.random.default_rng(1))
    assert set(r.tolist()) == {1.0, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001}
    cfg = RunConfig(imbalance_ratios="1.0x4,0.01x3,0.1x3", cohort=10, clients=20)
    assert stratified_counts(cfg) == (4, 3, 3)
    assert stratified_counts(RunConfig(label_flip_fraction=1 / 3, cohort=6)) == (4, 2)
    pool = jnp.ones(20, bool)
    for s in range(5):
        idx, valid = stratified(jax.random.key(s), pool, jnp.asarray(groups), (4, 3, 3))
        assert np.asarray(valid).all() and len(set(np.asarray(idx).tolist())) == 10
        assert np.bincount(groups[np.asarray(idx)], minlength=3).tolist() == [4, 3, 3]
