"""Update compression: QSGD unbiasedness and grid, top-k exactness, error feedback by hand,
bits by hand, per-client residual state through the round, and a compressed FMNIST run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.local import compress
from fedjax_appeal.run.simulate import simulate
from fedjax_appeal.run.validate import validate


def test_qsgd_is_unbiased_and_on_its_grid():
    rng = np.random.default_rng(0)
    v = rng.normal(size=37).astype(np.float32)
    s, bucket, n = 3, 16, 20000
    q = compress.qsgd(s, bucket)
    out = np.asarray(jax.vmap(lambda k: q.update(jnp.asarray(v), compress.EmptyState(), k)[0])(
        jax.random.split(jax.random.key(0), n)))
    # every coordinate is its bucket's norm x sign x l / s, l in 0..s
    for b0 in range(0, 37, bucket):
        sl = slice(b0, min(37, b0 + bucket))
        norm = np.linalg.norm(v[sl])
        lv = out[:, sl] / norm * s * np.sign(v[sl])
        np.testing.assert_allclose(lv, np.round(lv), atol=1e-4)
        assert lv.min() >= -1e-4 and lv.max() <= s + 1e-4
        # per-coordinate variance of QSGD: norm^2 / s^2 * p (1 - p), p = frac(s |v| / norm)
        r = s * np.abs(v[sl]) / norm
        p = r - np.floor(r)
        se = np.sqrt(norm ** 2 / s ** 2 * p * (1 - p) / n) + 1e-7
        assert (np.abs(out[:, sl].mean(0) - v[sl]) <= 5 * se).all()


def test_qsgd_zero_vector_stays_zero():
    q = compress.qsgd(4, 8)
    out = q.update(jnp.zeros(20), compress.EmptyState(), jax.random.key(0))[0]
    assert np.all(np.asarray(out) == 0)


def test_top_k_exact():
    rng = np.random.default_rng(1)
    v = rng.normal(size=100).astype(np.float32)
    out = np.asarray(compress.top_k(7).update(jnp.asarray(v), compress.EmptyState(),
                                              jax.random.key(0))[0])
    keep = np.argsort(-np.abs(v))[:7]
    want = np.zeros_like(v)
    want[keep] = v[keep]
    np.testing.assert_array_equal(out, want)


def test_error_feedback_by_hand():
    """e_0 = 0; sent_t = topk(v_t + e_{t-1}); e_t = v_t + e_{t-1} - sent_t."""
    rng = np.random.default_rng(2)
    vs = rng.normal(size=(5, 12)).astype(np.float32)
    c = compress.error_feedback(compress.top_k(3))
    state = c.init(12)
    e = np.zeros(12, np.float32)
    total_sent = np.zeros(12, np.float32)
    for t, v in enumerate(vs):
        sent, state = c.update(jnp.asarray(v), state, jax.random.key(t))
        acc = v + e
        keep = np.argsort(-np.abs(acc))[:3]
        want = np.zeros(12, np.float32)
        want[keep] = acc[keep]
        e = acc - want
        np.testing.assert_allclose(sent, want, rtol=1e-6)
        np.testing.assert_allclose(state[0].residual, e, rtol=1e-6, atol=1e-7)
        total_sent += want
    # nothing is lost: what was sent plus the residual is everything the client had
    np.testing.assert_allclose(total_sent + e, vs.sum(0), rtol=1e-5, atol=1e-5)


def test_bits_by_hand():
    # qsgd: 2 buckets (512 + 488) x 32 bits of norm + 1000 x (1 sign + ceil(log2 5) = 3)
    assert compress.qsgd(4, 512).bits(1000) == 2 * 32 + 1000 * 4
    assert compress.qsgd(1, 512).bits(10) == 32 + 10 * 2
    # top-k: k x (32 value bits + ceil(log2 1000) = 10 index bits)
    assert compress.top_k(10).bits(1000) == 10 * 42
    assert compress.error_feedback(compress.top_k(10)).bits(1000) == 420
    assert compress.identity().bits(1000) == 32000
    assert compress.topk_count(0.01, 1234) == 12 and compress.topk_count(1e-9, 50) == 1


def _run(cfg, rounds=3):
    data = make_tiny_data(num_clients=8)
    model = make_model("logistic", "tiny", 3, (5,), np.float32, scale=1.0)
    return simulate(build(cfg.algorithm, model, cfg), data, HParams(), jax.random.key(0),
                    rounds=rounds, eval_every=rounds)


def test_round_keeps_residuals_of_participants_only_and_counts_bits():
    base = dict(clients=8, unseen_clients=0, cohort=3, local_steps=2, batch_size=4)
    cfg = RunConfig(**base, compress="topk", compress_fraction=0.2)
    res = _run(cfg, rounds=2)
    d = 5 * 3 + 3  # logistic: W [5, 3] + b [3]
    k = compress.topk_count(0.2, d)
    np.testing.assert_array_equal(res.round_metrics["bits_up"],
                                  [3 * k * (32 + 5)] * 2)  # 3 clients, ceil(log2 18) = 5
    resid = np.asarray(res.final_state.uplink.client[0].residual)
    assert resid.shape == (8, d)
    went = np.asarray(res.final_state.participation) > 0
    assert (np.abs(resid[~went]).sum(1) == 0).all()  # never selected: no residual
    assert (np.abs(resid[went]).sum(1) > 0).all()  # top-20% leaves a residual
    # fraction 1 sends everything: the same model as the uncompressed round
    full = _run(RunConfig(**base, compress="topk", compress_fraction=1.0))
    plain = _run(RunConfig(**base))
    for a, b in zip(jax.tree.leaves(full.final_state.params),
                    jax.tree.leaves(plain.final_state.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw,needle", [
    (dict(compress="qsgd", compress_levels=0), "--compress-levels"),
    (dict(compress="topk", compress_fraction=0.0), "--compress-fraction"),
    (dict(compress="topk", client_chunk=2), "--client-chunk"),
])
def test_bad_compression_options(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        validate(RunConfig(**kw), HParams())


@pytest.mark.data
def test_fmnist_compressed_run_learns():
    from fedjax_appeal.run.experiment import run_config

    cfg = RunConfig(dataset="fmnist", model="logistic", clients=100, unseen_clients=0,
                    cohort=10, rounds=20, local_steps=5, batch_size=16, eval_every=20,
                    max_samples=6000, compress="topk", compress_fraction=0.05)
    results, _ = run_config(cfg, HParams(client_lr=0.1))
    assert results["history"][-1]["test_acc_seen"] > 0.45  # chance is 0.1
    bits = results["round_metrics"]["bits_up"]
    k = compress.topk_count(0.05, 7850)
    assert bits[0] == 10 * k * (32 + 13)  # ceil(log2 7850) = 13
