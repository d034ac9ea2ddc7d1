"""Tests of `algorithms/fedbn.py`: FedBN keeps BatchNorm per client."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.config import HParams, RunConfig


def _bn_setup(num_clients=3):
    import flax.linen as nn
    from conftest import arrays_from_clients

    from fedjax_appeal.core.arrays import FederatedData
    from fedjax_appeal.core.models import Model

    class BNNet(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            x = nn.Dense(4)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.5)(x)
            return nn.Dense(2)(nn.relu(x))

    rng = np.random.default_rng(0)
    locs, scales = [0.0, 20.0, -5.0], [1.0, 5.0, 0.1]
    xs = [rng.normal(locs[k], scales[k], (8, 3)).astype(np.float32) for k in range(num_clients)]
    ys = [rng.integers(0, 2, 8) for _ in range(num_clients)]
    arr = arrays_from_clients(xs, ys)
    data = FederatedData(train=arr, test=arr, num_classes=2, name="bn")
    return Model(BNNet(), (3,), jnp.float32, "bnnet"), data


@pytest.mark.slow
def test_fedbn_keeps_bn_per_client_and_averages_the_rest():
    from fedjax_appeal.algorithms import build
    from fedjax_appeal.algorithms.fedbn import bn_part, with_bn
    from fedjax_appeal.local.client import local_sgd

    model, data = _bn_setup()
    cfg = RunConfig(algorithm="fedbn", clients=3, unseen_clients=0, cohort=2, local_steps=3,
                    batch_size=4)
    hp = HParams(client_lr=0.1).as_arrays()
    alg = build("fedbn", model, cfg)
    s0 = alg.init(jax.random.key(0), data, hp)
    key = jax.random.key(5)
    s1, met = jax.jit(alg.round)(s0, data, key, hp)
    idx = np.asarray(met["cohort_idx"])
    w = np.asarray(met["cohort_weights"])
    # sequential reference with the round's own keys
    _, k_loc, _ = jax.random.split(key, 3)
    keys = jax.random.split(k_loc, 2)
    bn0 = jax.tree.map(lambda a: a[0], s0.algo.bn_params)
    ms0 = jax.tree.map(lambda a: a[0], s0.algo.bn_state)
    p0 = with_bn(s0.params, bn0)
    refs = [local_sgd(model, p0, ms0, data.train, int(k), kk, hp.client_lr, steps=3,
                      batch_size=4) for k, kk in zip(idx, keys, strict=True)]
    for j, k in enumerate(idx):
        got_ms = jax.tree.map(lambda a, k=k: a[k], s1.algo.bn_state)
        for a, b in zip(jax.tree.leaves(got_ms), jax.tree.leaves(refs[j].state), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        got_bn = jax.tree.map(lambda a, k=k: a[k], s1.algo.bn_params)
        ref_bn = bn_part(refs[j].params)
        for name in ref_bn:
            np.testing.assert_allclose(np.asarray(got_bn[name]), np.asarray(ref_bn[name]),
                                       rtol=1e-5, atol=1e-6)
    # the client outside the cohort keeps its initial BN
    out = ({0, 1, 2} - set(idx.tolist())).pop()
    for a, b in zip(jax.tree.leaves(jax.tree.map(lambda a: a[out], s1.algo.bn_state)),
                    jax.tree.leaves(ms0), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # very different data -> very different BN statistics (never averaged)
    means = np.asarray(s1.algo.bn_state["batch_stats"]["BatchNorm_0"]["mean"])
    assert np.abs(means[idx[0]] - means[idx[1]]).max() > 1.0
    # non-BN params: FedAvg average of the deltas (server sgd, lr 1); global BN untouched
    from flax import traverse_util
    f0 = traverse_util.flatten_dict(s0.params, sep="/")
    f1 = traverse_util.flatten_dict(s1.params, sep="/")
    fr = [traverse_util.flatten_dict(r.params, sep="/") for r in refs]
    for name in f0:
        if "BatchNorm" in name:
            np.testing.assert_array_equal(np.asarray(f1[name]), np.asarray(f0[name]))
        else:
            expect = f0[name] - sum(w[j] * (f0[name] - fr[j][name]) for j in range(2))
            np.testing.assert_allclose(np.asarray(f1[name]), np.asarray(expect), rtol=1e-5,
                                       atol=1e-6)
    np.testing.assert_allclose(w, np.array([8, 8]) / 16.0)
    ev = jax.jit(alg.evaluate)(s1, data, hp)
    assert ev["test"].acc.shape == (3,)


def test_fedbn_needs_batchnorm(tiny_model):
    from fedjax_appeal.algorithms import build
    from fedjax_appeal.core.config import ConfigError

    with pytest.raises(ConfigError, match="BatchNorm"):
        build("fedbn", tiny_model, RunConfig(algorithm="fedbn"))
