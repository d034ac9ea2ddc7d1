"""The baselines' library factories (`fa.scaffold`, `fa.qffl`, ...): each runs the registered
algorithm bit for bit, its hyperparameters are keys of the vmappable pytree, and what does
not fit is refused in one line."""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

import fedjax_appeal as fa
from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.flax_model import as_model
from fedjax_appeal.core.models import model_for
from fedjax_appeal.data import load_federated

CFG = RunConfig(dataset="synthetic", partition="natural", clients=6, unseen_clients=2, cohort=3,
                local_steps=3, batch_size=4, min_samples=4, rho_steps=3, appeal="off")
SIZES = dict(local_steps=3, batch_size=4, cohort=3)


@pytest.fixture(scope="module")
def fed():
    data, ds = load_federated(CFG)
    return data, model_for("mlp", data, ds)  # an MLP with dropout: the dropout keys count


class Normed(nn.Module):
    @nn.compact
    def __call__(self, x, training: bool = False):
        x = nn.BatchNorm(use_running_average=not training, momentum=0.5)(nn.Dense(8)(x))
        return nn.Dense(10)(nn.relu(x))


def run(alg, data, hp=None, rounds=2):
    return fa.simulate(alg, data, hp or HParams(), jax.random.key(0), rounds=rounds,
                       eval_every=1)


def same_run(a, b) -> None:
    assert a.history == b.history
    for x, y in zip(jax.tree.leaves(a.final_state), jax.tree.leaves(b.final_state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# name -> (the registered run's HParams, the factory call, the factory run's HParams)
CASES = {
    "scaffold": (HParams(client_lr=0.1), lambda m: fa.scaffold(m, 0.1, **SIZES), None),
    # q-FFL's weights divide by eta and eta^2: a constant lr folds into them otherwise than
    # the traced one of the registered run (last bit), so the factory run gets it as a key
    "qffl": (HParams(client_lr=0.1, qffl_q=2.0), lambda m: fa.qffl(m, 0.5, q=0.0, **SIZES),
             HParams(extra={"client.learning_rate": 0.1, "qffl.q": 2.0})),
    "fednova": (HParams(client_lr=0.1), lambda m: fa.fednova(m, 0.1, **SIZES), None),
    "fedfor": (HParams(client_lr=0.1, fedfor_lambda=0.3),
               lambda m: fa.fedfor(m, 0.1, lam=0.3, **SIZES), None),
    "mwfed": (HParams(client_lr=0.1, mwfed_eta=0.5),
              lambda m: fa.mwfed(m, optax.sgd(0.1), eta=0.5, rho_steps=3, solo_lr=0.1, **SIZES),
              None),
    "perfedavg": (HParams(perfedavg_alpha=0.03, perfedavg_beta=0.07),
                  lambda m: fa.perfedavg(m, alpha=0.03, beta=0.07, **SIZES), None),
    "pfedme": (HParams(client_lr=0.1, pfedme_lambda=10.0, pfedme_lr=0.04, pfedme_beta=0.9),
               lambda m: fa.pfedme(m, 0.1, lam=10.0, personal_lr=0.04, beta=0.9, **SIZES), None),
    "fedbuff": (HParams(client_lr=0.1, staleness_power=0.7),
                lambda m: fa.fedbuff(m, 0.1, buffer=3, staleness_power=0.7, local_steps=3,
                                     batch_size=4), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_baseline_factory_is_the_registered_algorithm_bit_for_bit(fed, name):
    data, model = fed
    hp, factory, hp_lib = CASES[name]
    same_run(run(factory(model), data, hp_lib),
             run(build(name, model, CFG.replace(algorithm=name)), data, hp))


def test_fedbn_keeps_each_clients_batch_norm_as_the_registered_one(fed):
    data, _ = fed
    model = as_model(Normed(), data.input_shape, data.train.x.dtype, data.num_classes)
    lib = run(fa.fedbn(model, 0.1, **SIZES), data)
    same_run(lib, run(build("fedbn", model, CFG.replace(algorithm="fedbn")), data,
                      HParams(client_lr=0.1)))
    bn = lib.final_state.algo.bn_state["batch_stats"]["BatchNorm_0"]["mean"]
    assert bn.shape[0] == data.num_clients  # one per seen client
    assert len({np.asarray(row).tobytes() for row in bn}) > 1  # and they differ


def test_a_method_hyperparameter_is_a_key_of_the_pytree(fed):
    """fedfor(lam=0.3) with "fedfor.lambda" = 2 in the HParams trains as fedfor(lam=2)."""
    data, model = fed
    keyed = run(fa.fedfor(model, 0.1, lam=0.3, **SIZES), data,
                HParams(extra={"fedfor.lambda": 2.0}))
    given = run(fa.fedfor(model, 0.1, lam=2.0, **SIZES), data)
    plain = run(fa.fedfor(model, 0.1, lam=0.3, **SIZES), data)
    loss = [[h["train_loss"] for h in r.history] for r in (keyed, given, plain)]
    np.testing.assert_allclose(loss[0], loss[1], rtol=1e-5)
    assert abs(loss[0][-1] - loss[2][-1]) > 1e-4  # lambda does change the run


def test_a_grid_over_the_client_lr_of_scaffold_is_each_lr(fed):
    data, model = fed
    grid = fa.simulate_grid(fa.scaffold(model, 0.1, **SIZES), data,
                            {"client.learning_rate": [0.05, 0.2]}, seeds=[0], rounds=2,
                            eval_every=2)
    assert grid.programs == ["initial", "init", "eval", "chunk of 2 rounds"]
    finals = []
    for r in grid.runs:
        alone = run(fa.scaffold(model, r.hparams["client.learning_rate"], **SIZES), data)
        np.testing.assert_allclose(r.history[-1]["train_loss"], alone.history[-1]["train_loss"],
                                   rtol=2e-4)
        finals.append(r.history[-1]["train_loss"])
    assert abs(finals[0] - finals[1]) > 1e-4


@pytest.mark.parametrize("call,msg", [
    (lambda m: fa.scaffold(m, 0.0, **SIZES), r"scaffold: client_lr must be a number > 0"),
    (lambda m: fa.qffl(m, 0.1, q=-1, **SIZES), r"qffl: q must be a number >= 0"),
    (lambda m: fa.perfedavg(m, variant="so"), r"variant must be 'fo' or 'hf'"),
    (lambda m: fa.pfedme(m, 0.1, inner_steps=0), r"inner_steps must be an integer >= 1"),
    (lambda m: fa.mwfed(m, optax.sgd(0.1), requirement="median"), r"mwfed: requirement must"),
    (lambda m: fa.fedbuff(m, 0.1, buffer=0), r"buffer must be an integer >= 1"),
    (lambda m: fa.fedfor(m, 0.1, lam="big"), r"fedfor: lam must be a number \(got 'big'\)"),
])
def test_bad_arguments_are_refused_in_one_line(fed, call, msg):
    _, model = fed
    with pytest.raises(ConfigError, match=msg) as err:
        call(model)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("alg,hp,msg", [
    (lambda m: fa.fedbn(m, 0.1, **SIZES), None, r"fedbn needs a model with BatchNorm layers"),
    (lambda m: fa.fedbuff(m, 0.1, buffer=3, concurrency=9), None,
     r"fedbuff: concurrency 9 is larger than the data's 6 clients"),
    (lambda m: fa.scaffold(m, 0.1, **SIZES), HParams(extra={"scaffold.lr": 0.1}),
     r"'scaffold.lr' is not one of scaffold's \(client.learning_rate\)"),
])
def test_what_does_not_fit_the_data_is_refused_in_one_line(fed, alg, hp, msg):
    data, model = fed
    with pytest.raises(ConfigError, match=msg) as err:
        run(alg(model), data, hp, rounds=1)
    assert "\n" not in str(err.value)
