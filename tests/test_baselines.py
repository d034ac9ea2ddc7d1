"""Baselines of the appeal experiments against hand-computed numbers and references."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import arrays_from_clients, linear_model, make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.algorithms.qffl import qffl_weights
from fedjax_appeal.cli.commands import main
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.data import FederatedData
from fedjax_appeal.run.simulate import simulate


def _lsq_data(rows):
    """One client per (x, y, n): n identical rows, so every minibatch gradient is exact."""
    xs = [np.full((n, 1), x, np.float32) for x, _, n in rows]
    ys = [np.full(n, y, np.float32) for _, y, n in rows]
    tr = arrays_from_clients(xs, ys)
    return FederatedData(train=tr, test=tr, num_classes=1, name="lsq")


def _set_w(state, w):
    return state.replace(params=jax.tree.map(lambda a: jnp.full_like(a, w), state.params))


def _w(state) -> float:
    return float(jax.tree.leaves(state.params)[0].reshape(()))


TWO = [(1.0, 2.0, 1), (2.0, -1.0, 3)]  # client 0: x=1, y=2 (1 row); client 1: x=2, y=-1


# ---------------------------------------------------------------- q-FFL


def _qffl_by_hand(w, rows, lr, q):
    """Li et al. 2020, Algorithm 2 with tau = 1 on 1-d least squares 0.5 (w x - y)^2."""
    num, den = 0.0, 0.0
    for x, y, _ in rows:
        f = 0.5 * (w * x - y) ** 2
        dw = lr * (w * x - y) * x  # w - w_k after one SGD step
        num += f ** q * dw / lr
        den += q * f ** (q - 1) * (dw / lr) ** 2 + f ** q / lr
    return w - num / den


@pytest.mark.parametrize("q,expected", [(1.0, 0.5 - 6.3125 / 49.5),
                                        (2.0, 0.5 - 14.1015625 / 121.71875),
                                        (0.0, 0.375)])
def test_qffl_server_step_by_hand(q, expected):
    # w = 0.5, eta = 0.1: F = (1.125, 2), Delta w = (-0.15, 0.4)
    #   q = 1: Delta = (-1.6875, 8), h = (2.25 + 11.25, 16 + 20)
    model = linear_model()
    data = _lsq_data(TWO)
    cfg = RunConfig(clients=2, unseen_clients=0, cohort=2, local_steps=1, batch_size=2,
                    algorithm="qffl")
    hp = HParams(client_lr=0.1, qffl_q=q).as_arrays()
    alg = build("qffl", model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, m = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    assert _w(state) == pytest.approx(expected, abs=1e-6)
    assert _w(state) == pytest.approx(_qffl_by_hand(0.5, TWO, 0.1, q), abs=1e-6)


def test_afl_is_qffl_with_its_own_q():
    model = linear_model()
    data = _lsq_data(TWO)
    cfg = RunConfig(clients=2, unseen_clients=0, cohort=2, local_steps=1, batch_size=2)
    hp = HParams(client_lr=0.1, afl_q=10.0).as_arrays()
    alg = build("afl", model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, _ = alg.round(state, data, jax.random.key(1), hp)
    assert _w(state) == pytest.approx(_qffl_by_hand(0.5, TWO, 0.1, 10.0), abs=1e-6)


def test_qffl_weights_stable_and_masked():
    valid = jnp.array([True, True, False])
    sq = jnp.array([0.04, 0.01, 5.0])
    # F = 0 with q < 1 and a huge q: finite, invalid slot gets nothing
    for q, loss in ((0.5, [0.0, 1.0, 3.0]), (60.0, [30.0, 2.0, 1e3]), (1.0, [0.0, 0.0, 1.0])):
        w = np.asarray(qffl_weights(jnp.array(loss), sq, valid, jnp.float32(q),
                                    jnp.float32(0.1)))
        assert np.all(np.isfinite(w)) and w[2] == 0.0 and np.all(w >= 0)
    # q = 60: the large-loss client dominates; ratio of weights F_0^q / F_1^q saturates to 1:0
    w = np.asarray(qffl_weights(jnp.array([30.0, 2.0, 1.0]), sq, valid, jnp.float32(60.0),
                                jnp.float32(0.1)))
    expected0 = (1 / 0.1) / (60 * 0.04 / 0.01 / 30.0 + 1 / 0.1)
    assert w[0] == pytest.approx(expected0, rel=1e-5) and w[1] < 1e-30


# ---------------------------------------------------------------- every baseline end to end

BASELINES = ["qffl", "afl", "scaffold", "mwfed", "perfedavg", "pfedme"]


def _tiny_cfg(**kw):
    base = dict(clients=6, unseen_clients=3, cohort=3, local_steps=2, batch_size=4, rounds=2,
                eval_every=1, rho_steps=3)
    base.update(kw)
    return RunConfig(**base)


@pytest.mark.slow
@pytest.mark.parametrize("name", BASELINES)
def test_two_rounds_deterministic_no_nan(name):
    data = make_tiny_data(unseen=3)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    cfg = _tiny_cfg(algorithm=name)
    alg = build(name, model, cfg)
    hp = HParams(client_lr=0.1)
    runs = [simulate(alg, data, hp, jax.random.key(3), rounds=2, eval_every=1)
            for _ in range(2)]
    h0, h1 = runs[0].history, runs[1].history
    assert [h["round"] for h in h0] == [0, 1, 2]
    assert h0 == h1
    for h in h0:
        assert all(np.isfinite(v) for v in h.values())
    assert h0[-1]["train_loss"] != h0[0]["train_loss"]  # it trained


CLI_TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "3", "--cohort",
            "2", "--rounds", "2", "--local-steps", "2", "--batch-size", "4", "--eval-every",
            "1", "--min-samples", "4", "--partition", "natural", "--rho-steps", "2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", BASELINES)
def test_cli_runs(tmp_path, name):
    out = tmp_path / name
    assert main(["run", *CLI_TINY, "--algorithm", name, "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["algorithm"] == name
    assert np.isfinite(res["history"][-1]["test_acc_unseen"])


# ---------------------------------------------------------------- SCAFFOLD


def _scaffold_reference(w, rows, cohorts, lr, tau, lr_g):
    """Plain-Python SCAFFOLD option II (Karimireddy et al. 2020) on 1-d least squares."""
    n = len(rows)
    c, ck = 0.0, [0.0] * n
    for s in cohorts:
        dws, dcs = [], []
        for k in s:
            x, y, _ = rows[k]
            v = w
            for _ in range(tau):
                v -= lr * ((v * x - y) * x + c - ck[k])
            cplus = ck[k] - c + (w - v) / (tau * lr)
            dws.append(w - v)
            dcs.append(cplus - ck[k])
            ck[k] = cplus
        w -= lr_g * sum(dws) / len(s)
        c += sum(dcs) / n
    return w, c, ck


def test_scaffold_matches_sequential_reference():
    rows = [(1.0, 2.0, 1), (2.0, -1.0, 3), (-1.0, 0.5, 2)]
    model = linear_model()
    data = _lsq_data(rows)
    cfg = RunConfig(clients=3, unseen_clients=0, cohort=2, local_steps=3, batch_size=2,
                    aggregation="uniform")
    hp = HParams(client_lr=0.05, server_lr=0.7).as_arrays()
    alg = build("scaffold", model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), -0.3)
    step = jax.jit(alg.round)
    cohorts = []
    for r in range(5):
        state, m = step(state, data, jax.random.key(r), hp)
        cohorts.append([int(i) for i in m["cohort_idx"]])
    assert len({tuple(sorted(s)) for s in cohorts}) > 1  # different cohorts were drawn
    w, c, ck = _scaffold_reference(-0.3, rows, cohorts, 0.05, 3, 0.7)
    assert _w(state) == pytest.approx(w, abs=1e-5)
    assert float(jax.tree.leaves(state.extra["c"])[0].reshape(())) == pytest.approx(c, abs=1e-5)
    np.testing.assert_allclose(np.asarray(jax.tree.leaves(state.extra["c_clients"])[0]).reshape(-1),
                               ck, atol=1e-5)


def test_scaffold_invalid_slots_leave_control_variates_alone(tiny_data, tiny_model):
    cfg = RunConfig(clients=6, unseen_clients=0, cohort=4, local_steps=2, batch_size=4)
    hp = HParams(client_lr=0.1).as_arrays()
    alg = build("scaffold", tiny_model, cfg)
    state = alg.init(jax.random.key(0), tiny_data, hp)
    state = state.replace(pool=jnp.array([True, False, True, False, False, False]))
    state, m = jax.jit(alg.round)(state, tiny_data, jax.random.key(1), hp)
    assert int(m["cohort_size"]) == 2
    cc = jax.tree.leaves(state.extra["c_clients"])[0]
    moved = np.abs(np.asarray(cc)).reshape(6, -1).max(axis=1) > 0
    assert moved.tolist() == [True, False, True, False, False, False]


# ---------------------------------------------------------------- MW-Fed


def test_mwfed_weights_and_update_by_hand():
    # w = 0.5, lr 0.1, tau 1, clients (x, y, n): F_k(w) = (1.125, 2, 0.5), Delta w = (-.15, .4, .1)
    rows = [(1.0, 2.0, 1), (2.0, -1.0, 3), (-1.0, 0.5, 2)]
    model = linear_model()
    data = _lsq_data(rows)
    cfg = RunConfig(clients=3, unseen_clients=0, cohort=3, local_steps=1, batch_size=2,
                    rho_steps=2)
    hp = HParams(client_lr=0.1, mwfed_eta=0.3).as_arrays()
    alg = build("mwfed", model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    assert state.extra["rho"].shape == (3,)
    state = state.replace(extra={**state.extra, "rho": jnp.array([1.0, 3.0, 0.4]),
                                 "mw_logv": jnp.array([0.5, 0.0, -0.2])})
    state, m = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    idx = np.asarray(m["cohort_idx"])
    vn = np.array([np.exp(0.5) * 1, 1.0 * 3, np.exp(-0.2) * 2])
    np.testing.assert_allclose(np.asarray(m["cohort_weights"]), (vn / vn.sum())[idx], rtol=1e-5)
    # requirement unmet (F > rho) for clients 0 and 2: log v += 0.3
    np.testing.assert_allclose(np.asarray(state.extra["mw_logv"]), [0.8, 0.0, 0.1], atol=1e-6)
    assert _w(state) == pytest.approx(0.5 - vn @ np.array([-0.15, 0.4, 0.1]) / vn.sum(),
                                      abs=1e-6)


# ---------------------------------------------------------------- Per-FedAvg


@pytest.mark.parametrize("variant,delta,expected", [("fo", 0.0, 0.02), ("hf", 0.0, 0.212),
                                                    ("hf", 1e-2, 0.212)])
def test_perfedavg_step_by_hand(variant, delta, expected):
    # one client, rows (x=2, y=-1): grad = 4w + 2, Hessian 4; w = 0.5, alpha 0.1, beta 0.2:
    #   tmp = 0.5 - 0.1 * 4 = 0.1; g = 2.4; FO: 0.5 - 0.2 * 2.4 = 0.02;
    #   HF: 0.5 - 0.2 * (2.4 - 0.1 * 4 * 2.4) = 0.212
    model = linear_model()
    data = _lsq_data([(2.0, -1.0, 3)])
    cfg = RunConfig(clients=1, unseen_clients=0, cohort=1, local_steps=1, batch_size=2,
                    perfedavg_variant=variant)
    hp = HParams(perfedavg_alpha=0.1, perfedavg_beta=0.2, perfedavg_delta=delta).as_arrays()
    alg = build("perfedavg", model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, _ = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    assert _w(state) == pytest.approx(expected, abs=1e-5)


@pytest.mark.slow
def test_hessian_vector_product_vs_explicit_hessian(tiny_data, tiny_model):
    from jax.flatten_util import ravel_pytree

    from fedjax_appeal.algorithms.perfedavg import hvp

    params, st = tiny_model.init(jax.random.key(0))
    x, y = tiny_data.train.client_numpy(1)
    flat, unravel = ravel_pytree(params)

    def loss(p):
        return tiny_model.loss(p, st, jnp.asarray(x), jnp.asarray(y), train=False)[0]

    hess = jax.hessian(lambda f: loss(unravel(f)))(flat)
    v = jax.random.normal(jax.random.key(1), flat.shape)
    want = np.asarray(hess @ v)
    g = jax.grad(loss)
    exact = ravel_pytree(hvp(g, params, unravel(v), jnp.float32(0.0)))[0]
    fd = ravel_pytree(hvp(g, params, unravel(v), jnp.float32(1e-2)))[0]
    np.testing.assert_allclose(np.asarray(exact), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fd), want, rtol=2e-2, atol=2e-3)


@pytest.mark.slow
def test_perfedavg_evaluates_adapted_models():
    data = make_tiny_data(unseen=3)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    cfg = _tiny_cfg(algorithm="perfedavg")
    alg = build("perfedavg", model, cfg)
    from fedjax_appeal.evaluate.evaluation import evaluate_global

    for alpha, same in ((0.0, True), (0.5, False)):
        hp = HParams(perfedavg_alpha=alpha).as_arrays()
        state = alg.init(jax.random.key(0), data, hp)
        ev = jax.jit(alg.evaluate)(state, data, hp)
        ref = evaluate_global(model, state.params, state.model_state, data)
        for split in ("train", "test", "unseen_train", "unseen_test"):
            close = np.allclose(np.asarray(ev[split].loss), np.asarray(ref[split].loss),
                                rtol=1e-5)
            assert close == same, split


# ---------------------------------------------------------------- pFedMe


def test_pfedme_inner_problem_closed_form():
    from fedjax_appeal.algorithms.pfedme import inner_solve

    # f(theta) = 0.5 (2 theta + 1)^2 per coordinate; argmin f + lam/2 (theta - w)^2 is
    # theta* = (x y + lam w) / (x^2 + lam) = (-2 + lam w) / (4 + lam)
    lam, w = 15.0, {"a": jnp.array([0.5, -1.0]), "b": jnp.array(2.0)}
    grad = jax.grad(lambda p: sum(jnp.sum(0.5 * (2 * v + 1) ** 2) for v in jax.tree.leaves(p)))
    theta = inner_solve(grad, jax.tree.map(jnp.zeros_like, w), w, lam, 0.02, 200)
    for got, wi in zip(jax.tree.leaves(theta), jax.tree.leaves(w), strict=True):
        np.testing.assert_allclose(np.asarray(got), (-2 + lam * np.asarray(wi)) / (4 + lam),
                                   rtol=1e-5)


def test_pfedme_round_by_hand():
    # one client (x=2, y=-1), w = 0.5, tau 1, K 2, lam 15, personal lr 0.02, eta 0.1, beta .5
    #   theta: 0.5 -> 0.42 -> 0.3704; w_k = 0.5 - 0.1*15*(0.5 - 0.3704) = 0.3056
    #   server: 0.5 * 0.5 + 0.5 * 0.3056 = 0.4028
    model = linear_model()
    data = _lsq_data([(2.0, -1.0, 3)])
    cfg = RunConfig(clients=1, unseen_clients=0, cohort=1, local_steps=1, batch_size=2,
                    pfedme_k=2)
    hp = HParams(client_lr=0.1, pfedme_lambda=15.0, pfedme_lr=0.02,
                 pfedme_beta=0.5).as_arrays()
    alg = build("pfedme", model, cfg)
    state = _set_w(alg.init(jax.random.key(0), data, hp), 0.5)
    state, _ = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    assert _w(state) == pytest.approx(0.4028, abs=1e-5)
    # evaluation uses the personal model theta = 0.3704 computed from the new global model
    ev = alg.evaluate(state, data, hp)
    th = 0.4028 - 0.02 * (4 * 0.4028 + 2)
    th = th - 0.02 * (4 * th + 2 + 15 * (th - 0.4028))
    assert float(ev["train"].loss[0]) == pytest.approx(0.5 * (2 * th + 1) ** 2, rel=1e-4)
