"""`run.pre_memo`: a run whose pre-init program (the solo models) would compute what an
earlier run on the same data object, root key and hyperparameters computed reads that
output back, and its state is the state of an init computed from scratch."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.protocols.appeal.appeal import with_appeal
from fedjax_appeal.run.driver import Driver, init_key
from fedjax_appeal.run.pre_memo import PRE_MEMO, OutputMemo, values_key

CFG = RunConfig(clients=6, unseen_clients=2, cohort=3, local_steps=2, batch_size=4,
                rho_steps=3, opt_out_after=0)
MODEL = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)


def _appeal(name):
    return with_appeal(build(name, MODEL, CFG.replace(algorithm=name)), MODEL, CFG)


def _equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_arms_with_equal_inputs_share_the_solo_models():
    PRE_MEMO.clear()
    data = make_tiny_data(num_clients=6, unseen=2, seed=7)
    hp = HParams(client_lr=0.2).as_arrays()
    key = jax.random.key(3)
    first = Driver(_appeal("fedavg"), data, hp, key)
    first.init()
    assert "pre_init" in first.compiled
    hits = PRE_MEMO.hits
    for name in ("fedprox", "maxfl"):
        alg = _appeal(name)
        drv = Driver(alg, data, HParams(client_lr=0.2).as_arrays(), jax.random.key(3))
        state = drv.init()
        assert "pre_init" not in drv.compiled  # neither compiled nor run
        _equal(state, jax.jit(alg.init)(init_key(key), data, hp))  # as from scratch
    assert PRE_MEMO.hits == hits + 2
    # another lr, another key or another federation (even an equal one): computed
    for d, h, k in ((data, HParams(client_lr=0.3).as_arrays(), key),
                    (data, hp, jax.random.key(4)),
                    (make_tiny_data(num_clients=6, unseen=2, seed=7), hp, key)):
        drv = Driver(_appeal("fedprox"), d, h, k)
        drv.init()
        assert "pre_init" in drv.compiled
    assert PRE_MEMO.hits == hits + 2


def test_entries_go_with_their_data():
    memo = OutputMemo(max_entries=2)
    calls = []

    def compute(v):
        calls.append(v)
        return v

    data = make_tiny_data(seed=1)
    key, hp = jax.random.key(0), {"lr": jnp.float32(0.1)}
    assert memo.get_or_compute(len, "one", data, key, hp, lambda: compute(1)) == 1
    assert memo.get_or_compute(len, "one", data, key, hp, lambda: compute(2)) == 1
    assert memo.get_or_compute(len, "two", data, key, hp, lambda: compute(3)) == 3  # layout
    assert calls == [1, 3] and memo.hits == 1
    del data
    gc.collect()
    other = make_tiny_data(seed=1)
    assert memo.get_or_compute(len, "one", other, key, hp, lambda: compute(4)) == 4
    assert calls == [1, 3, 4]
    # bounded: the oldest entry leaves first
    for i in range(3):
        memo.get_or_compute(len, str(i), other, key, hp, lambda i=i: compute(10 + i))
    assert len(memo._entries) == 2


def test_values_key_reads_values_not_objects():
    a = {"lr": jnp.float32(0.1), "k": jax.random.key(2)}
    b = {"lr": np.float32(0.1), "k": jax.random.key(2)}
    assert values_key(a) == values_key(b)
    assert values_key(a) != values_key({"lr": jnp.float32(0.2), "k": jax.random.key(2)})
    assert values_key(a) != values_key({"lr": jnp.float32(0.1), "k": jax.random.key(3)})
