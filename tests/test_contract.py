"""The contract every registered algorithm keeps (parametrised over `ALGORITHMS`).

* jit = no jit: one round under `jax.jit` equals the same round run op by op;
* vmapped = sequential: init + round vmapped over two (key, hparams) combinations, as a
  sweep runs them, equal the two runs one after the other;
* no retrace: a jitted round traces once for rounds of new states, keys and hparams;
* finite: the server parameters stay finite.
"""

from __future__ import annotations

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.algorithms import ALGORITHMS, build
from fedjax_appeal.core.config import HParams, RunConfig

_spec = importlib.util.spec_from_file_location(
    "make_golden", os.path.join(os.path.dirname(__file__), "golden", "make_golden.py"))
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)


def _setup(name):
    model, data = golden.tiny_setup("bn" if name == "fedbn" else "plain")
    cfg = RunConfig(algorithm=name, clients=6, unseen_clients=2, cohort=3, local_steps=1,
                    batch_size=4, rho_steps=2, pfedme_k=1)
    return build(name, model, cfg), data


def _close(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(x, y)


FAST = ("fedavg",)  # the fast suite's share; CI runs every algorithm


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(ALGORITHMS)])
def test_algorithm_contract(name):
    alg, data = _setup(name)
    hps = [HParams(client_lr=0.1).as_arrays(), HParams(client_lr=0.05).as_arrays()]
    keys = [jax.random.key(3), jax.random.key(4)]
    traces = []

    def counted(state, data, key, hp):
        traces.append(1)
        return alg.round(state, data, key, hp)

    rnd = jax.jit(counted)
    init = jax.jit(alg.init)
    seq = []
    for key, hp in zip(keys, hps, strict=True):
        s0 = init(key, data, hp)
        s1, m1 = rnd(s0, data, jax.random.fold_in(key, 1), hp)
        s2, _ = rnd(s1, data, jax.random.fold_in(key, 2), hp)
        seq.append((s1, m1, s2))
    assert len(traces) == 1  # no retrace across states, keys and hparams
    for _, _, s2 in seq:  # finite
        assert all(bool(jnp.all(jnp.isfinite(a))) for a in jax.tree.leaves(s2.params))

    # jit = no jit (first combination, first round)
    s0 = init(keys[0], data, hps[0])
    with jax.disable_jit():
        e1, em1 = alg.round(s0, data, jax.random.fold_in(keys[0], 1), hps[0])
    _close((e1.params, e1.participation), (seq[0][0].params, seq[0][0].participation))
    np.testing.assert_array_equal(np.asarray(em1["cohort_idx"]),
                                  np.asarray(seq[0][1]["cohort_idx"]))
    _close(em1["cohort_weights"], seq[0][1]["cohort_weights"])

    # vmapped = sequential (init and one round over both combinations)
    kb = jnp.stack(keys)
    hb = jax.tree.map(lambda *xs: jnp.stack(xs), *hps)
    sb = jax.jit(jax.vmap(alg.init, in_axes=(0, None, 0)))(kb, data, hb)
    r1 = jax.vmap(lambda k: jax.random.fold_in(k, 1))(kb)
    vb, mb = jax.jit(jax.vmap(alg.round, in_axes=(0, None, 0, 0)))(sb, data, r1, hb)
    for i in range(2):
        _close(jax.tree.map(lambda a, i=i: a[i], vb.params), seq[i][0].params)
        np.testing.assert_array_equal(np.asarray(mb["cohort_idx"][i]),
                                      np.asarray(seq[i][1]["cohort_idx"]))


@pytest.mark.slow
def test_executor_is_an_explicit_argument():
    """A chunked executor passed to `build` (no ambient setting) changes how the cohort
    runs, not what it computes: equal to one vmap up to float summation order."""
    from fedjax_appeal.execute.executor import VMAP, chunked

    model, data = golden.tiny_setup("plain")
    cfg = RunConfig(algorithm="maxfl", clients=6, unseen_clients=2, cohort=5, local_steps=1,
                    batch_size=4, rho_steps=2)
    hp = HParams(client_lr=0.1).as_arrays()
    out, scans = [], []
    for ex in (VMAP, chunked(2)):
        alg = build("maxfl", model, cfg, executor=ex)
        s0 = jax.jit(alg.init)(jax.random.key(0), data, hp)
        out.append(jax.jit(alg.round)(s0, data, jax.random.key(1), hp))
        scans.append(str(jax.make_jaxpr(alg.round)(s0, data, jax.random.key(1), hp))
                     .count("scan["))
    assert scans[1] > scans[0]  # the chunked round loops over chunks (two passes)
    (a, ma), (b, mb) = out
    np.testing.assert_array_equal(np.asarray(ma["cohort_idx"]), np.asarray(mb["cohort_idx"]))
    _close(ma["cohort_weights"], mb["cohort_weights"])
    _close(a.params, b.params)
