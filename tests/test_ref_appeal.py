"""Appeal protocol, Byzantine clients and history metrics against hand computations.

* Solo statistics (MaxFL, Cho et al. TMLR, Sec. 3): every client's solo model after
  `rho_steps` SGD steps equals a plain numpy SGD on least squares; its train, test and
  minibatch losses are evaluated on the right split (seen and unseen clients).
* Flexible participation: a client exactly at its requirement does not find the model
  appealing (L_k < r_k is strict); the pool is everyone before round R0 and exactly the
  appealed clients from R0 on, whatever the previous pool (a client that left comes back).
* Byzantine clients: Delta_k + sigma xi with xi ~ N(0, I) (moment check with stated
  tolerances), honest clients untouched, reported losses scaled.
* `metrics.summarize`: every history key by hand on a 3-client toy.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from conftest import arrays_from_clients, linear_model

from fedjax_appeal.aggregate.adversary import byzantine
from fedjax_appeal.aggregate.server import server_optimizer
from fedjax_appeal.core.arrays import FederatedData
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.round import ClientUpdate, init_state
from fedjax_appeal.evaluate.evaluation import ClientEval
from fedjax_appeal.evaluate.metrics import summarize
from fedjax_appeal.protocols.appeal.appeal import appeal_pool
from fedjax_appeal.protocols.appeal.requirement import seen_solo, unseen_solo

RNG = np.random.default_rng(11)
XS = RNG.normal(size=(5, 2)).astype(np.float32)  # client k's (repeated) train input
YS = RNG.normal(size=5).astype(np.float32)
SIZES = [3, 6, 2, 4, 5]


def _split(ks, test: bool):
    xs, ys = [], []
    for k in ks:
        if test:  # varied test rows, unlike the train rows
            x = RNG.normal(size=(SIZES[k] + 1, 2)).astype(np.float32)
            y = RNG.normal(size=SIZES[k] + 1).astype(np.float32)
        else:
            x = np.repeat(XS[k:k + 1], SIZES[k], 0)
            y = np.full(SIZES[k], YS[k], np.float32)
        xs.append(x)
        ys.append(y)
    return arrays_from_clients(xs, ys)


def test_solo_statistics_equal_numpy_sgd_on_their_splits():
    seen, unseen = [0, 1, 2], [3, 4]
    data = FederatedData(train=_split(seen, False), test=_split(seen, True),
                         unseen_train=_split(unseen, False), unseen_test=_split(unseen, True),
                         num_classes=1, name="toy")
    model = linear_model(2)
    steps, lr = 4, 0.2
    cfg = RunConfig(rho_steps=steps, batch_size=3)
    hp = HParams(client_lr=lr, solo_lr=0.0).as_arrays()
    params, ms = model.init(jax.random.key(0))
    w0 = np.asarray(params["Dense_0"]["kernel"], np.float64)[:, 0]
    for fn, ks, te in ((seen_solo, seen, data.test), (unseen_solo, unseen, data.unseen_test)):
        st = fn(model, cfg, params, ms, data, jax.random.key(3), hp)
        for i, k in enumerate(ks):
            w, mb = w0.copy(), []
            for _ in range(steps):
                r = w @ XS[k] - YS[k]
                mb.append(0.5 * r * r)
                w = w - lr * r * XS[k]
            x_te, y_te = te.client_numpy(i)
            want = {"train_loss": 0.5 * (w @ XS[k] - YS[k]) ** 2,
                    "test_loss": np.mean(0.5 * (x_te @ w - y_te) ** 2),
                    "minibatch_loss": np.mean(mb)}
            assert abs(want["test_loss"] - want["train_loss"]) > 1e-2  # the splits differ
            for name, v in want.items():
                np.testing.assert_allclose(float(getattr(st, name)[i]), v, rtol=1e-4,
                                           atol=1e-6, err_msg=f"{fn.__name__} {name} {k}")


def test_opt_out_boundary_and_opt_in():
    # model 0 predicts 0: client k's test loss is exactly 0.5 y_k^2 (exact in float32)
    ys = [1.0, 2.0, 1.0, 0.5]
    xs = [np.ones((3, 1), np.float32) for _ in ys]
    arr = arrays_from_clients(xs, [np.full(3, y, np.float32) for y in ys])
    data = FederatedData(train=arr, test=arr, num_classes=1, name="toy")
    model = linear_model(1)
    params, ms = model.init(jax.random.key(0))
    params = jax.tree.map(jnp.zeros_like, params)
    hp = HParams().as_arrays()
    state = init_state(params, ms, server_optimizer("sgd", hp), 4)
    losses = np.array([0.5, 2.0, 0.5, 0.125])
    req = jnp.asarray([0.5, 2.5, 0.4, 0.5], jnp.float32)  # at, above, below, above
    want = losses < np.asarray(req)
    assert want.tolist() == [False, True, False, True]
    r0 = 3
    for rnd, prev in itertools.product((r0 - 1, r0, r0 + 4), (True, False)):
        st = state.replace(round=jnp.asarray(rnd, jnp.int32),
                           pool=jnp.full((4,), prev))  # a client that left can come back
        pool, appealed = appeal_pool(model, st, data, req, r0, "test-vs-solo-test")
        assert np.asarray(appealed).tolist() == want.tolist()
        expect = [True] * 4 if rnd < r0 else want.tolist()
        assert np.asarray(pool).tolist() == expect, (rnd, prev)


def test_byzantine_noise_distribution_and_scaled_losses():
    sigma, scale, p = 0.7, 10.0, 4000
    m = 4
    bad = np.array([True, False, True, False])
    arr = arrays_from_clients([np.ones((2, 1), np.float32)] * 6,
                              [np.zeros(2, np.float32)] * 6)
    data = FederatedData(train=arr, test=arr, num_classes=1, name="toy",
                         info={"byzantine": jnp.asarray([False, True, False, False, True,
                                                         False])})
    idx = jnp.array([1, 0, 4, 3])  # cohort slots 0 and 2 are Byzantine clients
    base = np.arange(m * p, dtype=np.float32).reshape(m, p) / p
    upd = ClientUpdate(delta={"a": jnp.asarray(base[:, :p // 2]),
                              "b": jnp.asarray(base[:, p // 2:].reshape(m, 4, -1))},
                       model_state={}, num_samples=jnp.full((m,), 2), loss=jnp.ones(m),
                       loss_before=jnp.full((m,), 2.0), loss_after=jnp.full((m,), 1.0),
                       fednova_a=jnp.ones(m), report=jnp.ones(m))
    hp = HParams(byzantine_noise=sigma, byzantine_loss_scale=scale).as_arrays()
    out = byzantine(upd, idx, jnp.ones(m, bool), jax.random.key(0), data, hp)
    got = np.concatenate([np.asarray(out.delta["a"]),
                          np.asarray(out.delta["b"]).reshape(m, -1)], axis=1)
    noise = got - base
    np.testing.assert_array_equal(noise[~bad], 0.0)  # honest clients untouched
    for row in noise[bad]:
        # mean: |mean| < 5 sigma / sqrt(p); std: within 6% (its s.e. is ~ sigma/sqrt(2p),
        # 1.1%); fourth moment / sigma^4 near 3 (Gaussian) within 0.5
        assert abs(row.mean()) < 5 * sigma / np.sqrt(p)
        assert abs(row.std() / sigma - 1.0) < 0.06
        assert abs(np.mean(row ** 4) / row.var() ** 2 - 3.0) < 0.5
    assert abs(np.corrcoef(noise[0], noise[2])[0, 1]) < 5 / np.sqrt(p)  # independent draws
    f = np.where(bad, scale, 1.0)
    np.testing.assert_allclose(np.asarray(out.loss_before), 2.0 * f)
    np.testing.assert_allclose(np.asarray(out.loss_after), 1.0 * f)
    np.testing.assert_allclose(np.asarray(out.loss), f)
    np.testing.assert_allclose(np.asarray(out.fednova_a), 1.0)  # other reports untouched
    np.testing.assert_allclose(np.asarray(out.report), 1.0)


def test_history_metrics_by_hand():
    ev = {
        "train": ClientEval(loss=jnp.array([1.0, 2.0, 4.0]), acc=jnp.array([0.5, 0.25, 1.0]),
                            count=jnp.array([2, 6, 2])),
        "test": ClientEval(loss=jnp.array([0.5, 1.5, 3.0]), acc=jnp.array([0.5, 1.0, 0.25]),
                           count=jnp.array([2, 4, 4])),
        "unseen_test": ClientEval(loss=jnp.array([2.0, 1.0]), acc=jnp.array([0.2, 0.8]),
                                  count=jnp.array([5, 1])),
        "metrics": {"gm_appeal_seen": jnp.asarray(2 / 3), "appeal_seen": jnp.ones(3)},
    }
    out = summarize(ev)
    acc = np.array([50.0, 100.0, 25.0])
    pairs = [abs(a - b) for a, b in itertools.combinations(acc, 2)]
    want = {
        "train_loss": (2 * 1 + 6 * 2 + 2 * 4) / 10,  # sample-weighted
        "train_acc": (2 * 0.5 + 6 * 0.25 + 2 * 1.0) / 10,
        "train_loss_clients": 7 / 3,  # mean over clients
        "test_loss_seen": 5 / 3,
        "test_acc_seen": 1.75 / 3,  # every client counts once
        "test_acc_seen_pooled": (1 + 4 + 1) / 10,
        "test_loss_unseen": 1.5,
        "test_acc_unseen": 0.5,
        "test_acc_unseen_pooled": (5 * 0.2 + 0.8) / 6,
        "client_dissimilarity": np.sqrt(np.mean((acc - acc.mean()) ** 2)),
        "client_dissimilarity_range": 75.0,
        "client_dissimilarity_mad": np.mean(pairs),
        "gm_appeal_seen": 2 / 3,
    }
    assert set(out) == set(want)  # per-client arrays are not history scalars
    for k, v in want.items():
        np.testing.assert_allclose(out[k], v, rtol=1e-6, err_msg=k)
