"""DP-FedAvg: clipping by hand, noise scale, accounting against dp_accounting's own API,
adaptive clipping, Poisson cohorts, refused combinations, a DP round against plain FedAvg,
and an FMNIST DP run that learns."""

from __future__ import annotations

import dataclasses

import dp_accounting as dpa
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data
from dp_accounting import pld, rdp

from fedjax_appeal.aggregate import accounting, privacy
from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.run.simulate import simulate
from fedjax_appeal.run.validate import validate


def _deltas(m=5, seed=0):
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(m, 3, 4)).astype(np.float32) * rng.uniform(0.1, 3, (m, 1, 1)),
            "b": rng.normal(size=(m, 4)).astype(np.float32)}


def test_clipping_by_hand():
    d = _deltas()
    valid = np.array([True, True, False, True, True])
    clip, denom = 3.6, 7.0  # norms are 2.5 .. 7.4: some clipped, some not
    out, norms = privacy.dp_sum(jax.tree.map(jnp.asarray, d), jnp.asarray(valid),
                                jax.random.key(0), jnp.float32(clip), jnp.float32(0.0), denom)
    flat = np.concatenate([d["w"].reshape(5, -1), d["b"]], axis=1)
    n = np.linalg.norm(flat, axis=1)
    np.testing.assert_allclose(norms, n, rtol=1e-5)
    assert (n > clip).any() and (n < clip).any()  # both branches are exercised
    f = np.where(valid, np.minimum(1.0, clip / n), 0.0)
    np.testing.assert_allclose(out["w"], np.einsum("k,kij->ij", f, d["w"]) / denom, rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(out["b"], f @ d["b"] / denom, rtol=1e-5, atol=1e-7)
    # each clipped update has norm min(||Delta||, C)
    np.testing.assert_allclose(np.linalg.norm(flat * f[:, None], axis=1)[valid],
                               np.minimum(n, clip)[valid], rtol=1e-5)


def test_noise_std_of_aggregate_is_sigma_c_over_m():
    """Zero updates: the aggregate is pure noise with std sigma C / denom per coordinate."""
    sigma, clip, denom, keys = 1.1, 0.7, 20.0, 400
    zero = {"w": jnp.zeros((4, 50))}

    def one(k):
        return privacy.dp_sum(zero, jnp.ones(4, bool), k, jnp.float32(clip),
                              jnp.float32(sigma), denom)[0]["w"]

    x = np.asarray(jax.vmap(one)(jax.random.split(jax.random.key(1), keys))).ravel()
    want = sigma * clip / denom
    n = x.size  # 20000 samples: the std's standard error is want / sqrt(2 n)
    assert abs(x.std() - want) < 4 * want / np.sqrt(2 * n)
    assert abs(x.mean()) < 4 * want / np.sqrt(n)


def _direct(q, z, steps, delta):
    ev = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps)
    r, p = rdp.RdpAccountant(), pld.PLDAccountant()
    r.compose(ev)
    p.compose(ev)
    return r.get_epsilon(delta), p.get_epsilon(delta)


def test_epsilon_against_dp_accounting_api():
    e = accounting.epsilons(0.01, 1.1, 1000, 1e-5)
    want_rdp, want_pld = _direct(0.01, 1.1, 1000, 1e-5)
    assert e["dp_epsilon_rdp"] == pytest.approx(want_rdp, rel=1e-9)
    assert e["dp_epsilon_pld"] == pytest.approx(want_pld, rel=1e-9)
    # the library's well-known example values (q=0.01, sigma=1.1, 1000 steps, delta=1e-5)
    assert e["dp_epsilon_rdp"] == pytest.approx(1.71, abs=0.02)
    assert e["dp_epsilon_pld"] == pytest.approx(1.52, abs=0.02)
    assert e["dp_epsilon_pld"] < e["dp_epsilon_rdp"]  # PLD is the tighter accountant
    assert accounting.epsilons(0.01, 1.1, 0, 1e-5) == {"dp_epsilon_rdp": 0.0,
                                                        "dp_epsilon_pld": 0.0}
    more = accounting.epsilons(0.01, 1.1, 2000, 1e-5)
    assert more["dp_epsilon_rdp"] > e["dp_epsilon_rdp"]


def test_adaptive_noise_multiplier_correction():
    """Andrew et al. Thm 1: 1/sigma_delta^2 + 1/(2 sigma_b)^2 = 1/z^2."""
    z, sb = 1.0, 2.5
    s = float(privacy.delta_noise_multiplier(jnp.float32(z), jnp.float32(sb), True))
    assert s ** -2 + (2 * sb) ** -2 == pytest.approx(z ** -2, rel=1e-5)
    assert s > z
    assert float(privacy.delta_noise_multiplier(jnp.float32(z), jnp.float32(sb), False)) == z


def test_adaptive_clip_moves_to_target_quantile():
    norms = jnp.arange(1.0, 101.0)  # 100 clients with norms 1..100
    valid = jnp.ones(100, bool)
    hp = HParams(dp_quantile=0.3, dp_clip_lr=0.2).as_arrays()
    clip = jnp.float32(0.5)
    for r in range(200):
        clip, _ = privacy.adaptive_clip(clip, norms, valid, jax.random.key(r), hp,
                                        jnp.float32(0.0), 100.0)
    assert 29.0 <= float(clip) <= 31.5  # the 0.3 quantile of 1..100
    # from above, with count noise: still ends near the target
    clip = jnp.float32(500.0)
    for r in range(300):
        clip, _ = privacy.adaptive_clip(clip, norms, valid, jax.random.key(r), hp,
                                        jnp.float32(5.0), 100.0)
    assert 20.0 <= float(clip) <= 42.0


def test_poisson_selector_rate_and_mask():
    cfg = RunConfig(clients=200, cohort=20, dp="fixed", aggregation="uniform")
    sel = privacy.poisson_selector(cfg)

    class S:
        pool = jnp.ones(200, bool).at[:10].set(False)  # 10 clients unavailable

    size = privacy.poisson_buffer(20, 200)
    assert size == int(np.ceil(20 + 7 * np.sqrt(200 * 0.1 * 0.9))) + 2

    def one(k):
        idx, valid = sel.select(k, S, None, None)
        return idx, valid

    idx, valid = jax.vmap(one)(jax.random.split(jax.random.key(0), 2000))
    idx, valid = np.asarray(idx), np.asarray(valid)
    assert idx.shape == (2000, size)
    counts = valid.sum(1)
    assert abs(counts.mean() - 19.0) < 4 * np.sqrt(19 * 0.9 / 2000)  # 190 available x q
    for i, v in zip(idx[:50], valid[:50], strict=True):
        assert len(set(i.tolist())) == size  # distinct slots
        assert not np.isin(i[v], np.arange(10)).any()  # unavailable clients never valid
    hits = np.zeros(200)
    np.add.at(hits, idx[valid], 1)
    assert abs(hits[10:].mean() / 2000 - 0.1) < 0.005


def _cfg(**kw):
    base = dict(algorithm="fedavg", dp="fixed", aggregation="uniform")
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("kw,needle", [
    (dict(algorithm="maxfl"), "maxfl's weights or uploads are not bounded"),
    (dict(algorithm="qffl"), "not bounded"),
    (dict(aggregation="proportional"), "--aggregation uniform"),
    (dict(aggregation="exp-alpha"), "--aggregation uniform"),
    (dict(selector="poc"), "--selector random"),
    (dict(client_chunk=4), "--client-chunk"),
    (dict(dp_delta=0.0), "--dp-delta"),
    (dict(model="cnn_bn"), "BatchNorm statistics"),
])
def test_refused_combinations(kw, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")) as e:
        validate(_cfg(**kw), HParams())
    assert "\n" not in str(e.value)


def test_adaptive_refuses_too_little_count_noise():
    with pytest.raises(ConfigError, match="2 x sigma_b"):
        validate(_cfg(dp="adaptive", cohort=10), HParams(dp_noise=1.0))  # sigma_b = 0.5
    validate(_cfg(dp="adaptive", cohort=10), HParams(dp_noise=1.0, dp_count_noise=1.0))


def _run(cfg, hp, rounds=3, seed=0):
    data = make_tiny_data(num_clients=8)
    model = make_model("logistic", "tiny", 3, (5,), np.float32, scale=1.0)
    alg = build(cfg.algorithm, model, cfg)
    return simulate(alg, data, hp, jax.random.key(seed), rounds=rounds, eval_every=rounds)


def test_noiseless_unclipped_dp_round_equals_uniform_fedavg():
    """z = 0, C huge, fixed cohort of m: (sum Delta_k) / m is uniform FedAvg exactly."""
    base = dict(clients=8, unseen_clients=0, cohort=4, local_steps=2, batch_size=4,
                aggregation="uniform", server_opt="momentum")
    plain = _run(RunConfig(**base), HParams())
    dp = _run(RunConfig(**base, dp="fixed", dp_sampling="fixed"),
              HParams(dp_clip=1e6, dp_noise=0.0))
    for a, b in zip(jax.tree.leaves(plain.final_state.params),
                    jax.tree.leaves(dp.final_state.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(plain.round_metrics["cohort_idx"],
                                  dp.round_metrics["cohort_idx"])
    # with noise the models differ; the history carries epsilon at every evaluation
    noisy = _run(RunConfig(**base, dp="fixed", dp_sampling="fixed"), HParams(dp_noise=1.0))
    assert not np.allclose(jax.tree.leaves(noisy.final_state.params)[0],
                           jax.tree.leaves(plain.final_state.params)[0])
    h = noisy.history
    assert h[0]["dp_epsilon_rdp"] == 0.0
    want = accounting.epsilons(4 / 8, 1.0, 3, 1e-5)
    assert h[-1]["dp_epsilon_rdp"] == pytest.approx(want["dp_epsilon_rdp"])
    assert h[-1]["dp_epsilon_pld"] == pytest.approx(want["dp_epsilon_pld"])


def test_adaptive_round_updates_clip_in_state():
    cfg = RunConfig(clients=8, unseen_clients=0, cohort=4, local_steps=2, batch_size=4,
                    aggregation="uniform", dp="adaptive")
    res = _run(cfg, HParams(dp_clip=1e-4, dp_noise=0.0, dp_clip_lr=0.5), rounds=4)
    clips = res.round_metrics["dp_clip"]
    b = res.round_metrics["dp_unclipped_share"]  # (0 unclipped + N(0, sigma_b^2)) / 4
    assert np.abs(b).max() < 4 * 0.2 / 4  # sigma_b = 4 / 20
    # every update is longer than 1e-4, so C <- C exp(-0.5 (b - 0.5)) with b ~ 0: C grows
    want = 1e-4 * np.exp(np.cumsum(-0.5 * (b - 0.5)))
    np.testing.assert_allclose(clips[1:], want[:-1], rtol=1e-4)
    assert float(res.final_state.extra["uplink"]["clip"]) == pytest.approx(want[-1], rel=1e-4)
    assert (res.round_metrics["dp_clipped"] == 1.0).all()


@pytest.mark.data
def test_fmnist_dp_run_learns():
    """A small Poisson DP-FedAvg run on Fashion-MNIST, at a stated epsilon, beats chance."""
    from fedjax_appeal.run.experiment import run_config

    cfg = RunConfig(dataset="fmnist", model="logistic", clients=100, unseen_clients=0,
                    cohort=20, rounds=30, local_steps=5, batch_size=16, eval_every=30,
                    max_samples=6000, aggregation="uniform", dp="fixed", dp_delta=1e-3)
    hp = HParams(client_lr=0.1, dp_clip=1.0, dp_noise=0.8)
    results, _ = run_config(cfg, hp)
    last = results["history"][-1]
    assert last["test_acc_seen"] > 0.45  # chance is 0.1
    eps = results["privacy"]["dp_epsilon_pld"]
    assert 0 < eps < 20 and eps == pytest.approx(last["dp_epsilon_pld"])
    assert dataclasses.asdict(cfg)["dp"] == "fixed"
