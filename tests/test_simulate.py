"""Chunks of rounds: one trace for all rounds, deterministic histories, eval schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data, tiny_run_config

from fedjax_appeal.algorithms import build
from fedjax_appeal.algorithms.base import FederatedAlgorithm
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.run.driver import eval_rounds
from fedjax_appeal.run.simulate import simulate


def _setup(**kw):
    data = make_tiny_data(num_clients=8, unseen=3)
    model = make_model("mlp", "tiny", 3, (5,), np.float32, scale=1.0)
    cfg = RunConfig(clients=8, unseen_clients=3, cohort=3, local_steps=2, batch_size=4, **kw)
    return data, model, build("fedavg", model, cfg)


def test_no_retrace_across_rounds_and_chunks():
    data, model, alg = _setup()
    traces = {"n": 0}

    def counted(state, d, key, hp):
        traces["n"] += 1
        return alg.round(state, d, key, hp)

    res = simulate(alg._replace(round=counted), data, HParams(), jax.random.key(0), rounds=12,
                   eval_every=3)
    assert traces["n"] == 1  # 4 chunks of 3 rounds, one trace
    assert [h["round"] for h in res.history] == [0, 3, 6, 9, 12]
    assert res.round_metrics["cohort_size"].shape == (12,)


def test_same_seed_same_history_other_seed_differs():
    data, model, alg = _setup()
    runs = [simulate(alg, data, HParams(), jax.random.key(s), rounds=4, eval_every=2).history
            for s in (5, 5, 6)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_resume_from_state_equals_uninterrupted():
    data, model, alg = _setup()
    key = jax.random.key(3)
    full = simulate(alg, data, HParams(), key, rounds=6, eval_every=3)
    half = simulate(alg, data, HParams(), key, rounds=3, eval_every=3)
    rest = simulate(alg, data, HParams(), key, rounds=6, eval_every=3, state=half.final_state,
                    start_round=3)
    assert rest.history[-1] == full.history[-1]
    for a, b in zip(jax.tree.leaves(rest.final_state.params),
                    jax.tree.leaves(full.final_state.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_history_has_seen_and_unseen_metrics():
    data, model, alg = _setup()
    res = simulate(alg, data, HParams(), jax.random.key(0), rounds=2, eval_every=1)
    h = res.history[-1]
    for k in ("train_loss", "test_acc_seen", "test_acc_unseen", "test_loss_unseen"):
        assert k in h and np.isfinite(h[k])
    assert 0.0 <= h["test_acc_seen"] <= 1.0
    assert res.timing["sec_per_round"] > 0 and res.timing["compile_s"] > 0
    assert len(res.final_eval["test_acc"]) == 8 and len(res.final_eval["unseen_test_acc"]) == 3


def test_eval_rounds():
    assert eval_rounds(10, 3) == [3, 6, 9, 10]
    assert eval_rounds(9, 3) == [3, 6, 9]
    assert eval_rounds(5, 0) == [5]
    assert eval_rounds(0, 3) == []


def test_algorithm_is_a_namedtuple_of_pure_functions():
    _, _, alg = _setup()
    assert isinstance(alg, FederatedAlgorithm)
    assert set(alg._fields) == {"name", "init", "round", "evaluate", "account", "pre_init",
                                "initial", "check"}
    assert alg.account is None  # host-side privacy accounting: DP runs only
    assert alg.pre_init is None  # FedAvg without the appeal protocol: nothing to share


BASELINES = ["qffl", "afl", "scaffold", "mwfed", "perfedavg", "pfedme"]


@pytest.mark.slow
@pytest.mark.parametrize("name", BASELINES)
def test_two_rounds_deterministic_no_nan(name):
    data = make_tiny_data(unseen=3)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    cfg = tiny_run_config(algorithm=name)
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


def test_progress_eta_counts_training_not_compiling(monkeypatch):
    """The first stretch after round 0 holds the compilation of the chunk: no ETA there;
    later ones use the pace of the latest stretch (here 2 s per 10 rounds)."""
    import io

    from fedjax_appeal.run import simulate as sim

    clock = iter([0.0, 1.0, 60.0, 62.0, 64.0])  # start, then one reading per evaluation
    monkeypatch.setattr(sim.time, "perf_counter", lambda: next(clock))
    out = io.StringIO()
    show = sim.progress_printer("fedavg", 50, stream=out)
    for r in (0, 10, 20, 30):
        show({"round": r, "train_loss": 1.0, "test_acc_seen": 0.5})
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("elapsed 1s") and lines[1].endswith("elapsed 60s")  # no ETA
    assert lines[2].endswith("elapsed 62s eta 6s")  # 2 s / 10 rounds x 30 rounds left
    assert lines[3].endswith("elapsed 64s eta 4s")
