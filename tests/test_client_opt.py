"""`--client-opt`: the client optimizer of the algorithms built on FedAvg's local SGD, a
component like the server's. The default (sgd) is the plain SGD of every earlier result
(the golden histories hold it); the others are the library's optax clients bit for bit,
and their options are refused where they have no effect."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from conftest import assert_refused

import fedjax_appeal as fa
from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import model_for
from fedjax_appeal.data import load_federated
from fedjax_appeal.local.optimizers import client_optimizer
from fedjax_appeal.run.validate import ignored_reason, used_hparams

CFG = RunConfig(dataset="synthetic", partition="natural", clients=6, unseen_clients=2, cohort=3,
                local_steps=3, batch_size=4, min_samples=4, appeal="off")


# Adam's as float32 arrays (inject_hyperparams), as the command line's traced HParams: a
# plain optax.adam(0.1, b1=0.8) computes 1 - b1 and b1 ** t from Python floats, which rounds
# differently in the last bits
@pytest.mark.parametrize("name,hp,tx", [
    ("momentum", dict(client_momentum=0.5), optax.sgd(0.1, momentum=0.5)),
    ("adam", dict(client_momentum=0.8, client_beta2=0.99, client_eps=1e-6),
     optax.inject_hyperparams(optax.adam)(learning_rate=0.1, b1=0.8, b2=0.99, eps=1e-6)),
])
def test_a_client_optimizer_is_the_library_client_bit_for_bit(name, hp, tx):
    data, ds = load_federated(CFG)
    model = model_for("mlp", data, ds)
    ref = fa.simulate(build("fedavg", model, CFG.replace(client_opt=name)), data,
                      HParams(client_lr=0.1, **hp), jax.random.key(0), rounds=2, eval_every=1)
    lib = fa.simulate(fa.fedavg(model, tx, local_steps=3, batch_size=4, cohort=3), data,
                      HParams(), jax.random.key(0), rounds=2, eval_every=1)
    assert ref.history == lib.history
    for a, b in zip(jax.tree.leaves(ref.final_state.params),
                    jax.tree.leaves(lib.final_state.params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_sgd_is_the_local_steps_own_plain_sgd():
    assert client_optimizer("sgd") is None  # `local_sgd` runs its own optax.sgd(client_lr)


def test_options_without_effect_are_refused():
    assert "it configures --algorithm" in ignored_reason(
        "client_opt", RunConfig(algorithm="scaffold", client_opt="adam"))
    assert ignored_reason("client_opt", RunConfig(algorithm="maxfl")) is None
    assert ignored_reason("client_momentum", RunConfig()) == (
        "it configures --client-opt momentum or nesterov or adam")
    assert ignored_reason("client_beta2", RunConfig(client_opt="momentum")) == (
        "it configures --client-opt adam")
    assert ignored_reason("client_momentum", RunConfig(client_opt="nesterov")) is None
    used = used_hparams(RunConfig(client_opt="adam"))
    assert {"client_momentum", "client_beta2", "client_eps"} <= set(used)
    assert "client_momentum" not in used_hparams(RunConfig())


def test_fednova_refuses_a_client_optimizer():
    data, ds = load_federated(CFG)
    with pytest.raises(ConfigError, match="fednova's normaliser a_k assumes plain SGD"):
        build("fedavg", model_for("mlp", data, ds),
              CFG.replace(client_opt="momentum", aggregation="fednova"))


def test_the_command_line_refuses_it_for_another_algorithm(tmp_path, capsys):
    out = tmp_path / "run"
    assert_refused(["run", "--algorithm", "scaffold", "--client-opt", "adam", "--out", str(out)],
                   out, capsys, "--client-opt has no effect here")
    assert_refused(["run", "--client-momentum", "0.5", "--out", str(out)], out, capsys,
                   "it configures --client-opt momentum")
    assert_refused(["run", "--client-opt", "adamw", "--out", str(out)], out, capsys, "adam")
