"""Heterogeneous and unreliable clients against sequential references (numpy, Python loops).

Least squares with a bias-free linear model whose clients hold copies of one row
(x_k, y_k), so local SGD is deterministic: w <- w - eta (w.x_k - y_k) x_k. The references
take the random draws (tau_k, step times, availability) from the same keyed functions
(`local.hetero`, `select.availability`) and redo everything else by hand: tau_k plain
SGD steps per client, the deadline's drops, the renormalised FedAvg / FedNova average, the
Markov availability trace round by round, and FedBuff's event loop with a heap-free
Python scan over finish times.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import arrays_from_clients, assert_refused, linear_model

from fedjax_appeal.aggregate.fednova import fednova_weights, local_norm
from fedjax_appeal.algorithms import build
from fedjax_appeal.algorithms.fedbuff import dispatch_draw, fedbuff_init, fedbuff_step
from fedjax_appeal.core.arrays import FederatedData
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.round import init_state
from fedjax_appeal.local import hetero
from fedjax_appeal.run.validate import validate
from fedjax_appeal.select.availability import available

X = np.array([[1.0, 0.5], [-0.3, 1.2], [0.8, -0.9], [0.2, 0.4], [0.6, 0.1], [-0.5, -0.4]],
             np.float32)
Y = np.array([1.5, -0.7, 0.4, 2.0, -1.0, 0.3], np.float32)
SIZES = [2, 5, 3, 8, 4, 6]
LR = 0.3


def toy_data() -> FederatedData:
    xs = [np.repeat(X[k:k + 1], n, 0) for k, n in enumerate(SIZES)]
    ys = [np.full(n, Y[k], np.float32) for k, n in enumerate(SIZES)]
    arr = arrays_from_clients(xs, ys)
    return FederatedData(train=arr, test=arr, num_classes=1, name="toy")


def local_np(w: np.ndarray, k: int, tau: int, mu: float = 0.0) -> np.ndarray:
    w0 = w.copy()
    for _ in range(tau):
        w = w - LR * ((w @ X[k] - Y[k]) * X[k] + mu * (w - w0))
    return w


def flat(params) -> np.ndarray:
    return np.asarray(params["Dense_0"]["kernel"], np.float64)[:, 0]


def run(cfg: RunConfig, hp: HParams, rounds: int):
    alg = build(cfg.algorithm, linear_model(2), cfg)
    data, hp = toy_data(), hp.as_arrays()
    state = jax.jit(alg.init)(jax.random.key(0), data, hp)
    states, metrics = [state], []
    rnd = jax.jit(alg.round)
    for r in range(rounds):
        state, m = rnd(state, data, jax.random.fold_in(jax.random.key(1), r), hp)
        states.append(state)
        metrics.append(jax.tree.map(np.asarray, m))
    return states, metrics


def steps_of(cfg, state, hp, rnd, ks) -> np.ndarray:
    root = hetero.root_key(state)
    return np.array([int(hetero.client_steps(cfg, root, rnd, k, hp, SIZES[k])) for k in ks])


BASE = dict(clients=6, unseen_clients=0, cohort=6, local_steps=6, local_steps_min=1,
            batch_size=2, selector="random")


def test_epochs_steps_by_hand():
    """tau_k = floor(E n_k / B) clipped to [min, max]: E = 1.5, B = 2, n = SIZES."""
    cfg = RunConfig(local_steps_dist="epochs", local_epochs=1.5, **{**BASE, "local_steps_min": 2})
    got = [int(hetero.client_steps(cfg, jax.random.key(0), 3, k, HParams(), n))
           for k, n in enumerate(SIZES)]
    # floor(1.5 n / 2) for n = 2, 5, 3, 8, 4, 6 -> 1, 3, 2, 6, 3, 4; clip to [2, 6]
    assert got == [2, 3, 2, 6, 3, 4]


@pytest.mark.parametrize("dist", ["uniform", "lognormal", "epochs"])
def test_per_client_steps_match_a_python_loop(dist):
    """FedAvg with tau_k drawn per client and round equals tau_k plain SGD steps each."""
    cfg = RunConfig(algorithm="fedavg", local_steps_dist=dist, **BASE)
    hp = HParams(client_lr=LR, steps_sigma=1.0).as_arrays()
    states, metrics = run(cfg, hp, 3)
    n = np.array(SIZES, np.float64)
    seen = set()
    for r in range(3):
        idx = metrics[r]["cohort_idx"]
        tau = steps_of(cfg, states[r], hp, r, idx)
        assert tau.min() >= 1 and tau.max() <= 6
        seen |= set(tau.tolist())
        w = flat(states[r].params)
        wk = np.stack([local_np(w, k, t) for k, t in zip(idx, tau, strict=True)])
        p = n[idx] / n[idx].sum()
        np.testing.assert_allclose(flat(states[r + 1].params), w - p @ (w - wk), rtol=1e-5,
                                   atol=1e-6)
        # the reported loss is the mean over the steps actually taken
        losses = []
        for k, t in zip(idx, tau, strict=True):
            v, ls = w.copy(), []
            for _ in range(t):
                ls.append(0.5 * float(v @ X[k] - Y[k]) ** 2)
                v = local_np(v, k, 1)
            losses.append(np.mean(ls))
        np.testing.assert_allclose(metrics[r]["cohort_loss"], np.mean(losses), rtol=1e-4)
    assert len(seen) >= 3  # the draws really differ between clients


def test_the_same_client_and_round_draw_the_same_steps_in_any_slot():
    cfg = RunConfig(algorithm="fedavg", local_steps_dist="uniform", local_steps=50)
    hp = HParams().as_arrays()
    root = jax.random.key(3)
    a = jax.vmap(lambda k: hetero.client_steps(cfg, root, 4, k, hp))(jnp.array([5, 2, 9]))
    b = jax.vmap(lambda k: hetero.client_steps(cfg, root, 4, k, hp))(jnp.array([9, 5, 2]))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[[1, 2, 0]])
    c = jax.vmap(lambda r: hetero.client_steps(cfg, root, r, 5, hp))(jnp.arange(20))
    assert len(set(np.asarray(c).tolist())) > 5  # redrawn every round


def test_fednova_weights_and_normalisers_by_hand():
    # a = [1, 4], n = [1, 3]: p = [.25, .75], tau_eff = .25 + 3 = 3.25,
    # w = [.25 * 3.25 / 1, .75 * 3.25 / 4] = [0.8125, 0.609375]; invalid slot -> 0
    w = fednova_weights(jnp.array([1.0, 4.0, 2.0]), jnp.array([1, 3, 5]),
                        jnp.array([True, True, False]))
    np.testing.assert_allclose(np.asarray(w), [0.8125, 0.609375, 0.0], rtol=1e-6)
    # FedProx: a = [1 - (1 - eta mu)^tau] / (eta mu) = (1 - 0.8^3) / 0.2 = 2.44
    np.testing.assert_allclose(float(local_norm(3, 0.1, 2.0)), 2.44, rtol=1e-6)
    assert float(local_norm(3, 0.1, 0.0)) == 3.0


@pytest.mark.parametrize("alg,mu", [("fednova", 0.0), ("fedprox", 0.4)])
def test_fednova_round_matches_the_normalised_average(alg, mu):
    """w <- w - tau_eff sum_k p_k (w - w_k) / a_k, by hand over the cohort."""
    cfg = RunConfig(algorithm=alg, local_steps_dist="uniform", aggregation="fednova", **BASE)
    hp = HParams(client_lr=LR, prox_mu=mu).as_arrays()
    states, metrics = run(cfg, hp, 2)
    n = np.array(SIZES, np.float64)
    for r in range(2):
        idx = metrics[r]["cohort_idx"]
        tau = steps_of(cfg, states[r], hp, r, idx)
        assert len(set(tau.tolist())) > 1
        w = flat(states[r].params)
        wk = np.stack([local_np(w, k, t, mu) for k, t in zip(idx, tau, strict=True)])
        a = tau.astype(float) if mu == 0 else (1 - (1 - LR * mu) ** tau) / (LR * mu)
        p = n[idx] / n[idx].sum()
        d = (w - wk) / a[:, None]
        want = w - (p @ a) * (p @ d)
        np.testing.assert_allclose(flat(states[r + 1].params), want, rtol=1e-5, atol=1e-6)


def test_fednova_with_equal_steps_is_fedavg():
    hp = HParams(client_lr=LR)
    a, _ = run(RunConfig(algorithm="fednova", **BASE), hp, 2)
    b, _ = run(RunConfig(algorithm="fedavg", **BASE), hp, 2)
    np.testing.assert_allclose(flat(a[-1].params), flat(b[-1].params), rtol=1e-6)


def test_markov_availability_trace_matches_a_sequential_chain():
    """The run's per-round `available` and carried state equal a Python loop of the chain."""
    cfg = RunConfig(algorithm="fedavg", availability="markov", **{**BASE, "cohort": 2})
    hp = HParams(client_lr=LR, avail_on_off=0.4, avail_off_on=0.3).as_arrays()
    rounds = 8
    states, metrics = run(cfg, hp, rounds)
    root = hetero.root_key(states[0])
    on = np.ones(6, bool)
    for r in range(rounds):
        u = np.asarray(jax.random.uniform(hetero.draw_key(root, hetero.AVAIL, r, 0), (6,)))
        p = np.where(on, 1 - 0.4, 0.3) if r > 0 else np.full(6, 0.3 / 0.7)
        on = u < p
        assert int(metrics[r]["available"]) == on.sum()
        idx, w = metrics[r]["cohort_idx"], metrics[r]["cohort_weights"]
        assert np.all(on[idx] | (w == 0))  # unavailable clients never aggregate
        if on.sum() >= 2:
            assert np.all(on[idx])  # and are never picked while enough are available
        np.testing.assert_array_equal(np.asarray(states[r + 1].hetero.on), on)


def test_availability_statistics():
    """Bernoulli: empirical frequency ~ p_k per client; Markov: transition frequencies."""
    root = jax.random.key(11)
    m, rounds = 400, 200
    hp = HParams(avail_p=0.6, avail_spread=0.3, avail_on_off=0.2, avail_off_on=0.5).as_arrays()
    draws = jax.vmap(lambda r: available("bernoulli", root, r, jnp.ones(m, bool), hp))(
        jnp.arange(1, rounds + 1))
    from fedjax_appeal.select.availability import avail_probs

    pk = np.asarray(avail_probs(root, m, hp))
    assert 0.3 <= pk.min() < 0.4 and 0.8 < pk.max() <= 0.9
    freq = np.asarray(draws).mean(0)
    assert np.max(np.abs(freq - pk)) < 4 * np.sqrt(0.25 / rounds)

    def step(on, r):
        nxt = available("markov", root, r, on, hp)
        return nxt, (on, nxt)

    _, (prev, nxt) = jax.lax.scan(step, jnp.ones(m, bool), jnp.arange(rounds))
    prev, nxt = np.asarray(prev)[1:], np.asarray(nxt)[1:]
    assert abs(np.mean(~nxt[prev]) - 0.2) < 0.01
    assert abs(np.mean(nxt[~prev]) - 0.5) < 0.015
    assert abs(np.asarray(nxt).mean() - 0.5 / 0.7) < 0.02  # stationary law


def test_deadline_drops_stragglers_like_a_python_loop():
    """Late clients (tau_k x step time > deadline) get weight 0; the rest are averaged."""
    cfg = RunConfig(algorithm="fedavg", local_steps_dist="uniform", deadline=4.0,
                    availability="bernoulli", **BASE)
    hp = HParams(client_lr=LR, step_time_sigma=0.5, avail_p=0.7).as_arrays()
    states, metrics = run(cfg, hp, 4)
    n = np.array(SIZES, np.float64)
    dropped_any = False
    for r in range(4):
        st, m = states[r], metrics[r]
        root = hetero.root_key(st)
        on = np.asarray(available("bernoulli", root, r, jnp.ones(6, bool), hp))
        idx = m["cohort_idx"]
        tau = steps_of(cfg, st, hp, r, idx)
        t = np.array([float(hetero.step_time(root, r, k, hp)) for k in idx]) * tau
        np.testing.assert_allclose(  # the library's own compute time agrees
            [float(hetero.compute_time(cfg, root, r, k, hp, SIZES[k])) for k in idx], t,
            rtol=1e-6)
        keep = on[idx] & (t <= 4.0)
        assert int(m["dropped"]) == int(np.sum(on[idx] & (t > 4.0)))
        assert int(m["available"]) == on.sum()
        wait = 4.0 if np.any(on[idx] & (t > 4.0)) else np.max(np.where(keep, t, 0.0))
        np.testing.assert_allclose(m["round_time"], wait, rtol=1e-5)
        dropped_any |= int(m["dropped"]) > 0
        w = flat(st.params)
        p = np.where(keep, n[idx], 0.0)
        p = p / p.sum() if p.sum() > 0 else p
        np.testing.assert_allclose(m["cohort_weights"], p, rtol=1e-5, atol=1e-7)
        wk = np.stack([local_np(w, k, tt) for k, tt in zip(idx, tau, strict=True)])
        np.testing.assert_allclose(flat(states[r + 1].params), w - p @ (w - wk), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_array_equal(
            np.asarray(states[r + 1].participation - st.participation)[idx], keep)
    assert dropped_any


# --- FedBuff ------------------------------------------------------------------------

C_K = np.array([[1.0, -2.0], [0.5, 0.5], [-1.0, 1.5], [2.0, 0.0], [0.0, -1.0],
                [1.5, 1.0], [-0.5, -0.5]], np.float32)
TAU_Q, ETA_Q, SERVER_LR = 3, 0.2, 0.8


def quad_train(params, mstate, k, key, hp):
    """tau GD steps on 0.5 ||w - c_k||^2 (the key is unused: deterministic)."""
    w = params["w"]
    for _ in range(TAU_Q):
        w = w - ETA_Q * (w - jnp.asarray(C_K)[k])
    return {"w": params["w"] - w}, mstate, 0.5 * jnp.sum((w - jnp.asarray(C_K)[k]) ** 2)


def quad_np(w, k):
    v = w.copy()
    for _ in range(TAU_Q):
        v = v - ETA_Q * (v - C_K[k])
    return w - v


def test_fedbuff_matches_an_event_driven_python_reference():
    m, slots, buf, steps, base = len(C_K), 4, 3, 6, 3.0
    hp = HParams(step_time_sigma=1.0, staleness_power=0.5).as_arrays()
    tx = optax.sgd(SERVER_LR)
    params = {"w": jnp.array([0.3, -0.2], jnp.float32)}
    state = init_state(params, {}, tx, m)
    key = jax.random.key(5)
    state = state.replace(algo=fedbuff_init(quad_train, params, {}, key, state.pool, slots,
                                            base, hp))
    step = jax.jit(lambda s, k: fedbuff_step(quad_train, s, k, hp, buffer=buf, base_time=base,
                                             tx=tx))
    got = []
    for s in range(steps):
        state, met = step(state, jax.random.fold_in(key, s))
        got.append(jax.tree.map(np.asarray, met))

    # the reference: dispatch n draws (scores, duration) = dispatch_draw(root, n)
    root = jax.random.fold_in(key, 0xFB)
    w = np.array([0.3, -0.2], np.float64)

    def draw(n, busy):
        scores, dur = dispatch_draw(root, n, m, base, hp)
        scores = np.where(busy, -1.0, np.asarray(scores))
        return int(np.argmax(scores)), float(dur)

    flight = []  # per slot: [client, version, finish, delta, dispatched_in_step]
    for n in range(slots):
        c, dur = draw(n, np.isin(np.arange(m), [f[0] for f in flight]))
        flight.append([c, 0, np.float32(dur), quad_np(w, c), -1])
    n, version, fresh_pops = slots, 0, 0
    for s in range(steps):
        acc, who, stale = np.zeros(2), [], []
        for _ in range(buf):
            slot = int(np.argmin([f[2] for f in flight]))
            c, v, t, d, when = flight[slot]
            fresh_pops += when == s
            acc += (1 + version - v) ** -0.5 * d
            who.append(c)
            stale.append(version - v)
            busy = np.isin(np.arange(m), [f[0] for i, f in enumerate(flight) if i != slot])
            c2, dur = draw(n, busy)
            flight[slot] = [c2, version, np.float32(t + np.float32(dur)), quad_np(w, c2), s]
            n += 1
        w = w - SERVER_LR * acc / buf
        version += 1
        np.testing.assert_array_equal(got[s]["cohort_idx"], who)
        np.testing.assert_allclose(got[s]["staleness_mean"], np.mean(stale), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(state.params["w"]), w, rtol=1e-5, atol=1e-6)
    assert max(float(g["staleness_max"]) for g in got) >= 2  # stale updates occurred
    assert fresh_pops > 0  # and clients dispatched and finished within one server step
    assert int(state.round) == steps
    assert int(np.sum(np.asarray(state.participation))) == steps * buf


def test_fedbuff_learns_on_the_toy_and_counts_time():
    cfg = RunConfig(algorithm="fedbuff", concurrency=4, **{**BASE, "cohort": 2,
                                                           "local_steps": 3})
    hp = HParams(client_lr=LR).as_arrays()
    states, metrics = run(cfg, hp, 30)
    times = [float(m["sim_time"]) for m in metrics]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))
    opt = np.mean((X @ np.linalg.lstsq(X, Y, rcond=None)[0] - Y) ** 2)
    gap = [np.mean((X @ flat(s.params) - Y) ** 2) - opt for s in (states[0], states[-1])]
    assert 0 <= gap[1] < 0.5 * gap[0]  # closer to the least-squares optimum


@pytest.mark.parametrize("kw,msg", [
    (dict(local_steps_min=60), "--local-steps-min 60 must lie between 1 and --local-steps"),
    (dict(algorithm="scaffold", local_steps_dist="uniform"), "needs an algorithm with FedAvg"),
    (dict(algorithm="scaffold", aggregation="fednova"), "--aggregation fednova needs"),
    (dict(algorithm="fedbuff", availability="markov"), "fedbuff runs in simulated time"),
    (dict(concurrency=1000), "--concurrency 1000 must lie between"),
    (dict(deadline=-1.0), "--deadline must be >= 0"),
])
def test_bad_options_are_refused(kw, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
        validate(RunConfig(**kw), HParams())


def test_bad_probability_is_refused():
    with pytest.raises(ConfigError, match=r"--avail-p must be in \[0, 1\]"):
        validate(RunConfig(availability="bernoulli"), HParams(avail_p=1.5))


def test_fixed_points_of_fedavg_and_fednova_on_a_quadratic():
    """FedAvg converges to its surrogate minimiser (weights p_k c_k, FedNova's Theorem 1),
    FedNova to the point with weights p_k c_k / tau_k; both computed in closed form."""
    from papers.hetero.tables import toy_fixed_points

    row = toy_fixed_points(lrs=(0.05,), rounds=300)["by_lr"]["0.05"]
    for alg in ("fedavg", "fednova"):
        assert row[alg]["dist_predicted"] < 1e-4, alg
    assert row["fedavg"]["dist_true"] > 0.05  # the inconsistency is real on this toy
    assert row["fednova"]["objective_gap"] < 0.5 * row["fedavg"]["objective_gap"]


def test_unreliable_round_vmaps_over_hparams_like_a_sweep():
    """A sweep vmaps init + round over stacked HParams: equal to the runs one by one."""
    cfg = RunConfig(algorithm="fednova", local_steps_dist="lognormal", availability="bernoulli",
                    deadline=5.0, **{**BASE, "cohort": 4})
    alg = build("fednova", linear_model(2), cfg)
    data = toy_data()
    hps = [HParams(client_lr=LR, avail_p=0.5, steps_sigma=0.3).as_arrays(),
           HParams(client_lr=0.1, avail_p=0.9, steps_sigma=1.0).as_arrays()]
    keys = jnp.stack([jax.random.key(2), jax.random.key(3)])
    hb = jax.tree.map(lambda *xs: jnp.stack(xs), *hps)
    sb = jax.jit(jax.vmap(alg.init, in_axes=(0, None, 0)))(keys, data, hb)
    vb, mb = jax.jit(jax.vmap(alg.round, in_axes=(0, None, 0, 0)))(sb, data, keys, hb)
    for i in range(2):
        s0 = jax.jit(alg.init)(keys[i], data, hps[i])
        s1, m1 = jax.jit(alg.round)(s0, data, keys[i], hps[i])
        np.testing.assert_allclose(flat(jax.tree.map(lambda a, i=i: a[i], vb.params)),
                                   flat(s1.params), rtol=1e-5, atol=1e-6)
        for k in ("cohort_idx", "available", "dropped"):
            np.testing.assert_array_equal(np.asarray(mb[k][i]), np.asarray(m1[k]))


CLI_TINY = ["--dataset", "synthetic", "--clients", "8", "--unseen-clients", "0", "--cohort",
            "3", "--rounds", "2", "--local-steps", "4", "--batch-size", "8", "--eval-every",
            "2", "--min-samples", "4", "--partition", "natural"]


@pytest.mark.parametrize("extra,msg", [
    (["--algorithm", "pfedme", "--local-steps-dist", "uniform"], "--local-steps-dist uniform"),
    (["--availability", "markov", "--avail-off-on", "2"], "--avail-off-on must be in [0, 1]"),
    (["--algorithm", "fedbuff", "--deadline", "10"], "fedbuff runs in simulated time"),
    (["--avail-p", "0.5"], "--avail-p has no effect here"),
    (["--concurrency", "4"], "--concurrency has no effect here"),
    (["--local-steps-dist", "sometimes"], "--local-steps-dist must be one of: fixed, uniform"),
])
def test_cli_refuses_bad_heterogeneity_options(tmp_path, capsys, extra, msg):
    out = tmp_path / "r"
    assert_refused(["run", *CLI_TINY, *extra, "--out", str(out)], out, capsys, msg)


def test_step_time_sigma_is_taken_where_step_times_are_simulated():
    """`--step-time-sigma` sets the step times that `--deadline` reads for any synchronous
    algorithm and that fedbuff reads for its durations; elsewhere it is refused."""
    from fedjax_appeal.core.config import RunConfig
    from fedjax_appeal.run.validate import ignored_reason

    for cfg, refused in ((RunConfig(), True), (RunConfig(deadline=2.0), False),
                         (RunConfig(algorithm="fedprox", deadline=2.0), False),
                         (RunConfig(algorithm="fedbuff"), False)):
        reason = ignored_reason("step_time_sigma", cfg)
        assert (reason is not None) is refused, (cfg.algorithm, cfg.deadline, reason)


def test_the_fednova_reading_follows_the_seeds_that_ran():
    from papers.hetero.tables import nova_reading

    def pr(diffs, lo, hi):
        return {"diffs": diffs, "mean": sum(diffs) / len(diffs), "t_interval": (lo, hi),
                "signs": "".join("+" if d > 0 else "-" for d in diffs)}
    # [1.0, 1.2, 0.8]: mean 1.0, sd 0.2, t(2, .975) = 4.303: 1.0 ± 0.497 -> held;
    # [1, -1, 1]: mean 1/3, sd 1.155: the interval holds 0 -> inconclusive
    least = "least local work (smallest tau_k third)"
    text = nova_reading({0.1: ("", {"paired": {"test_acc": pr([1.0, 1.2, 0.8], 0.503, 1.497)},
                                    "groups": {least: {"paired": pr([1.0, -1.0, 1.0],
                                                                    -2.54, 3.2)}}})})
    assert "at alpha = 0.1, client-mean accuracy +1.00 [t +0.50, +1.50] (+++): held" in text
    assert "the least-work third +0.33 [t -2.54, +3.20] (+-+): inconclusive." in text
