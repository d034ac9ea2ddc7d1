"""What a command compiles: only the driver's own programs (no program for keys, data or
stacked hyperparameters), and the arms of a comparison trace a program they share once."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.arrays import ClientArrays, on_device
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.memo import shared
from fedjax_appeal.core.models import make_model
from fedjax_appeal.execute.runtime import CompileLog
from fedjax_appeal.run.driver import Driver, root_keys, split_key
from fedjax_appeal.run.sweep import _stack

CFG = RunConfig(clients=6, cohort=3, local_steps=2, batch_size=4)


def _model():
    return make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)


def test_shared_returns_one_function_per_value():
    made = []

    @shared
    def builder(model, opts):
        made.append((model, opts))
        return lambda x: x

    a, b = _model(), _model()
    assert a is not b and a == b
    assert builder(a, ("k", 1)) is builder(b, ("k", 1))
    assert builder(a, ("k", 2)) is not builder(a, ("k", 1))
    assert len(made) == 2
    # unhashable arguments build afresh, as without the cache
    assert builder(a, ["k"]) is not builder(a, ["k"])
    assert len(made) == 4


def test_data_and_hyperparameters_reach_the_device_without_programs():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (40, 4, 4), dtype=np.uint8)
    y = rng.integers(0, 3, 40)
    with CompileLog() as log:
        arrays = ClientArrays.from_indices(x, y, [np.arange(0, 15), np.arange(15, 40)])
        tags = on_device({"flipped": np.array([True, False]), "group": [0, 1]})
        hp = jax.device_put(_stack([HParams(client_lr=0.1), HParams(client_lr=0.2)]))
        jax.block_until_ready((arrays, tags, hp))
    rec = log.record()
    assert rec["programs"] == 0 and rec["trace_s"] == 0.0, rec
    np.testing.assert_array_equal(np.asarray(arrays.x), x[np.r_[0:15, 15:40]])
    assert arrays.y.dtype == jnp.int32 and tags["group"].dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(hp.client_lr), np.float32([0.1, 0.2]))


def test_driver_compiles_its_own_programs_only_and_keys_match(caplog):
    """Keys are derived inside the programs: one run compiles the initial model, init, a
    chunk and the evaluation (and the rounds' index, `jnp.arange`), no program for keys,
    data or hyperparameters, and draws what the split keys outside would."""
    import logging

    data = make_tiny_data(num_clients=6, seed=1)
    alg = build("fedavg", _model(), CFG)
    hp = HParams(client_lr=0.2).as_arrays()
    key = jax.random.key(5)
    with CompileLog() as log, jax.log_compiles(True), caplog.at_level(logging.WARNING):
        drv = Driver(alg, data, hp, key)
        state = drv.init()
        state, _ = drv.advance(state, 0, 2)
        drv.evaluate(state)
    names = [m.split("jit(", 1)[1].split(")", 1)[0] for m in caplog.messages
             if m.startswith("Compiling jit(")]
    assert len(drv.compiled) == 4
    assert log.record()["programs"] == len(names), names
    # (a program this process compiled before, the shared initial model, is not again)
    assert set(names) - {"iota", "add"} <= {"chunk", "evaluate", "init", "pre"}, names
    assert {"chunk", "evaluate", "init"} <= set(names), names
    k_init, k_train = split_key(key)
    want = jax.jit(alg.init)(k_init, data, hp)
    for r in range(2):
        want, _ = jax.jit(alg.round)(want, data, jax.random.fold_in(k_train, r), hp)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(want.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_arms_trace_their_shared_programs_once():
    """Two arms (FedAvg's proportional and uniform weights) of equal models: the second
    compiles its own init only; the initial model and the evaluation are the first arm's
    programs, neither traced nor compiled again."""
    data = make_tiny_data(num_clients=6, seed=2)
    hp = jax.device_put(_stack([HParams(client_lr=0.1)] * 2))
    keys = root_keys(np.arange(2, dtype=np.uint32))
    counts = []
    for aggregation in ("proportional", "uniform"):
        alg = build("fedavg", _model(), CFG.replace(aggregation=aggregation))
        with CompileLog() as log:
            drv = Driver(alg, data, hp, keys, runs=2)
            drv.evaluate(drv.init())
        counts.append(log.record()["programs"])
    assert counts == [3, 1], counts
