"""The round: vmapped cohort == sequential loop; FedAvg/FedProx against hand numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import arrays_from_clients, linear_model

from fedjax_appeal.algorithms import build
from fedjax_appeal.algorithms.fedavg import sgd_local
from fedjax_appeal.core.arrays import FederatedData
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.parts import ClientUpdate
from fedjax_appeal.evaluate.evaluation import evaluate_split
from fedjax_appeal.local.client import client_loss, local_sgd, reporting


def _cfg(**kw):
    base = dict(clients=6, unseen_clients=0, cohort=4, local_steps=3, batch_size=4, rounds=2)
    base.update(kw)
    return RunConfig(**base)


def test_vmapped_cohort_equals_python_loop(tiny_data, tiny_model):
    cfg = _cfg()
    hp = HParams(client_lr=0.3).as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), tiny_data, hp)
    local = reporting(tiny_model, sgd_local(tiny_model, cfg))
    idx = jnp.array([4, 0, 5, 2])
    keys = jax.random.split(jax.random.key(7), 4)
    vm = jax.jit(jax.vmap(local, in_axes=(None, None, 0, 0, None)))(state, tiny_data, idx, keys,
                                                                     hp)
    for j in range(4):
        one = local(state, tiny_data, idx[j], keys[j], hp)
        for a, b in zip(jax.tree.leaves(one.delta), jax.tree.leaves(vm.delta), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b[j]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(one.loss), float(vm.loss[j]), rtol=1e-5)
        assert int(vm.num_samples[j]) == int(tiny_data.train.count[idx[j]])


def _lsq_data():
    # client 0: one row (x=1, y=2); client 1: three copies of (x=2, y=-1). Identical rows
    # make every minibatch gradient exact, whatever rows the sampler draws.
    tr = arrays_from_clients([np.array([[1.0]], np.float32), np.full((3, 1), 2.0, np.float32)],
                             [np.array([2.0]), np.full(3, -1.0)])
    return FederatedData(train=tr, test=tr, num_classes=1, name="lsq")


def _set_w(state, w):
    params = jax.tree.map(lambda a: jnp.full_like(a, w), state.params)
    return state.replace(params=params)


@pytest.mark.parametrize("server_lr,expected", [(1.0, 0.09125), (0.5, 0.295625)])
def test_fedavg_least_squares_by_hand(server_lr, expected):
    # w0 = 0.5, lr 0.1, tau 2, loss 0.5 (w x - y)^2:
    #   client 0: 0.5 -> 0.65 -> 0.785;  client 1: 0.5 -> 0.1 -> -0.14
    #   FedAvg (n = 1, 3): 0.5 - lr_s * (1/4 (0.5 - 0.785) + 3/4 (0.5 + 0.14))
    model = linear_model()
    data = _lsq_data()
    cfg = _cfg(clients=2, cohort=2, local_steps=2, batch_size=2)
    hp = HParams(client_lr=0.1, server_lr=server_lr).as_arrays()
    alg = build("fedavg", model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, metrics = alg.round(state, data, jax.random.key(1), hp)
    w = float(jax.tree.leaves(state.params)[0].reshape(()))
    assert w == pytest.approx(expected, abs=1e-6)
    assert int(metrics["cohort_size"]) == 2
    assert state.participation.tolist() == [1, 1]


def _reference_fedavg(w, rows, lr, tau, rounds, mu=0.0):
    """Plain-Python FedAvg/FedProx on 1-d least squares, full cohort."""
    for _ in range(rounds):
        new, tot = 0.0, 0
        for x, y, n in rows:
            v = w
            for _ in range(tau):
                v -= lr * ((v * x - y) * x + mu * (v - w))
            new += n * v
            tot += n
        w = new / tot
    return w


@pytest.mark.parametrize("algo,mu", [("fedavg", 0.0), ("fedprox", 0.7)])
def test_several_rounds_match_sequential_reference(algo, mu):
    model = linear_model()
    data = _lsq_data()
    cfg = _cfg(clients=2, cohort=2, local_steps=3, batch_size=2, algorithm=algo)
    hp = HParams(client_lr=0.05, prox_mu=mu).as_arrays()
    alg = build(algo, model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), -0.3)
    step = jax.jit(alg.round)
    for r in range(4):
        state, _ = step(state, data, jax.random.key(r), hp)
    w = float(jax.tree.leaves(state.params)[0].reshape(()))
    ref = _reference_fedavg(-0.3, [(1.0, 2.0, 1), (2.0, -1.0, 3)], 0.05, 3, 4, mu)
    assert w == pytest.approx(ref, abs=1e-5)


def test_cohort_respects_availability_mask(tiny_data, tiny_model):
    cfg = _cfg(cohort=4)
    hp = HParams().as_arrays()
    alg = build("fedavg", tiny_model, cfg)
    state = alg.init(jax.random.key(0), tiny_data, hp)
    pool = jnp.array([False, True, False, True, False, False])
    state = state.replace(pool=pool)
    step = jax.jit(alg.round)
    for r in range(5):
        state, m = step(state, tiny_data, jax.random.key(r), hp)
        assert int(m["cohort_size"]) == 2  # only two clients available
    part = np.asarray(state.participation)
    assert part[[1, 3]].tolist() == [5, 5] and part[[0, 2, 4, 5]].sum() == 0


def test_local_sgd_draws_only_own_rows():
    # Client 1's rows all have label 1 and x = 1: a single step must see only those rows.
    tr = arrays_from_clients([np.zeros((5, 1), np.float32), np.ones((3, 1), np.float32)],
                             [np.zeros(5), np.ones(3)])
    model = linear_model()
    params, st = model.init(jax.random.key(0))
    params = jax.tree.map(jnp.zeros_like, params)
    res = local_sgd(model, params, st, tr, jnp.int32(1), jax.random.key(3), 1.0, steps=1,
                    batch_size=16)
    # gradient of 0.5 (0 - 1)^2 wrt w at x=1 is -1  ->  w = 1
    assert float(jax.tree.leaves(res.params)[0].reshape(())) == pytest.approx(1.0)


def test_segment_evaluation_equals_per_client_loop(tiny_data, tiny_model):
    params, st = tiny_model.init(jax.random.key(2))
    ev = jax.jit(lambda p: evaluate_split(tiny_model, p, st, tiny_data.train, chunk=7))(params)
    for k in range(tiny_data.num_clients):
        x, y = tiny_data.train.client_numpy(k)
        logits, _ = tiny_model.apply(params, st, jnp.asarray(x), train=False)
        lp = jax.nn.log_softmax(logits)
        loss = -np.mean(np.asarray(lp)[np.arange(len(y)), y])
        acc = np.mean(np.argmax(np.asarray(logits), -1) == y)
        np.testing.assert_allclose(float(ev.loss[k]), loss, rtol=1e-5)
        np.testing.assert_allclose(float(ev.acc[k]), acc, rtol=1e-6)
        l2, a2 = client_loss(tiny_model, params, st, tiny_data.train, jnp.int32(k), chunk=3)
        np.testing.assert_allclose(float(l2), loss, rtol=1e-5)
        np.testing.assert_allclose(float(a2), acc, rtol=1e-6)


def test_client_update_documents_every_field():
    for name in ClientUpdate._fields:
        assert f"      {name}: " in ClientUpdate.__doc__, name
