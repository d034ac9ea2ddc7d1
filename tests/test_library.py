"""The library's algorithm factories: built from a flax module, optax optimizers and part
objects, they are the registered algorithms bit for bit, their hyperparameters are keys of
the vmappable pytree (a grid is one compiled program), and what does not fit is refused in
one line."""

from __future__ import annotations

import contextlib
import logging
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import linear_model, lsq_rows_data

import fedjax_appeal as fa
from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.flax_model import FlaxModel, as_model
from fedjax_appeal.core.models import model_for
from fedjax_appeal.data import load_federated
from fedjax_appeal.local.client import Trained, local_sgd
from fedjax_appeal.run.grid import grid_points, point_hparams

CFG = RunConfig(dataset="synthetic", partition="natural", clients=6, unseen_clients=2, cohort=3,
                local_steps=3, batch_size=4, min_samples=4, rho_steps=3, appeal="off")
SIZES = dict(local_steps=3, batch_size=4, cohort=3)


@pytest.fixture(scope="module")
def fed():
    data, ds = load_federated(CFG)
    return data, model_for("mlp", data, ds)  # an MLP with dropout: the dropout keys count


def run(alg, data, hp=None, rounds=2, seed=0, **kw):
    return fa.simulate(alg, data, hp or HParams(), jax.random.key(seed), rounds=rounds,
                       eval_every=1, **kw)


def same_run(a, b) -> None:
    assert a.history == b.history
    for x, y in zip(jax.tree.leaves(a.final_state.params), jax.tree.leaves(b.final_state.params),
                    strict=True):
        np.testing.assert_array_equal(x, y)


# (registered name, its configuration and hyperparameters, the factory call)
CASES = {
    "fedavg": (CFG, HParams(client_lr=0.1),
               lambda m: fa.fedavg(m, optax.sgd(0.1), **SIZES)),
    "fedprox": (CFG, HParams(client_lr=0.1, prox_mu=0.5),
                lambda m: fa.fedprox(m, optax.sgd(0.1), mu=0.5, **SIZES)),
    "maxfl": (CFG, HParams(client_lr=0.1, maxfl_eps=0.01),
              lambda m: fa.maxfl(m, optax.sgd(0.1), eps=0.01, rho_steps=3, solo_lr=0.1,
                                 **SIZES)),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "maxfl" else n
                                  for n in CASES])
def test_a_factory_is_the_registered_algorithm_bit_for_bit(fed, name):
    data, model = fed
    cfg, hp, factory = CASES[name]
    same_run(run(factory(model), data), run(build(name, model, cfg.replace(algorithm=name)),
                                            data, hp))


# parts as objects against the registered parts they stand for (configuration, HParams)
PARTS = {
    "exp-alpha": (dict(weights=fa.ExpAlpha(0.5)), dict(aggregation="exp-alpha"),
                  dict(exp_alpha=0.5)),
    "uniform": (dict(weights=fa.Uniform()), dict(aggregation="uniform"), {}),
    "poc": (dict(selector=fa.PowerOfChoice(4)), dict(selector="poc", poc_d=4), {}),
    "subtrunc": (dict(selector=fa.SubTrunc(lam=0.3, b=0.8)), dict(selector="subtrunc"),
                 dict(subtrunc_lambda=0.3, subtrunc_b=0.8)),
}


@pytest.mark.parametrize("part", [pytest.param(p, marks=pytest.mark.slow) if p == "subtrunc"
                                  else p for p in PARTS])
def test_weight_rules_and_selectors_as_objects_are_the_registered_ones(fed, part):
    data, model = fed
    lib, cfg_kw, hp_kw = PARTS[part]
    ref = build("fedavg", model, CFG.replace(**cfg_kw))
    same_run(run(fa.fedavg(model, optax.sgd(0.1), **SIZES, **lib), data),
             run(ref, data, HParams(client_lr=0.1, **hp_kw)))


@pytest.mark.slow
def test_divfl_and_unionfl_as_objects_are_the_registered_ones(fed):
    data, model = fed
    for obj, cfg_kw, hp_kw in ((fa.DivFL(), dict(selector="divfl"), {}),
                               (fa.UnionFL(mu=2.0, window=2), dict(selector="unionfl",
                                                                   union_window=2),
                                dict(union_mu=2.0))):
        ref = build("fedavg", model, CFG.replace(**cfg_kw))
        same_run(run(fa.fedavg(model, optax.sgd(0.1), selector=obj, **SIZES), data),
                 run(ref, data, HParams(client_lr=0.1, **hp_kw)))


def test_a_part_hyperparameter_is_a_key_of_the_pytree(fed):
    """ExpAlpha(0.5) with "exp_alpha.alpha" = 2 in the HParams is ExpAlpha(2.0)."""
    data, model = fed
    keyed = run(fa.fedavg(model, optax.sgd(0.1), weights=fa.ExpAlpha(0.5), **SIZES), data,
                HParams(extra={"exp_alpha.alpha": 2.0}))
    same_run(keyed, run(fa.fedavg(model, optax.sgd(0.1), weights=fa.ExpAlpha(2.0), **SIZES),
                        data))
    other = run(fa.fedavg(model, optax.sgd(0.1), weights=fa.ExpAlpha(0.5), **SIZES), data)
    assert other.history[-1]["train_loss"] != keyed.history[-1]["train_loss"]


@contextlib.contextmanager
def jax_compiles():
    """The names of the programs JAX compiles inside the block (`jax.log_compiles`)."""
    names: list[str] = []

    class Names(logging.Handler):
        def emit(self, record):
            m = re.match(r"Compiling (\S+) with", record.getMessage())
            if m:
                names.append(m.group(1))

    logger, handler = logging.getLogger("jax._src.interpreters.pxla"), Names()
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield names
    finally:
        logger.removeHandler(handler)


def test_a_grid_over_client_lr_and_momentum_is_one_compiled_program(fed):
    """A 2 x 2 grid compiles the programs one run compiles, once each (the initial model,
    init, evaluation and one chunk of rounds), and each row is the run of its plain
    optimizer."""
    data, model = fed
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1, momentum=0.9)
    alg = fa.fedavg(model, tx, **SIZES)
    grid = {"client.learning_rate": [0.05, 0.2], "client.momentum": [0.0, 0.5]}
    with jax_compiles() as names:
        res = fa.simulate_grid(alg, data, grid, seeds=[0], rounds=2, eval_every=1)
    assert res.programs == ["initial", "init", "eval", "chunk of 1 rounds"]
    # JAX's own log: one training program (the chunk of rounds, vmapped: "run") for all 4
    assert [n for n in names if n in ("jit(pre)", "jit(init)", "jit(evaluate)", "jit(run)",
                                      "jit(chunk)")] == [
        "jit(pre)", "jit(init)", "jit(evaluate)", "jit(run)"]
    assert [r.hparams for r in res.runs] == [
        {"client.learning_rate": lr, "client.momentum": m} for lr in (0.05, 0.2)
        for m in (0.0, 0.5)]
    finals = [r.history[-1]["train_loss"] for r in res.runs]
    for r in (res.runs[0], res.runs[3]):  # two corners of the grid, run one by one
        lr, m = r.hparams["client.learning_rate"], r.hparams["client.momentum"]
        ref = run(fa.fedavg(model, optax.sgd(lr, momentum=m), **SIZES), data).history
        for a, b in zip(r.history, ref, strict=True):
            for k in b:
                np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5, err_msg=k)
    assert len({round(v, 6) for v in finals}) == 4  # every point trained differently
    assert res.best("train_loss", lower=True)["mean"] == min(finals)


@pytest.mark.slow
def test_an_injected_hyperparameter_without_a_key_keeps_its_value(fed):
    data, model = fed
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1, momentum=0.5)
    same_run(run(fa.fedavg(model, tx, **SIZES), data),
             run(fa.fedavg(model, tx, **SIZES), data,
                 HParams(extra={"client.learning_rate": 0.1, "client.momentum": 0.5})))


@pytest.mark.parametrize("key,msg", [
    ("client.momentun", "did you mean 'client.momentum'"),
    ("server.learning_rate", "optax.inject_hyperparams"),
    ("fedprox.mu", "is not one of fedavg's"),
])
def test_a_key_the_algorithm_does_not_have_is_refused(fed, key, msg):
    data, model = fed
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1, momentum=0.5)
    with pytest.raises(ConfigError, match=msg) as e:
        run(fa.fedavg(model, tx, **SIZES), data, HParams(extra={key: 0.3}))
    assert "\n" not in str(e.value)


def test_momentum_clients_by_hand():
    """One client whose rows are all (x, y) = (1, 2), so every minibatch gradient of
    0.5 (w - 2)^2 is exactly w - 2; two heavy-ball steps from w0: g0 = w0 - 2,
    w1 = w0 - lr g0, t1 = (w1 - 2) + m g0, w2 = w1 - lr t1; the server averages one client."""
    data = lsq_rows_data([(1.0, 2.0, 8)])
    lr, m = 0.1, 0.9
    alg = fa.fedavg(linear_model(), optax.sgd(lr, momentum=m), local_steps=2, batch_size=4,
                    cohort=1)
    state = alg.init(jax.random.key(0), data, HParams().as_arrays(),
                     {"initial": linear_model().init(jax.random.key(1))})
    w0 = float(jax.tree.leaves(state.params)[0].reshape(()))
    state, _ = jax.jit(alg.round)(state, data, jax.random.key(2), HParams().as_arrays())
    g0 = w0 - 2.0
    w1 = w0 - lr * g0
    w2 = w1 - lr * ((w1 - 2.0) + m * g0)
    assert float(jax.tree.leaves(state.params)[0].reshape(())) == pytest.approx(w2, rel=1e-6)


def test_the_loss_is_an_argument(fed):
    """With plain SGD, 2 x cross-entropy at lr is cross-entropy at 2 lr (every gradient
    doubles exactly): the same trained parameters bit for bit."""
    data, model = fed
    twice = lambda s, y: 2.0 * optax.softmax_cross_entropy_with_integer_labels(s, y)  # noqa: E731
    a = run(fa.fedavg(model, optax.sgd(0.05), loss=twice, **SIZES), data)
    b = run(fa.fedavg(model, optax.sgd(0.1), **SIZES), data)
    for x, y in zip(jax.tree.leaves(a.final_state.params), jax.tree.leaves(b.final_state.params),
                    strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.history[-1]["test_loss_seen"] == pytest.approx(2 * b.history[-1]["test_loss_seen"],
                                                            rel=1e-5)


# --- flax modules passed directly ---------------------------------------------------------

class Dropped(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dropout(0.5, deterministic=not train)(nn.relu(nn.Dense(8)(x)))
        return nn.Dense(self.num_classes)(x)

    num_classes: int = 3


class Deterministic(nn.Module):
    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        return nn.Dense(3)(nn.Dropout(0.5, deterministic=deterministic)(x))


class Identity(nn.Module):
    @nn.compact
    def __call__(self, x):
        self.param("unused", nn.initializers.zeros, (1,))
        return x.reshape(len(x), -1)


def test_uint8_images_arrive_in_0_1_with_a_channel_axis():
    model = as_model(Identity(), (2, 2), jnp.uint8, 4)
    x = jnp.array([[[0, 51], [102, 255]]], jnp.uint8)
    params, state = model.init(jax.random.key(0))
    out, _ = model.apply(params, state, x, train=False)
    np.testing.assert_allclose(out, [[0.0, 0.2, 0.4, 1.0]], rtol=1e-6)
    assert model.channel and model.mode == ""


@pytest.mark.parametrize("module,mode", [(Dropped(), "train"),
                                         (Deterministic(), "deterministic"),
                                         (nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(3)]),
                                          "")])
def test_a_flax_module_takes_its_mode_by_its_own_keyword(module, mode):
    model = as_model(module, (5,), jnp.float32, 3)
    assert isinstance(model, FlaxModel) and model.mode == mode
    params, state = model.init(jax.random.key(0))
    x = jnp.ones((64, 5))
    ev = [model.apply(params, state, x, train=False)[0] for _ in range(2)]
    tr = [model.apply(params, state, x, train=True, key=jax.random.key(k))[0] for k in (1, 2)]
    np.testing.assert_array_equal(*ev)  # evaluation is deterministic
    if mode:  # dropout while training: two keys, two outputs
        assert not np.array_equal(*tr)


def test_a_flax_module_trains_on_the_data_directly(fed):
    data, _ = fed
    res = run(fa.fedavg(Dropped(num_classes=data.num_classes), optax.sgd(0.1), **SIZES), data)
    assert [h["round"] for h in res.history] == [0, 1, 2]
    assert res.history[-1]["train_loss"] < res.history[0]["train_loss"]
    assert set(res.final_state.params) == {"Dense_0", "Dense_1"}  # the module's own tree


class Normed(nn.Module):
    @nn.compact
    def __call__(self, x, training: bool = False):
        x = nn.BatchNorm(use_running_average=not training, momentum=0.5)(nn.Dense(8)(x))
        return nn.Dense(10)(nn.relu(x))


def test_a_batch_norm_module_averages_its_statistics(fed):
    data, _ = fed
    res = run(fa.fedavg(Normed(), optax.sgd(0.1), **SIZES), data, rounds=1)
    stats = res.final_state.model_state["batch_stats"]["BatchNorm_0"]
    assert float(np.abs(np.asarray(stats["mean"])).sum()) > 0  # moved from its zeros
    assert np.all(np.asarray(stats["var"]) != 1.0)


class Conv1d(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Conv(3, (3, 3))(x[:, :, :, None, None])


@pytest.mark.parametrize("module,msg", [
    (nn.Dense(7), r"returns scores of shape \[B, 7\]; the data need \[B, 10\]"),
    (Conv1d(), "cannot be called on a batch of inputs"),
    ("mlp", "must be a flax.linen Module or a fedjax_appeal Model"),
])
def test_a_module_that_does_not_fit_is_refused_in_one_line(fed, module, msg):
    data, _ = fed
    with pytest.raises(ConfigError, match=msg) as e:
        run(fa.fedavg(module, optax.sgd(0.1), **SIZES), data)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw,msg", [
    (dict(client_optimizer="sgd"), "client_optimizer must be an optax transformation"),
    (dict(local_steps=0), "local_steps must be an integer >= 1"),
    (dict(cohort=50), "cohort 50 is larger than the data's 6 clients"),
    (dict(weights="proportional"), "weights must be Proportional()"),
])
def test_bad_arguments_are_refused_in_one_line(fed, kw, msg):
    data, model = fed
    args = {"client_optimizer": optax.sgd(0.1), **SIZES, **kw}
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        run(fa.fedavg(model, **args), data)


# --- the evaluation callback ---------------------------------------------------------------

def test_returning_true_from_the_callback_stops_after_that_evaluation(fed):
    data, model = fed
    alg = fa.fedavg(model, optax.sgd(0.1), **SIZES)
    full = fa.simulate(alg, data, HParams(), jax.random.key(0), rounds=6, eval_every=2)
    seen = []

    def stop_at_4(entry):
        seen.append(entry["round"])
        return np.bool_(entry["round"] >= 4)  # a NumPy bool counts

    res = fa.simulate(alg, data, HParams(), jax.random.key(0), rounds=6, eval_every=2,
                      on_eval=stop_at_4)
    assert seen == [0, 2, 4] and [h["round"] for h in res.history] == [0, 2, 4]
    assert res.history == full.history[:3]
    assert int(res.final_state.round) == 4
    np.testing.assert_allclose(np.mean(res.final_eval["test_acc"]),
                               res.history[-1]["test_acc_seen"], rtol=1e-6)
    kept = fa.simulate(alg, data, HParams(), jax.random.key(0), rounds=6, eval_every=2,
                       on_eval=lambda e: (None, "logged"))  # only True stops
    assert kept.history == full.history
    at0 = fa.simulate(alg, data, HParams(), jax.random.key(0), rounds=6, eval_every=2,
                      on_eval=lambda e: True)
    assert [h["round"] for h in at0.history] == [0] and int(at0.final_state.round) == 0


def test_compose_parts_with_a_local_objective_of_your_own(fed):
    """The documented path for an objective of your own: `compose_parts` with FedAvg's own
    local steps written out is `fedavg` bit for bit."""
    data, model = fed

    def local(state, data, k, key, hp):
        res = local_sgd(model, state.params, state.model_state, data.train, k, key, 0.1,
                        steps=3, batch_size=4)
        return Trained((state.params, state.model_state), (res.params, res.state), res.loss)

    parts = fa.compose_parts(model, local=local, weights=fa.Proportional().rule(),
                             selector=fa.RandomCohort().build(model, 3, data.num_clients),
                             server_optimizer=optax.sgd(1.0))
    mine = fa.FederatedAlgorithm("mine", parts.init, parts.round, parts.evaluate)
    same_run(run(mine, data), run(fa.fedavg(model, optax.sgd(0.1), **SIZES), data))


def test_grid_points_and_their_hparams():
    assert grid_points({"a.x": [1, 2], "client_lr": [0.5]}) == [
        {"a.x": 1.0, "client_lr": 0.5}, {"a.x": 2.0, "client_lr": 0.5}]
    hp = point_hparams({"client_lr": 0.3, "client.momentum": 0.5},
                       HParams(extra={"server.learning_rate": 0.1}))
    assert hp.client_lr == 0.3 and dict(hp.extra) == {"server.learning_rate": 0.1,
                                                      "client.momentum": 0.5}
    for bad, msg in (({"a.x": []}, "non-empty"), ([{"a.x": 1}, {"b.y": 2}], "same keys"),
                     ({"a.x": [float("nan")]}, "finite"), ([], "empty")):
        with pytest.raises(ConfigError, match=msg):
            grid_points(bad)
    with pytest.raises(ConfigError, match="unknown hyperparameter 'client_lrr'"):
        point_hparams({"client_lrr": 0.1})
