"""One federated round against a hand-written sequential reference (numpy).

Least squares with a bias-free linear model; every client's train rows are copies of one
(x_k, y_k), so each minibatch is the same and local SGD is deterministic:
w <- w - eta (w.x_k - y_k) x_k. The reference then applies, by hand,

* Exp-alpha (seed paper, both forms): rho_k ∝ [n_k] exp((F_k(w_k) - F_k(w)) / alpha) with
  F_k at the received model w and after the local steps w_k;
* the server step on g = sum_k rho_k (w - w_k): SGD, FedAvgM (heavy ball and Nesterov),
  FedAdam and FedYogi (Reddi et al. 2021, with optax's bias correction and Yogi's 1e-6
  initial moments), over two rounds so that the optimizer state is carried;

and the chunked cohort must equal the unchunked round for MaxFL and q-FFL (two passes),
whose weights depend on the whole cohort, and for the softmax rules (proportional, uniform,
Exp-alpha; one pass).
"""

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

X = np.array([[1.0, 0.5], [-0.3, 1.2], [0.8, -0.9], [0.2, 0.4]], np.float32)
Y = np.array([1.5, -0.7, 0.4, 2.0], np.float32)
SIZES = [2, 5, 3, 8]
TAU, LR = 3, 0.3


def toy_data() -> FederatedData:
    xs = [np.repeat(X[k:k + 1], n, 0) for k, n in enumerate(SIZES)]
    ys = [np.full(n, Y[k], np.float32) for k, n in enumerate(SIZES)]
    arr = arrays_from_clients(xs, ys)
    return FederatedData(train=arr, test=arr, num_classes=1, name="toy")


def local_np(w: np.ndarray, k: int) -> np.ndarray:
    for _ in range(TAU):
        w = w - LR * (w @ X[k] - Y[k]) * X[k]
    return w


def risk(w: np.ndarray, k: int) -> float:
    return 0.5 * float(w @ X[k] - Y[k]) ** 2


def flat(params) -> np.ndarray:
    return np.asarray(params["Dense_0"]["kernel"], np.float64)[:, 0]


def run_rounds(cfg: RunConfig, hp: HParams, rounds: int):
    model = linear_model(2)
    alg = build(cfg.algorithm, model, cfg)
    data = toy_data()
    hp = hp.as_arrays()
    state = alg.init(jax.random.key(0), data, hp)
    out = [state]
    metrics = []
    rnd = jax.jit(alg.round)
    for r in range(rounds):
        state, m = rnd(state, data, jax.random.fold_in(jax.random.key(1), r), hp)
        out.append(state)
        metrics.append(m)
    return out, metrics


def ref_weights(w: np.ndarray, rule: str, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(weights [4], w_k [4, 2]) of the whole federation (cohort = all 4 clients)."""
    wk = np.stack([local_np(w, k) for k in range(4)])
    n = np.array(SIZES, np.float64)
    if rule == "proportional":
        rho = n / n.sum()
    else:
        gap = np.array([risk(wk[k], k) - risk(w, k) for k in range(4)])
        logit = gap / alpha + (np.log(n) if rule == "exp-alpha-n" else 0.0)
        rho = np.exp(logit - logit.max())
        rho /= rho.sum()
    return rho, wk


@pytest.mark.parametrize("rule", ["exp-alpha", "exp-alpha-n"])
def test_exp_alpha_round_equals_hand_computation(rule):
    alpha = 0.5
    cfg = RunConfig(algorithm="fedavg", aggregation=rule, clients=4, cohort=4,
                    local_steps=TAU, batch_size=2)
    hp = HParams(client_lr=LR, server_lr=1.0, exp_alpha=alpha)
    states, metrics = run_rounds(cfg, hp, 1)
    w0 = flat(states[0].params)
    rho, wk = ref_weights(w0, rule, alpha)
    # the toy is chosen so the weights are far from uniform and from n_k-proportional
    assert np.ptp(rho) > 0.1
    idx = np.asarray(metrics[0]["cohort_idx"])
    assert sorted(idx.tolist()) == [0, 1, 2, 3]
    np.testing.assert_allclose(np.asarray(metrics[0]["cohort_weights"]), rho[idx], rtol=1e-4,
                               atol=1e-6)
    w1 = w0 - np.sum(rho[:, None] * (w0 - wk), axis=0)
    np.testing.assert_allclose(flat(states[1].params), w1, rtol=1e-5, atol=1e-6)


def np_server(name: str, hp: dict):
    """A hand-written server optimizer: step(w, g) -> w, with its own state."""
    st = {"t": 0, "m": None, "v": None}
    lr, b1, b2, eps = hp["server_lr"], hp["server_momentum"], hp["server_beta2"], \
        hp["server_eps"]

    def step(w, g):
        st["t"] += 1
        t = st["t"]
        if name == "sgd":
            return w - lr * g
        if name in ("momentum", "nesterov"):
            st["m"] = g + b1 * (st["m"] if st["m"] is not None else 0.0)
            u = g + b1 * st["m"] if name == "nesterov" else st["m"]
            return w - lr * u
        init = 1e-6 if name == "yogi" else 0.0
        m = st["m"] if st["m"] is not None else np.full_like(g, init)
        v = st["v"] if st["v"] is not None else np.full_like(g, init)
        m = b1 * m + (1 - b1) * g
        if name == "adam":
            v = b2 * v + (1 - b2) * g * g
        else:
            v = v - (1 - b2) * np.sign(v - g * g) * g * g
        st["m"], st["v"] = m, v
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        return w - lr * mh / (np.sqrt(vh) + eps)

    return step


@pytest.mark.parametrize("opt", ["sgd", "momentum", "nesterov", "adam", "yogi"])
def test_server_optimizer_inside_rounds_equals_hand_step(opt):
    hpd = dict(server_lr=0.2 if opt in ("adam", "yogi") else 0.7, server_momentum=0.8,
               server_beta2=0.95, server_eps=1e-2)
    cfg = RunConfig(algorithm="fedavg", aggregation="proportional", server_opt=opt,
                    clients=4, cohort=4, local_steps=TAU, batch_size=2)
    states, _ = run_rounds(cfg, HParams(client_lr=LR, **hpd), 3)
    step = np_server(opt, hpd)
    w = flat(states[0].params)
    for r in range(3):
        rho, wk = ref_weights(w, "proportional", 1.0)
        w = step(w, np.sum(rho[:, None] * (w - wk), axis=0))
        np.testing.assert_allclose(flat(states[r + 1].params), w, rtol=1e-4, atol=1e-6,
                                   err_msg=f"{opt}, round {r + 1}")


# ------------------------------------------------------------------ chunked cohorts

@pytest.mark.parametrize("algorithm,aggregation", [("maxfl", "proportional"),
                                                   ("fedavg", "exp-alpha"),
                                                   ("qffl", "proportional")])
def test_chunked_and_laned_rounds_equal_one_vmap(algorithm, aggregation):
    data = make_tiny_data(num_clients=7, dim=5, classes=3, seed=3)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    base = RunConfig(algorithm=algorithm, aggregation=aggregation, clients=7, cohort=5,
                     local_steps=3, batch_size=4, rho_steps=3, requirement="0.9")
    hp = HParams(client_lr=0.5, exp_alpha=0.05, qffl_q=2.0, maxfl_eps=1e-3).as_arrays()
    out = {}
    # never / chunks of 2 (5 = 2 + 2 + 1 padded) / one pass, clients one at a time / one
    # pass, pairs of lanes (a remainder of 1)
    layouts = {-1: {"client_chunk": -1}, 2: {"client_chunk": 2},
               "lanes1": {"client_chunk": -1, "client_lanes": 1},
               "lanes2": {"client_chunk": -1, "client_lanes": 2}}
    for name, kw in layouts.items():
        alg = build(algorithm, model, base.replace(**kw))
        st = alg.init(jax.random.key(0), data, hp)
        st, m = jax.jit(alg.round)(st, data, jax.random.key(5), hp)
        out[name] = (st, m)
    w_ref = np.asarray(out[-1][1]["cohort_weights"])
    # the weights are far from proportional, so the check sees how they are applied
    n = np.asarray(data.train.count)[np.asarray(out[-1][1]["cohort_idx"])]
    assert np.max(np.abs(w_ref / w_ref.sum() - n / n.sum())) > 0.02
    for name in (2, "lanes1", "lanes2"):
        np.testing.assert_allclose(np.asarray(out[name][1]["cohort_weights"]), w_ref,
                                   rtol=1e-5, atol=1e-7, err_msg=str(name))
        for a, b in zip(jax.tree.leaves(out[name][0].params),
                        jax.tree.leaves(out[-1][0].params), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6,
                                       err_msg=str(name))


@pytest.mark.parametrize("aggregation", ["proportional", "uniform", "exp-alpha-n"])
def test_softmax_rules_chunk_in_one_pass(aggregation):
    """Rules with `logits` train each client once in a chunked round (the local-steps loop
    appears once in the program, twice for a two-pass rule) and equal one vmap."""
    data = make_tiny_data(num_clients=7, dim=5, classes=3, seed=4)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    hp = HParams(client_lr=0.5, exp_alpha=0.05).as_arrays()
    out, loops = {}, {}
    for chunk in (-1, 2, 3):
        cfg = RunConfig(algorithm="fedavg", aggregation=aggregation, clients=7, cohort=5,
                        local_steps=4, batch_size=4, client_chunk=chunk)
        alg = build("fedavg", model, cfg)
        st = alg.init(jax.random.key(0), data, hp)
        out[chunk] = jax.jit(alg.round)(st, data, jax.random.key(5), hp)
        loops[chunk] = str(jax.make_jaxpr(alg.round)(st, data, jax.random.key(5), hp)).count(
            "length=4")  # the local-steps scan (tau = 4; chunk loops have length 2 or 3)
    assert loops[-1] == loops[2] == loops[3] == 1
    two = RunConfig(algorithm="fedavg", aggregation="fednova", clients=7, cohort=5,
                    local_steps=4, batch_size=4, client_chunk=2)
    alg = build("fedavg", model, two)
    st = alg.init(jax.random.key(0), data, hp)
    assert str(jax.make_jaxpr(alg.round)(st, data, jax.random.key(5), hp)).count(
        "length=4") == 2  # a rule without logits: statistics pass + aggregation pass
    for chunk in (2, 3):
        np.testing.assert_allclose(np.asarray(out[chunk][1]["cohort_weights"]),
                                   np.asarray(out[-1][1]["cohort_weights"]), rtol=1e-5,
                                   atol=1e-7)
        for a, b in zip(jax.tree.leaves(out[chunk][0].params),
                        jax.tree.leaves(out[-1][0].params), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_delta_features_with_chunked_cohort_refused():
    """DivFL's delta features need every Delta_k, which a chunked round does not keep: the
    configuration is refused with a message instead of failing inside the round."""
    from fedjax_appeal.core.config import ConfigError
    from fedjax_appeal.run.validate import validate

    cfg = RunConfig(algorithm="fedavg", selector="divfl", selector_features="delta",
                    clients=7, cohort=5, local_steps=2, batch_size=4, client_chunk=2)
    with pytest.raises(ConfigError, match="--selector-features grad or --client-chunk -1"):
        validate(cfg, HParams())
    data = make_tiny_data(num_clients=7, dim=5, classes=3, seed=3)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    hp = HParams().as_arrays()
    alg = build("fedavg", model, cfg)  # a library caller that skips `validate`
    st = alg.init(jax.random.key(0), data, hp)
    with pytest.raises(ConfigError, match="--selector-features grad"):
        alg.round(st, data, jax.random.key(1), hp)
    validate(cfg.replace(client_chunk=-1), HParams())
