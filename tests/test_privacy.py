"""DP-FedAvg: clipping by hand, noise scale, accounting against dp_accounting's own API,
adaptive clipping, Poisson cohorts, refused combinations, a DP round against plain FedAvg,
and an FMNIST DP run that learns."""

from __future__ import annotations

from fractions import Fraction
from math import comb

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


def _exact_tail(n: int, q: Fraction, b: int) -> float:
    """P(Binomial(n, q) > b) in exact rational arithmetic."""
    return float(sum(comb(n, k) * q ** k * (1 - q) ** (n - k) for k in range(b + 1, n + 1)))


@pytest.mark.parametrize("m,n", [(20, 200), (1, 1000), (50, 1000), (4, 40)])
def test_poisson_buffer_is_smallest_size_below_the_bound(m, n):
    size = privacy.poisson_buffer(m, n)
    q = Fraction(m, n)
    assert _exact_tail(n, q, size) <= privacy.OVERFLOW_BOUND
    assert _exact_tail(n, q, size - 1) > privacy.OVERFLOW_BOUND
    assert privacy.binomial_tail(n, m / n, size) == pytest.approx(_exact_tail(n, q, size),
                                                                  rel=1e-6)


def test_poisson_selector_rate_and_mask():
    cfg = RunConfig(clients=200, cohort=20, dp="fixed", aggregation="uniform")
    sel = privacy.poisson_selector(cfg)

    class S:
        pool = jnp.ones(200, bool).at[:10].set(False)  # 10 clients unavailable

    size = privacy.poisson_buffer(20, 200)

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


def test_poisson_overflow_is_counted(monkeypatch):
    """A buffer at the mean overflows often; `dp_overflow` counts the chosen clients beyond
    it, recomputed by hand from the same uniform draws."""
    monkeypatch.setattr(privacy, "OVERFLOW_BOUND", 0.5)
    privacy.poisson_buffer.cache_clear()
    try:
        cfg = RunConfig(clients=100, cohort=10, dp="fixed", aggregation="uniform")
        sel = privacy.poisson_selector(cfg)
        size = privacy.poisson_buffer(10, 100, 0.5)

        class S:
            pool = jnp.ones(100, bool)

        def one(k):
            idx, valid = sel.select(k, S, None, None)
            return idx, valid, sel.metrics(k, S, idx, valid, None, None)["dp_overflow"]

        keys = jax.random.split(jax.random.key(3), 400)
        idx, valid, over = map(np.asarray, jax.vmap(one)(keys))
        assert idx.shape[1] == size <= 11
        chosen = np.asarray(jax.vmap(lambda k: jax.random.uniform(k, (100,)) < 0.1)(keys))
        want = np.maximum(chosen.sum(1) - size, 0)
        np.testing.assert_array_equal(over, want)
        assert (want > 0).sum() > 50  # the overflow branch is exercised
        np.testing.assert_array_equal(valid.sum(1), np.minimum(chosen.sum(1), size))
    finally:
        privacy.poisson_buffer.cache_clear()


def test_overflow_probability_is_added_to_delta():
    cfg = RunConfig(clients=40, cohort=4, dp="fixed", aggregation="uniform", dp_delta=1e-5)
    hp = HParams(dp_noise=1.0)
    s = accounting.summary(cfg, hp, 40, 100)
    b = privacy.poisson_buffer(4, 40)
    assert s["buffer"] == b
    p = 100 * _exact_tail(40, Fraction(1, 10), b)
    assert 0 < s["overflow_probability"] == pytest.approx(p, rel=1e-6)
    eps = max(s["dp_epsilon_rdp"], s["dp_epsilon_pld"])
    assert s["dp_delta_total"] == pytest.approx(1e-5 + (1 + np.exp(eps)) * p, rel=1e-9)
    assert s["dp_delta_total"] > 1e-5


def _sensitivities(clip: float, sigma_b: float, replace: bool):
    """Largest change of the two released sums (update sum, centred count) over every
    neighbour of a 6-client cohort: one client removed (add/remove), or replaced by an
    update pointing the other way (replace-one)."""
    d = _deltas(m=6, seed=2)
    norms_all = np.linalg.norm(np.concatenate([d["w"].reshape(6, -1), d["b"]], 1), axis=1)
    assert (norms_all > clip).any() and (norms_all < clip).any()
    tree = jax.tree.map(jnp.asarray, d)
    full = np.ones(6, bool)

    def released(tree, valid):
        s, norms = privacy.dp_sum(tree, jnp.asarray(valid), jax.random.key(0),
                                  jnp.float32(clip), jnp.float32(0.0), 1.0)
        flat = np.concatenate([np.ravel(s["w"]), np.ravel(s["b"])])
        return flat, float(privacy.centred_count(norms, jnp.float32(clip), jnp.asarray(valid)))

    base_sum, base_count = released(tree, full)
    ds, dc = [], []
    for j in range(6):
        if replace:  # client j sends the opposite update, clipped (3C) or not (C / 2)
            for size in (3.0 * clip, 0.5 * clip):
                scale = size / norms_all[j]
                other = jax.tree.map(lambda a, j=j, scale=scale: a.at[j].multiply(-scale),
                                     tree)
                s2, c2 = released(other, full)
                ds.append(np.linalg.norm(s2 - base_sum))
                dc.append(abs(c2 - base_count))
        else:
            s2, c2 = released(tree, full & (np.arange(6) != j))
            ds.append(np.linalg.norm(s2 - base_sum))
            dc.append(abs(c2 - base_count))
    return float(max(ds)), float(max(dc))


def test_adaptive_epsilon_from_the_queries_actual_sensitivities():
    """Measure the two queries' sensitivities on a cohort, derive the pair's effective noise
    multiplier, and compare epsilon with dp_accounting's composed events."""
    z, sigma_b, clip, q, rounds, delta = 1.0, 2.5, 3.6, 0.05, 200, 1e-3
    s_sum, s_count = _sensitivities(clip, sigma_b, replace=False)
    assert s_sum == pytest.approx(clip, rel=1e-5)  # a clipped client removed
    assert s_count == pytest.approx(0.5)  # centred bits: one user moves the count by 1/2
    sigma = float(privacy.delta_noise_multiplier(jnp.float32(z), jnp.float32(sigma_b), True))
    z_sum, z_count = float(sigma * clip / s_sum), float(sigma_b / s_count)  # per query
    z_eff = (z_sum ** -2 + z_count ** -2) ** -0.5
    assert z_eff == pytest.approx(z, rel=1e-5)
    reported = accounting.epsilons(q, z, rounds, delta)
    composed = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(
        q, dpa.ComposedDpEvent([dpa.GaussianDpEvent(z_sum), dpa.GaussianDpEvent(z_count)])),
        rounds)
    r = rdp.RdpAccountant()
    r.compose(composed)
    assert reported["dp_epsilon_rdp"] == pytest.approx(r.get_epsilon(delta), rel=1e-4)
    want_rdp, want_pld = _direct(q, z_eff, rounds, delta)
    assert reported["dp_epsilon_pld"] == pytest.approx(want_pld, rel=1e-3)
    assert reported["dp_epsilon_rdp"] == pytest.approx(3.7514, abs=1e-3)
    # uncentred bits (sensitivity 1) would make the same noise a weaker mechanism
    z_unc = (z_sum ** -2 + sigma_b ** -2) ** -0.5
    assert _direct(q, z_unc, rounds, delta)[0] > 1.1 * reported["dp_epsilon_rdp"]


def test_adaptive_share_is_the_unclipped_share_without_noise():
    norms = jnp.asarray([0.5, 1.5, 2.5, 3.5, 0.1, 9.0])
    valid = jnp.asarray([True, True, True, True, False, True])
    hp = HParams(dp_quantile=0.5, dp_clip_lr=0.2).as_arrays()
    _, b = privacy.adaptive_clip(jnp.float32(2.0), norms, valid, jax.random.key(0), hp,
                                 jnp.float32(0.0), 5.0)
    assert float(b) == pytest.approx(2 / 5)  # 0.5 and 1.5 of the 5 valid norms are <= 2
    assert float(privacy.centred_count(norms, jnp.float32(2.0), valid)) == pytest.approx(-0.5)


def test_fixed_size_sampling_accounted_under_replace_one():
    """m of N without replacement: replace-one sensitivity 2C, so Gaussian(z / 2), RDP."""
    s_sum, s_count = _sensitivities(5.0, 2.5, replace=True)
    assert s_sum == pytest.approx(10.0, rel=1e-5)  # 2C: a clipped update turned around
    assert s_count == pytest.approx(1.0)  # the centred bit flips from -1/2 to +1/2
    e = accounting.epsilons_fixed(1000, 50, 1.0, 200, 1e-3)
    ev = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(
        1000, 50, dpa.GaussianDpEvent(0.5)), 200)
    r = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    r.compose(ev)
    assert e == {"dp_epsilon_rdp": pytest.approx(r.get_epsilon(1e-3), rel=1e-9)}
    assert e["dp_epsilon_rdp"] == pytest.approx(53.8, abs=0.1)  # vs 3.75 as Poisson q = 0.05
    cfg = RunConfig(clients=1000, cohort=50, dp="fixed", dp_sampling="fixed",
                    aggregation="uniform", dp_delta=1e-3)
    s = accounting.summary(cfg, HParams(dp_noise=1.0), 1000, 200)
    assert s["dp_epsilon_rdp"] == e["dp_epsilon_rdp"] and s["dp_epsilon_pld"] is None
    assert "replace-one" in s["mechanism"] and "RDP accountant" in s["accounting"]
    assert "RDP only" in accounting.header(cfg.replace(rounds=200), HParams(dp_noise=1.0), 1000)


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
    (dict(dp_sampling="fixed", availability="bernoulli"), "--dp-sampling poisson"),
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
    want = accounting.epsilons_fixed(8, 4, 1.0, 3, 1e-5)  # fixed-size: replace-one RDP
    assert h[-1]["dp_epsilon_rdp"] == pytest.approx(want["dp_epsilon_rdp"])
    assert "dp_epsilon_pld" not in h[-1]


def test_adaptive_round_updates_clip_in_state():
    cfg = RunConfig(clients=8, unseen_clients=0, cohort=4, local_steps=2, batch_size=4,
                    aggregation="uniform", dp="adaptive")
    res = _run(cfg, HParams(dp_clip=1e-4, dp_noise=0.0, dp_clip_lr=0.5), rounds=4)
    clips = res.round_metrics["dp_clip"]
    b = res.round_metrics["dp_unclipped_share"]  # (n x (0 - 1/2) + N(0, sigma_b^2)) / 4 + 1/2
    n = res.round_metrics["cohort_size"]
    assert np.abs(b - 0.5 + n / 8).max() < 4 * 0.2 / 4  # sigma_b = 4 / 20
    # every update is longer than 1e-4, so C <- C exp(-0.5 (b - 0.5))
    want = 1e-4 * np.exp(np.cumsum(-0.5 * (b - 0.5)))
    np.testing.assert_allclose(clips[1:], want[:-1], rtol=1e-4)
    assert float(res.final_state.uplink.clip) == pytest.approx(want[-1], rel=1e-4)
    assert (res.round_metrics["dp_clipped"] == 1.0).all()
    assert (res.round_metrics["dp_overflow"] == 0).all()


def _dp_results(**kw):
    from fedjax_appeal.run.experiment import run_config

    cfg = RunConfig(**{**dict(dataset="synthetic", model="logistic", clients=20,
                              unseen_clients=0, cohort=5, rounds=3, eval_every=3,
                              local_steps=2, batch_size=8, dp="fixed", dp_delta=1e-3,
                              aggregation="uniform"), **kw})
    shown = []
    res, _ = run_config(cfg, HParams(), on_eval=shown.append)
    return res, shown


PRIVATE = ("train_loss", "train_acc", "train_loss_clients")


def test_dp_results_hold_only_what_the_guarantee_covers():
    res, shown = _dp_results()
    assert "final_clients" not in res and "participation" not in res
    for entry in res["history"] + shown:
        assert not set(PRIVATE) & set(entry)
        assert "test_acc_seen" in entry and "dp_epsilon_rdp" in entry
    assert set(res["round_metrics"]) <= {"dp_clip", "dp_noise_std", "dp_overflow",
                                         "params_finite"}
    for k in ("cohort_idx", "cohort_size", "cohort_loss", "dp_clipped"):
        assert f"round_metrics.{k}" in res["privacy"]["withheld"]
    assert "history.train_loss" in res["privacy"]["withheld"]
    assert res["privacy"]["outside_guarantee"] == []
    # asked for: everything is written and named as outside the guarantee
    full, shown = _dp_results(dp_publish_client_stats=True)
    assert "final_clients" in full and "cohort_idx" in full["round_metrics"]
    assert "train_loss" in full["history"][-1] and "train_loss" in shown[-1]
    out = full["privacy"]["outside_guarantee"]
    for k in ("history.train_loss", "round_metrics.cohort_idx", "final_clients",
              "participation"):
        assert k in out
    assert not any(k.startswith("history.test_") for k in out)
    # the published model and test metrics are the same either way
    assert full["history"][-1]["test_acc_seen"] == res["history"][-1]["test_acc_seen"]


def test_publish_flag_without_dp_is_refused():
    from fedjax_appeal.run.validate import check_ignored

    with pytest.raises(ConfigError, match="--dp-publish-client-stats has no effect"):
        check_ignored(RunConfig(), {"dp_publish_client_stats"})


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
    assert cfg.as_dict()["dp"] == "fixed"
