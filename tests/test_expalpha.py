"""Exp-alpha weights, optax server optimizers, FedBN, heterogeneity generators, metrics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.aggregate.aggregation import exp_alpha, masked_softmax, weight_rule
from fedjax_appeal.aggregate.server import server_optimizer
from fedjax_appeal.core.config import HParams, RunConfig

# ----------------------------------------------------------------------------- Exp-alpha


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
                           extra={"loss_before": jnp.array([1.0, 1.0]),
                                  "loss_after": jnp.array([0.0, 1.0])})
        hp = HParams(exp_alpha=1.0).as_arrays()
        w = np.asarray(rule.fn(upd, jnp.array([0, 1]), jnp.array([True, True]), None, hp))
        raw = np.exp([-1.0, 0.0]) * (np.array([1, 3]) if scaled else 1)
        np.testing.assert_allclose(w, raw / raw.sum(), rtol=1e-6)


# ----------------------------------------------------------------------------- server opts


def _steps(name, hp, grads):
    tx = server_optimizer(name, hp.as_arrays())
    p = {"w": jnp.array([0.5, -1.0, 2.0])}
    st = tx.init(p)
    out = []
    for g in grads:
        u, st = tx.update({"w": jnp.asarray(g, jnp.float32)}, st, p)
        p = jax.tree.map(lambda a, b: a + b, p, u)
        out.append(np.asarray(p["w"]))
    return out


G = [np.array([0.3, -0.02, 1.5]), np.array([-0.1, 0.04, 0.5])]
HP = HParams(server_lr=0.7, server_momentum=0.8, server_beta2=0.95, server_eps=1e-2)


def test_server_sgd_and_momentum_textbook():
    w0 = np.array([0.5, -1.0, 2.0])
    lr, mu = 0.7, 0.8
    np.testing.assert_allclose(_steps("sgd", HP, G[:1])[0], w0 - lr * G[0], rtol=1e-6)
    # FedAvgM (Hsu et al. 2019): v = mu v + g, w -= lr v
    v1 = G[0]
    v2 = mu * v1 + G[1]
    got = _steps("momentum", HP, G)
    np.testing.assert_allclose(got[0], w0 - lr * v1, rtol=1e-6)
    np.testing.assert_allclose(got[1], w0 - lr * v1 - lr * v2, rtol=1e-6)
    # Nesterov: w -= lr (g + mu v)
    got = _steps("nesterov", HP, G)
    np.testing.assert_allclose(got[0], w0 - lr * (G[0] + mu * v1), rtol=1e-6)
    np.testing.assert_allclose(got[1], got[0] - lr * (G[1] + mu * v2), rtol=1e-6)


@pytest.mark.parametrize("name", ["adam", "yogi"])
def test_server_adaptive_textbook(name):
    """FedAdam / FedYogi (Reddi et al. 2021, Alg. 2) with tau = eps outside the sqrt, and
    the bias correction optax applies; Yogi's moments start at optax's 1e-6."""
    w = np.array([0.5, -1.0, 2.0])
    lr, b1, b2, tau = 0.7, 0.8, 0.95, 1e-2
    init = 1e-6 if name == "yogi" else 0.0
    m = np.full(3, init)
    v = np.full(3, init)
    got = _steps(name, HP, G)
    for t, g in enumerate(G, start=1):
        m = b1 * m + (1 - b1) * g
        if name == "adam":
            v = b2 * v + (1 - b2) * g ** 2
        else:
            v = v - (1 - b2) * g ** 2 * np.sign(v - g ** 2)
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        w = w - lr * mh / (np.sqrt(vh) + tau)
        np.testing.assert_allclose(got[t - 1], w, rtol=1e-5, atol=1e-7)
    if name == "adam":  # first step is lr * g / (|g| + tau): tau sets the adaptivity
        np.testing.assert_allclose(
            got[0], np.array([0.5, -1.0, 2.0]) - lr * G[0] / (np.abs(G[0]) + tau), rtol=1e-5)


# ----------------------------------------------------------------------------- FedBN


def _bn_setup(num_clients=3):
    import flax.linen as nn
    from conftest import arrays_from_clients

    from fedjax_appeal.core.models import Model
    from fedjax_appeal.data import FederatedData

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
    bn0 = jax.tree.map(lambda a: a[0], s0.extra["bn_params"])
    ms0 = jax.tree.map(lambda a: a[0], s0.extra["bn_state"])
    p0 = with_bn(s0.params, bn0)
    refs = [local_sgd(model, p0, ms0, data.train, int(k), kk, hp.client_lr, steps=3,
                      batch_size=4) for k, kk in zip(idx, keys, strict=True)]
    for j, k in enumerate(idx):
        got_ms = jax.tree.map(lambda a, k=k: a[k], s1.extra["bn_state"])
        for a, b in zip(jax.tree.leaves(got_ms), jax.tree.leaves(refs[j].state), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        got_bn = jax.tree.map(lambda a, k=k: a[k], s1.extra["bn_params"])
        ref_bn = bn_part(refs[j].params)
        for name in ref_bn:
            np.testing.assert_allclose(np.asarray(got_bn[name]), np.asarray(ref_bn[name]),
                                       rtol=1e-5, atol=1e-6)
    # the client outside the cohort keeps its initial BN
    out = ({0, 1, 2} - set(idx.tolist())).pop()
    for a, b in zip(jax.tree.leaves(jax.tree.map(lambda a: a[out], s1.extra["bn_state"])),
                    jax.tree.leaves(ms0), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # very different data -> very different BN statistics (never averaged)
    means = np.asarray(s1.extra["bn_state"]["batch_stats"]["BatchNorm_0"]["mean"])
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


# ----------------------------------------------------------------------------- generators


def test_imbalance_recipe_ldam_numbers():
    from fedjax_appeal.data.heterogeneity import imbalance_counts

    assert imbalance_counts(5000, 0.01, 10).tolist() == [5000, 2997, 1796, 1077, 645, 387,
                                                          232, 139, 83, 50]
    assert imbalance_counts(100, 1.0, 10).tolist() == [100] * 10


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


def test_imbalanced_federation_counts_and_balanced_test():
    from fedjax_appeal.data.generated import imbalanced_federation
    from fedjax_appeal.data.heterogeneity import imbalance_counts
    from fedjax_appeal.data.sources import Dataset

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 200)
    ds = Dataset("toy", rng.integers(0, 255, (800, 2, 2)).astype(np.uint8), y, 4)
    cfg = RunConfig(imbalance_ratios="1.0x1,0.1x1", imbalance_nmax=25,
                    imbalance_test_per_class=5, clients=4, unseen_clients=2,
                    label_flip_fraction=0.5, flip_ratio=1.0)
    fd = imbalanced_federation(ds, cfg, np.random.default_rng(3))
    ratio = np.asarray(fd.info["imbalance_ratio"])
    for k in range(4):
        _, yk = fd.train.client_numpy(k)
        _, yt = fd.test.client_numpy(k)
        counts = np.bincount(yk, minlength=4)
        expect = imbalance_counts(25, float(ratio[k]), 4)
        if bool(fd.info["flipped"][k]):  # labels deranged: same multiset of counts
            assert sorted(counts.tolist()) == sorted(expect.tolist())
            assert ratio[k] == 1.0 or not np.array_equal(counts, expect)
        else:
            assert counts.tolist() == expect.tolist()
        assert sorted(np.bincount(yt, minlength=4).tolist()) == [5, 5, 5, 5]
    assert int(np.asarray(fd.info["flipped"]).sum()) == 2
    assert np.asarray(fd.info["imbalanced"]).tolist() == (ratio < 1).tolist()


@pytest.mark.parametrize("flip_ratio,changed", [(1.0, 10), (0.5, 5), (0.2, 2)])
def test_flip_fraction_and_ratio(flip_ratio, changed):
    from fedjax_appeal.data.heterogeneity import choose_fraction, flip_labels

    rng = np.random.default_rng(0)
    mask = choose_fraction(30, 1 / 3, rng)
    assert mask.sum() == 10
    labels = np.tile(np.arange(10), 30 * 5)  # 30 clients x 50 rows, every class 5 times
    clients = [np.arange(k * 50, (k + 1) * 50) for k in range(30)]
    new, maps = flip_labels(labels, clients, mask, 10, flip_ratio, rng)
    for k in range(30):
        wrong = np.mean(new[clients[k]] != labels[clients[k]])
        assert wrong == pytest.approx(changed / 10 if mask[k] else 0.0)
        assert int(np.sum(maps[k] != np.arange(10))) == (changed if mask[k] else 0)


# ----------------------------------------------------------------------------- metrics


def test_accx_half_final_and_group_weights_by_hand():
    from fedjax_appeal.evaluate.expalpha_metrics import acc_at, acc_x, group_weights, summary

    hist = [{"round": 0, "test_acc_seen": 0.1}, {"round": 2, "test_acc_seen": 0.35},
            {"round": 4, "test_acc_seen": 0.41}, {"round": 6, "test_acc_seen": 0.39},
            {"round": 8, "test_acc_seen": 0.5}, {"round": 10, "test_acc_seen": 0.6}]
    assert acc_x(hist, 0.4) == 4 and acc_x(hist, 0.55) == 10 and acc_x(hist, 0.7) is None
    assert acc_at(hist, 5) == 0.41 and acc_at(hist, 10) == 0.6
    assert summary(hist, 10, 0.4) == {"acc40": 4, "acc_half": 0.41, "acc_final": 0.6}
    idx = np.array([[0, 1], [2, 1]])
    w = np.array([[0.2, 0.8], [0.5, 0.5]])
    g = group_weights(idx, w, np.array([True, False, True]))
    assert g["mean"]["True"] == pytest.approx(0.35)  # (0.2 + 0.5) / 2
    assert g["mean"]["False"] == pytest.approx(0.65)  # (0.8 + 0.5) / 2
    assert g["count"] == {"True": 2, "False": 2}
    np.testing.assert_allclose(g["trace"]["True"], [0.2, 0.5])


# ----------------------------------------------------------------------------- equal-size clients


def test_equal_size_counts_by_hand():
    from fedjax_appeal.data.heterogeneity import equal_size_counts

    # shares 1, 0.1^(1/3), 0.1^(2/3), 0.1 = [.5619, .2608, .1211, .0562] of 40 rows:
    # 22.48, 10.43, 4.84, 2.25 -> floors 22, 10, 4, 2 (38) + the two largest remainders
    assert equal_size_counts(40, 0.1, 4).tolist() == [23, 10, 5, 2]
    assert equal_size_counts(40, 1.0, 4).tolist() == [10, 10, 10, 10]
    # the class order puts the shares on other classes (order[0] is the largest class)
    assert equal_size_counts(40, 0.1, 4, np.array([2, 0, 3, 1])).tolist() == [10, 2, 23, 5]


def _toy_pool(per_class=300, classes=4):
    from fedjax_appeal.data.sources import Dataset

    n = per_class * classes
    # x holds the row id, so every row of every split can be traced back
    return Dataset("toy", np.arange(n, dtype=np.float32)[:, None],
                   np.repeat(np.arange(classes), per_class), classes, scale=1.0)


@pytest.mark.parametrize("major", ["shared", "random"])
def test_equal_size_federation_sizes_shares_majors(major):
    from fedjax_appeal.data.generated import imbalanced_federation
    from fedjax_appeal.data.heterogeneity import equal_size_counts

    ds = _toy_pool()
    cfg = RunConfig(imbalance_ratios="1.0x1,0.1x1,0.01x2", imbalance_size=40,
                    imbalance_major=major, imbalance_test_per_class=2,
                    global_test_per_class=10, clients=120, unseen_clients=0)
    fd = imbalanced_federation(ds, cfg, np.random.default_rng(0))
    ratio = np.asarray(fd.info["imbalance_ratio"])
    majors = np.asarray(fd.info["major"])
    assert np.asarray(fd.train.count).tolist() == [40] * 120
    used = set()
    for k in range(120):
        xk, yk = fd.train.client_numpy(k)
        counts = np.bincount(yk, minlength=4)
        by_rank = equal_size_counts(40, float(ratio[k]), 4)
        assert sorted(counts.tolist(), reverse=True) == by_rank.tolist()
        if ratio[k] < 1:
            assert counts.argmax() == majors[k]
        xt, yt = fd.test.client_numpy(k)
        assert np.bincount(yt, minlength=4).tolist() == [2, 2, 2, 2]
        used |= set(xt[:, 0].astype(int).tolist()) | set(xk[:, 0].astype(int).tolist())
    if major == "shared":
        assert set(majors.tolist()) == {0}
    else:
        assert set(majors.tolist()) == {0, 1, 2, 3}
    xg, yg = fd.global_test.client_numpy(0)
    assert np.bincount(yg, minlength=4).tolist() == [10] * 4
    assert not used & set(xg[:, 0].astype(int).tolist())  # held out from every client


# ----------------------------------------------------------------------------- flip protocols


@pytest.mark.slow
def test_flipped_copies_and_bernoulli_counts():
    from fedjax_appeal.data.generated import imbalanced_federation
    from fedjax_appeal.select.selection import flip_cohort

    ds = _toy_pool()
    cfg = RunConfig(imbalance_ratios="1.0", imbalance_size=20, imbalance_test_per_class=2,
                    clients=10, unseen_clients=0, label_flip_fraction=1 / 3,
                    flip_protocol="bernoulli", flip_ratio=1.0)
    fd = imbalanced_federation(ds, cfg, np.random.default_rng(0))
    assert fd.num_clients == 20
    assert np.asarray(fd.info["flipped"]).tolist() == [False] * 10 + [True] * 10
    for k in range(10):
        x0, y0 = fd.train.client_numpy(k)
        x1, y1 = fd.train.client_numpy(10 + k)
        np.testing.assert_array_equal(x0, x1)  # same rows ...
        assert np.all(y0 != y1)  # ... every label wrong (flip ratio 1)
        assert np.all(y0 == x0[:, 0].astype(int) // 300)  # clean copy keeps true labels
    pool = jnp.ones(20, bool)
    keys = jax.random.split(jax.random.key(0), 3000)
    m, p = 6, 1 / 3
    idx, valid = jax.vmap(lambda k: flip_cohort(k, pool, m, p, "bernoulli"))(keys)
    idx = np.asarray(idx)
    assert np.asarray(valid).all()
    assert all(len(set((row % 10).tolist())) == m for row in idx[:200])  # distinct clients
    n_flip = (idx >= 10).sum(1)
    # mean flipped share: p within 4 standard errors of Binomial(3000 x 6, 1/3)
    assert abs(n_flip.mean() / m - p) < 4 * np.sqrt(p * (1 - p) / (m * 3000))
    # per-round counts follow Binomial(6, 1/3): 0..6 -> 64, 192, 240, 160, 60, 12, 1 / 729
    pmf = np.array([64, 192, 240, 160, 60, 12, 1]) / 729
    freq = np.bincount(n_flip, minlength=7) / 3000
    np.testing.assert_allclose(freq, pmf, atol=0.03)
    fixed, _ = jax.vmap(lambda k: flip_cohort(k, pool, m, p, "fixed"))(keys[:200])
    assert ((np.asarray(fixed) >= 10).sum(1) == 2).all()


# ----------------------------------------------------------------------------- global test set


def test_global_test_accuracy_on_a_toy():
    from fedjax_appeal.algorithms import global_evaluator
    from fedjax_appeal.core.models import make_model
    from fedjax_appeal.core.round import ServerState
    from tests.conftest import arrays_from_clients, make_tiny_data

    rng = np.random.default_rng(4)
    data = make_tiny_data(num_clients=3, dim=5, classes=3)
    xg = rng.normal(size=(40, 5)).astype(np.float32)
    yg = rng.integers(0, 3, 40)
    data = data.replace(global_test=arrays_from_clients([xg], [yg]))
    model = make_model("logistic", "toy", 3, (5,), jnp.float32, scale=1.0)
    params, mstate = model.init(jax.random.key(1))
    state = ServerState(params, mstate, None, jnp.zeros((), jnp.int32), jnp.ones(3, bool),
                        jnp.zeros(3, jnp.int32), {})
    out = global_evaluator(model)(state, data, None)
    w = np.asarray(params["Dense_0"]["kernel"])
    b = np.asarray(params["Dense_0"]["bias"])
    acc = np.mean(np.argmax(xg @ w + b, 1) == yg)
    assert 0 < acc < 1
    assert float(out["metrics"]["test_acc_global"]) == pytest.approx(acc, abs=1e-6)


# ----------------------------------------------------------------------------- FedFor


def test_fedfor_local_steps_by_hand():
    from fedjax_appeal.algorithms import build
    from fedjax_appeal.data import FederatedData
    from tests.conftest import arrays_from_clients, linear_model

    model = linear_model(2)
    xs = [np.array([[1.0, 2.0]], np.float32), np.array([[-1.0, 0.5]], np.float32)]
    ys = [np.array([1.0], np.float32), np.array([-2.0], np.float32)]
    arr = arrays_from_clients(xs, ys)
    data = FederatedData(train=arr, test=arr, num_classes=1, name="lin")
    cfg = RunConfig(algorithm="fedfor", clients=2, unseen_clients=0, cohort=2, local_steps=1,
                    batch_size=3)
    lr, lam = 0.1, 0.5
    hp = HParams(client_lr=lr, fedfor_lambda=lam).as_arrays()
    alg = build("fedfor", model, cfg)
    s0 = alg.init(jax.random.key(0), data, hp)
    w0 = np.asarray(s0.params["Dense_0"]["kernel"])[:, 0].astype(np.float64)
    rnd = jax.jit(alg.round)
    s1, _ = rnd(s0, data, jax.random.key(1), hp)
    s2, _ = rnd(s1, data, jax.random.key(2), hp)
    X = np.concatenate(xs).astype(np.float64)
    Y = np.concatenate(ys).astype(np.float64)

    def grad(w, k):  # d/dw 0.5 (w.x - y)^2
        return (w @ X[k] - Y[k]) * X[k]

    # round 1: g_0 = 0 -> plain local SGD, equal sizes -> the mean
    w1 = np.mean([w0 - lr * grad(w0, k) for k in range(2)], axis=0)
    # round 2: every local gradient gets lambda g_1, g_1 = (w0 - w1) / (tau lr)
    g1 = (w0 - w1) / (1 * lr)
    w2 = np.mean([w1 - lr * (grad(w1, k) + lam * g1) for k in range(2)], axis=0)
    np.testing.assert_allclose(np.asarray(s1.params["Dense_0"]["kernel"])[:, 0], w1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(s2.params["Dense_0"]["kernel"])[:, 0], w2, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(s2.extra["fedfor_g"]["Dense_0"]["kernel"])[:, 0], w1 - w2, rtol=1e-5)
