"""The appeal protocol: metrics vs numpy by hand, opt-out pool, fine-tuning, CLI keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import arrays_from_clients, linear_model, make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.arrays import FederatedData
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.data import load_federated
from fedjax_appeal.evaluate.evaluation import ClientEval  # noqa: E402
from fedjax_appeal.local.solo import (
    SoloStats,  # noqa: E402
    solo_stats,
)
from fedjax_appeal.protocols.appeal.appeal import (  # noqa: E402
    APPEAL_DEFS,
    AppealState,
    appeal_metrics,
    appeal_pool,
    appeal_requirement,
    appeal_stats,
    personalize,
    with_appeal,
)


def _per_client_numpy(model, params, st, arrays):
    loss, acc = [], []
    for k in range(arrays.num_clients):
        x, y = arrays.client_numpy(k)
        logits, _ = model.apply(params, st, jnp.asarray(x), train=False)
        lp = np.asarray(jax.nn.log_softmax(logits))
        loss.append(-np.mean(lp[np.arange(len(y)), y]))
        acc.append(np.mean(np.argmax(lp, -1) == y))
    return np.array(loss), np.array(acc)


def _lsq_two_clients():
    # F_0(w) = 0.5 (w - 2)^2, F_1(w) = 0.5 (2w + 1)^2 (identical rows: exact losses)
    tr = arrays_from_clients([np.array([[1.0]], np.float32), np.full((3, 1), 2.0, np.float32)],
                             [np.array([2.0]), np.full(3, -1.0)])
    return FederatedData(train=tr, test=tr, num_classes=1, name="lsq")


_SOLO = SoloStats(train_loss=jnp.array([0.5, 1.0, 2.0]), train_acc=jnp.array([1.0, 1.0, 1.0]),
                  test_loss=jnp.array([0.8, 1.2, 1.0]), test_acc=jnp.array([0.9, 0.8, 0.7]),
                  minibatch_loss=jnp.array([0.7, 0.9, 2.5]))


# by hand: (appeal per client, GM-Appeal, preferred accuracy) for global train losses
# (0.6, 0.9, 1.5), test losses (0.7, 1.3, 2.2) and test accuracies (0.6, 0.5, 0.4)
_BY_HAND = {
    "test-vs-solo-test": ([1, 0, 0], 1 / 3, (0.6 + 0.8 + 0.7) / 3),
    "test-vs-solo-train": ([0, 0, 0], 0.0, (0.9 + 0.8 + 0.7) / 3),
    "train-vs-solo-train": ([0, 1, 1], 2 / 3, (0.9 + 0.5 + 0.4) / 3),
    "train-vs-solo-minibatch": ([1, 0, 1], 2 / 3, (0.6 + 0.8 + 0.4) / 3),
}


def test_appeal_stats_by_hand():
    loss = jnp.array([1.0, 2.0, 3.0, 1.5])
    req = jnp.array([1.5, 1.5, 4.0, 1.5])  # client 3 ties: not appealed (strict)
    acc = jnp.array([0.9, 0.8, 0.7, 0.6])
    solo = jnp.array([0.5, 0.95, 0.6, 0.65])
    appeal, gm, pref = appeal_stats(loss, acc, req, solo)
    assert np.asarray(appeal).tolist() == [True, False, True, False]
    assert float(gm) == pytest.approx(0.5)
    assert float(pref) == pytest.approx((0.9 + 0.95 + 0.7 + 0.65) / 4)


@pytest.mark.parametrize("appeal_def", ["test-vs-solo-test", "test-vs-solo-train",
                                        "train-vs-solo-train", "train-vs-solo-minibatch"])
@pytest.mark.slow
def test_metrics_equal_numpy_by_hand(appeal_def):
    data = make_tiny_data(num_clients=6, unseen=4, seed=1)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    cfg = RunConfig(clients=6, unseen_clients=4, cohort=3, local_steps=3, batch_size=4,
                    rho_steps=4, appeal_def=appeal_def, opt_out_after=0)
    hp = HParams(client_lr=0.3).as_arrays()
    alg = with_appeal(build("fedavg", model, cfg), model, cfg)
    state = jax.jit(alg.init)(jax.random.key(0), data, hp)
    step = jax.jit(alg.round)
    for r in range(4):
        state, _ = step(state, data, jax.random.key(r), hp)
    ev = jax.jit(alg.evaluate)(state, data, hp)["metrics"]
    info = state.protocol
    for tag, tr, te in (("seen", data.train, data.test),
                        ("unseen", data.unseen_train, data.unseen_test)):
        solo = getattr(info, f"solo_{tag}")
        te_loss, te_acc = _per_client_numpy(model, state.params, state.model_state, te)
        tr_loss, _ = _per_client_numpy(model, state.params, state.model_state, tr)
        loss = te_loss if appeal_def.startswith("test-") else tr_loss
        req = np.asarray({"test-vs-solo-test": solo.test_loss,
                          "test-vs-solo-train": solo.train_loss,
                          "train-vs-solo-train": solo.train_loss,
                          "train-vs-solo-minibatch": solo.minibatch_loss}[appeal_def])
        appeal = loss < req
        pref = np.where(appeal, te_acc, np.asarray(solo.test_acc))
        np.testing.assert_allclose(float(ev[f"gm_appeal_{tag}"]), appeal.mean(), atol=1e-6)
        np.testing.assert_allclose(float(ev[f"preferred_acc_{tag}"]), pref.mean(), rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(ev[f"appeal_{tag}"]), appeal.astype(float))
        np.testing.assert_allclose(float(ev[f"train_loss_{tag}_mean"]), tr_loss.mean(),
                                   rtol=1e-5)
        np.testing.assert_allclose(float(ev[f"test_loss_{tag}_mean"]), te_loss.mean(),
                                   rtol=1e-5)
    # the solo models of the unseen clients are trained on the unseen clients' data
    assert info.solo_unseen.test_acc.shape == (4,)


def test_flexible_participation_leave_and_return():
    data = _lsq_two_clients()
    model = linear_model()
    cfg = RunConfig(clients=2, unseen_clients=0, cohort=2, local_steps=1, batch_size=1,
                    rho_steps=1, opt_out_after=3, algorithm="fedavg",
                    appeal_def="train-vs-solo-train", requirement="1.0")
    hp = HParams(client_lr=1e-4).as_arrays()  # tiny steps: w stays where we put it
    alg = with_appeal(build("fedavg", model, cfg), model, cfg)
    state = alg.init(jax.random.key(0), data, hp)
    state = state.replace(protocol=state.protocol._replace(rho_seen=jnp.array([1.2, 2.5])))
    step = jax.jit(alg.round)

    def at(w, r):
        params = jax.tree.map(lambda a: jnp.full_like(a, w), state.params)
        return step(state.replace(params=params, round=jnp.int32(r)), data, jax.random.key(r),
                    hp)

    # w = 0.5: F = (1.125, 2.0) < (1.2, 2.5): both appealed;  w = 2: F = (0, 12.5)
    new, m = at(2.0, 1)  # before R0 = 3 everyone is available
    assert new.pool.tolist() == [True, True] and int(m["cohort_size"]) == 2
    assert int(m["appealed"]) == 1
    new, m = at(0.5, 3)
    assert new.pool.tolist() == [True, True] and int(m["available"]) == 2
    new, m = at(2.0, 4)  # client 1 is no longer appealed: it leaves
    assert new.pool.tolist() == [True, False] and int(m["available"]) == 1
    assert int(m["cohort_size"]) == 1 and new.participation.tolist() == [1, 0]
    assert np.asarray(m["cohort_weights"]).tolist().count(0.0) == 1
    new, m = at(0.5, 5)  # ... and returns once the model appeals to it again
    assert new.pool.tolist() == [True, True] and int(m["cohort_size"]) == 2
    new, m = at(-0.5, 6)  # F = (3.125, 0): now client 0 leaves
    assert new.pool.tolist() == [False, True]


def test_opt_out_trains_only_on_appealed_clients():
    data = _lsq_two_clients()
    model = linear_model()
    cfg = RunConfig(clients=2, unseen_clients=0, cohort=2, local_steps=1, batch_size=1,
                    rho_steps=1, opt_out_after=1, algorithm="fedavg",
                    appeal_def="train-vs-solo-train", requirement="1.0")
    hp = HParams(client_lr=0.1).as_arrays()
    alg = with_appeal(build("fedavg", model, cfg), model, cfg)
    state = alg.init(jax.random.key(0), data, hp)
    info = state.protocol._replace(rho_seen=jnp.array([1.2, 0.1]))
    params = jax.tree.map(lambda a: jnp.full_like(a, 0.5), state.params)
    state = state.replace(params=params, round=jnp.int32(1),
                          protocol=info)
    state, m = jax.jit(alg.round)(state, data, jax.random.key(0), hp)
    # only client 0 (F_0 = 1.125 < 1.2) trains: one step 0.5 -> 0.65
    assert float(jax.tree.leaves(state.params)[0].reshape(())) == pytest.approx(0.65, abs=1e-6)
    assert state.participation.tolist() == [1, 0]


@pytest.mark.slow
def test_personalize_equals_finetuned_solo_stats():
    data = make_tiny_data(num_clients=5, unseen=3, seed=2)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    cfg = RunConfig(clients=5, unseen_clients=3, cohort=2, local_steps=2, batch_size=4,
                    rho_steps=3, finetune_steps=4, opt_out_after=0)
    hp = HParams(client_lr=0.3).as_arrays()
    alg = with_appeal(build("fedavg", model, cfg), model, cfg)
    state = alg.init(jax.random.key(0), data, hp)
    key = jax.random.key(9)
    out = jax.jit(lambda s, k: personalize(model, cfg, s, data, k, hp))(state, key)
    k_ft = jax.random.fold_in(key, 0xF17E)
    info = state.protocol
    for i, (tag, tr, te) in enumerate((("seen", data.train, data.test),
                                       ("unseen", data.unseen_train, data.unseen_test))):
        ft = solo_stats(model, state.params, state.model_state, tr, te,
                        jax.random.fold_in(k_ft, i), hp.client_lr, steps=4, batch_size=4)
        solo = getattr(info, f"solo_{tag}")
        appeal = np.asarray(ft.test_loss) < np.asarray(solo.test_loss)
        pref = np.where(appeal, np.asarray(ft.test_acc), np.asarray(solo.test_acc))
        assert float(out[f"gm_appeal_ft_{tag}"]) == pytest.approx(appeal.mean())
        assert float(out[f"preferred_acc_ft_{tag}"]) == pytest.approx(pref.mean(), rel=1e-5)
        assert float(out[f"test_acc_ft_{tag}"]) == pytest.approx(float(ft.test_acc.mean()),
                                                                 rel=1e-5)


def test_flipped_and_byzantine_fractions_as_configured():
    cfg = RunConfig(dataset="synthetic", partition="natural", clients=20, unseen_clients=10,
                    min_samples=4, label_flip_fraction=0.3, byzantine_fraction=0.1, seed=1)
    data, _ = load_federated(cfg)
    assert int(data.info["flipped"].sum()) == 6 and int(data.unseen_info["flipped"].sum()) == 3
    assert int(data.info["byzantine"].sum()) == 2
    assert "byzantine" not in data.unseen_info


@pytest.mark.parametrize("appeal_def", sorted(_BY_HAND))
def test_each_appeal_def_on_three_clients_by_hand(appeal_def):
    assert set(_BY_HAND) == set(APPEAL_DEFS)
    cfg = RunConfig(appeal_def=appeal_def)
    n = jnp.ones(3)
    ev = {"train": ClientEval(jnp.array([0.6, 0.9, 1.5]), jnp.array([0.7, 0.7, 0.7]), n),
          "test": ClientEval(jnp.array([0.7, 1.3, 2.2]), jnp.array([0.6, 0.5, 0.4]), n)}
    info = AppealState(_SOLO, _SOLO.train_loss)
    out = appeal_metrics(cfg, info, ev)
    appeal, gm, pref = _BY_HAND[appeal_def]
    assert np.asarray(out["appeal_seen"]).tolist() == appeal
    assert float(out["gm_appeal_seen"]) == pytest.approx(gm)
    assert float(out["preferred_acc_seen"]) == pytest.approx(pref)
    # a given --requirement replaces r_k under every definition
    given = appeal_metrics(cfg.replace(requirement="1.0"),
                           info._replace(rho_seen=jnp.full(3, 1.0)), ev)
    loss = [0.7, 1.3, 2.2] if appeal_def.startswith("test") else [0.6, 0.9, 1.5]
    assert np.asarray(given["appeal_seen"]).tolist() == [float(v < 1.0) for v in loss]


@pytest.mark.parametrize("appeal_def", sorted(_BY_HAND))
def test_opt_out_pool_uses_the_same_definition(appeal_def):
    # w = 1, one row per client: train y = (0, 1, 3), test y = (0.5, 2, 3)
    # -> F(w) = 0.5 (w - y)^2 = (0.5, 0, 2) on train, (0.125, 0.5, 2) on test
    one = lambda ys: arrays_from_clients([np.ones((1, 1), np.float32)] * 3,  # noqa: E731
                                         [np.array([y], np.float32) for y in ys])
    data = FederatedData(train=one([0.0, 1.0, 3.0]), test=one([0.5, 2.0, 3.0]), num_classes=1,
                         name="lsq3")
    model = linear_model()
    params, mstate = model.init(jax.random.key(0))
    params = jax.tree.map(lambda a: jnp.ones_like(a), params)
    from fedjax_appeal.aggregate.server import server_optimizer
    from fedjax_appeal.core.round import init_state

    state = init_state(params, mstate, server_optimizer("sgd", HParams()), 3)
    req = appeal_requirement(appeal_def, _SOLO, _SOLO.train_loss, given=False)
    loss = [0.125, 0.5, 2.0] if appeal_def.startswith("test") else [0.5, 0.0, 2.0]
    want = [bool(a < b) for a, b in zip(loss, np.asarray(req).tolist(), strict=True)]
    pool, appealed = appeal_pool(model, state.replace(round=jnp.int32(5)), data, req, 3,
                                 appeal_def)
    assert np.asarray(appealed).tolist() == want and np.asarray(pool).tolist() == want
    pool, _ = appeal_pool(model, state.replace(round=jnp.int32(2)), data, req, 3, appeal_def)
    assert np.asarray(pool).tolist() == [True] * 3  # everyone before the opt-out round
