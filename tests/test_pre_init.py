"""`FederatedAlgorithm.pre_init`: the solo models as a program of their own, the same for
every algorithm under the appeal protocol, and the same state as the inline init."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.protocols.appeal.appeal import with_appeal
from fedjax_appeal.run.driver import Driver, _initial_of

CFG = RunConfig(clients=6, unseen_clients=2, cohort=3, local_steps=2, batch_size=4,
                rho_steps=3, opt_out_after=0)


def _setup():
    data = make_tiny_data(num_clients=6, unseen=2, seed=3)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    return model, data, HParams(client_lr=0.2).as_arrays()


def _appeal(name, model, cfg=CFG):
    return with_appeal(build(name, model, cfg.replace(algorithm=name)), model, cfg)


def _leaves_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(la, lb, strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_arms_under_appeal_share_one_pre_init_program():
    model, data, hp = _setup()
    key = jax.random.key(0)
    texts = {name: jax.jit(_appeal(name, model).pre_init).lower(key, data, hp).as_text()
             for name in ("maxfl", "fedavg", "fedprox", "mwfed")}
    assert len(set(texts.values())) == 1, "the arms compile different pre-init programs"
    # without the protocol MaxFL's own pre-init trains the seen clients' solo models only
    own = jax.jit(build("maxfl", model, CFG.replace(algorithm="maxfl")).pre_init)
    assert own.lower(key, data, hp).as_text() != texts["maxfl"]
    # a given requirement needs no solo models: no pre-init
    assert build("maxfl", model, CFG.replace(algorithm="maxfl", requirement="0.5")
                 ).pre_init is None


def test_pre_init_gives_the_inline_init_state():
    model, data, hp = _setup()
    key = jax.random.key(4)
    for name in ("maxfl", "fedavg", "mwfed"):
        alg = _appeal(name, model)
        inline = jax.jit(alg.init)(key, data, hp)
        pre = jax.jit(alg.pre_init)(key, data, hp)
        staged = jax.jit(alg.init)(key, data, hp, pre)
        _leaves_equal(inline, staged)
        info = staged.protocol
        _leaves_equal(info.solo_seen, pre["solo_seen"])
        _leaves_equal(info.solo_unseen, pre["solo_unseen"])
        if name != "fedavg":  # the requirement reads the same solo models
            _leaves_equal(staged.solo, pre["solo_seen"])
            np.testing.assert_array_equal(np.asarray(staged.rho),
                                          np.asarray(pre["solo_seen"].train_loss))


def test_driver_runs_pre_init_as_its_own_program():
    model, data, hp = _setup()
    alg = _appeal("maxfl", model)
    drv = Driver(alg, data, hp, jax.random.key(2))
    state = drv.init()
    assert set(drv.compiled) == {"pre_init", "init"}
    k_init = jax.random.fold_in(jax.random.key(2), 0)
    _leaves_equal(state, jax.jit(alg.init)(k_init, data, hp))
    plain_alg = build("fedavg", model, CFG)
    plain = Driver(plain_alg, data, hp, jax.random.key(2))
    _leaves_equal(plain.init(), jax.jit(plain_alg.init)(k_init, data, hp))
    assert set(plain.compiled) == {"initial", "init"}
    # an algorithm without an initial model compiles its init alone
    bare = Driver(plain_alg._replace(initial=None), data, hp, jax.random.key(2))
    _leaves_equal(bare.init(), jax.jit(plain_alg.init)(k_init, data, hp))
    assert set(bare.compiled) == {"init"}


def test_initial_model_program_is_shared_across_algorithms_and_data():
    """The initial-model program reads only the init key: algorithms, selectors and data
    of every size lower it to the same program (one compile for a comparison's arms and
    for every comparison of one model)."""
    model = _setup()[0]
    keys = jax.vmap(jax.random.key)(jnp.arange(3))
    texts = set()
    for name, cfg in (("fedavg", CFG), ("scaffold", CFG), ("qffl", CFG),
                      ("fedavg", CFG.replace(clients=9, selector="poc"))):
        alg = build(name, model, cfg.replace(algorithm=name))
        pre = jax.vmap(_initial_of(alg.initial))
        texts.add(jax.jit(pre).lower(keys).as_text(debug_info=False))
    assert len(texts) == 1
