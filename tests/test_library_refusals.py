"""What a library-built algorithm would ignore or misread is refused in one line, before
anything is traced: `HParams` fields it does not read, negative learning rates, classes
given for instances, keys that are not PRNG keys, and data checks named as `from_arrays`
names its arguments."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

import fedjax_appeal as fa
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import model_for
from fedjax_appeal.data import load_federated

CFG = RunConfig(dataset="synthetic", partition="natural", clients=6, unseen_clients=2, cohort=3,
                local_steps=3, batch_size=4, min_samples=4, rho_steps=3, appeal="off")
SIZES = dict(local_steps=3, batch_size=4, cohort=3)
INJECTED = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)


@pytest.fixture(scope="module")
def fed():
    data, ds = load_federated(CFG)
    return data, model_for("mlp", data, ds)


def run(alg, data, hp=None, key=None):
    return fa.simulate(alg, data, HParams() if hp is None else hp,
                       jax.random.key(0) if key is None else key, rounds=1, eval_every=1)


def refused(call, msg: str) -> str:
    """The one-line message of the `ConfigError` that `call()` raises, which must match
    `msg`, raised outside any JAX transformation: an error raised while JAX traces carries
    its note on removed frames, printed after the message."""
    with pytest.raises(ConfigError, match=msg) as e:
        call()
    text = str(e.value)
    assert "\n" not in text
    notes = getattr(e.value, "__notes__", [])
    assert not any("JAX has removed its internal frames" in n for n in notes), notes
    return text


@pytest.mark.parametrize("factory,hp,msg", [
    (lambda m: fa.fedavg(m, optax.sgd(0.1), weights=fa.ExpAlpha(0.2), **SIZES),
     HParams(exp_alpha=0.01), r"extra=\{'exp_alpha.alpha': 0.01\}"),
    (lambda m: fa.fedavg(m, optax.sgd(0.1), **SIZES), HParams(client_lr=5.0),
     r"client learning rate is its client_optimizer's; set it in client_optimizer, e\.g\. "
     r"optax\.sgd\(5\.0\); to vary it in HParams, make that optimizer with "
     r"optax\.inject_hyperparams"),
    (lambda m: fa.fedavg(m, INJECTED, **SIZES), HParams(client_lr=5.0),
     r"give HParams\(extra=\{'client.learning_rate': 5.0\}\)"),
    (lambda m: fa.fedavg(m, optax.sgd(0.1), **SIZES), HParams(server_lr=0.5),
     "server learning rate is its server_optimizer's"),
    (lambda m: fa.fedprox(m, optax.sgd(0.1), mu=0.5, **SIZES), HParams(prox_mu=100.0),
     r"no such hyperparameter \(its dotted keys: fedprox.mu\)"),
    (lambda m: fa.scaffold(m, 0.1, **SIZES), HParams(client_lr=0.3),
     "dotted key 'client.learning_rate'"),
    (lambda m: fa.maxfl(m, optax.sgd(0.1), requirement=1.0, **SIZES), HParams(maxfl_eps=0.3),
     "dotted key 'maxfl.eps'"),
    (lambda m: fa.fedavg(m, optax.sgd(0.1), **SIZES), HParams(extra={"qffl_q": 3.0}),
     r"qffl_q=3.0: it has no such hyperparameter \(its dotted keys: none\)"),
])
def test_an_hparams_field_the_algorithm_would_ignore_is_refused(fed, factory, hp, msg):
    data, model = fed
    text = refused(lambda: run(factory(model), data, hp), msg)
    assert text.startswith(f"{factory(model).name} would ignore HParams field ")


def test_fields_at_their_defaults_and_dotted_keys_run(fed):
    """The refusal looks at values, not at which names are present: HParams filled with
    every default (`as_arrays`) runs as HParams() does, and the dotted key that the
    message names sets the value."""
    data, model = fed
    alg = fa.fedavg(model, optax.sgd(0.1), weights=fa.ExpAlpha(0.2), **SIZES)
    plain = run(alg, data)
    assert run(alg, data, HParams().as_arrays()).history == plain.history
    assert run(alg, data, HParams(client_lr=HParams().client_lr)).history == plain.history
    keyed = run(alg, data, HParams(extra={"exp_alpha.alpha": 0.01}))
    assert keyed.history != plain.history  # the key took effect


def test_a_grid_over_a_field_the_algorithm_ignores_is_refused(fed):
    data, model = fed
    alg = fa.fedavg(model, optax.sgd(0.1), **SIZES)
    refused(lambda: fa.simulate_grid(alg, data, {"client_lr": [0.001, 5.0]}, rounds=1,
                                     eval_every=1), "would ignore HParams field client_lr=0.001")


@pytest.mark.parametrize("make,msg", [
    (lambda m: fa.fedavg(m, optax.sgd(-0.1), **SIZES),
     r"client_optimizer ascends: its first step on a gradient of \+1 changes the parameter "
     r"by \+0.1; give it a learning rate > 0"),
    (lambda m: fa.fedavg(m, optax.sgd(0.1), optax.adam(-0.1), **SIZES),
     "server_optimizer ascends"),
    (lambda m: fa.maxfl(m, optax.chain(optax.clip(1.0), optax.sgd(-0.01)), **SIZES),
     r"client_optimizer ascends: .* by \+0.01;"),
    (lambda m: fa.scaffold(m, optax.sgd(0.1), **SIZES),
     "scaffold: client_lr must be a number, not an optax optimizer"),
    (lambda m: fa.fedavg(m, 0.1, **SIZES),
     r"client_optimizer must be an optax transformation, e\.g\. optax\.sgd\(0.1\), not the "
     "number 0.1"),
    (lambda m: fa.fedavg(m, optax.sgd(0.1), selector=fa.DivFL, **SIZES),
     r"selector=DivFL is a class: give an instance, selector=DivFL\(\.\.\.\)"),
    (lambda m: fa.fedavg(m, optax.sgd(0.1), weights=fa.ExpAlpha, **SIZES),
     "weights=ExpAlpha is a class"),
    (lambda m: fa.fedavg(m, optax.sgd(0.1), selector="divfl", **SIZES),
     r"selector must be RandomCohort\(\), .* not str"),
])
def test_a_factory_refuses_what_would_misbehave_when_called(fed, make, msg):
    """Refused by the factory itself, before any data is seen."""
    refused(lambda: make(fed[1]), msg)


def test_a_descending_or_still_optimizer_is_accepted(fed):
    data, model = fed
    for tx in (optax.sgd(0.0), optax.adam(1e-3), optax.sgd(optax.linear_schedule(0.0, 0.1, 5)),
               INJECTED):
        fa.fedavg(model, tx, **SIZES)


def test_a_negative_learning_rate_under_a_dotted_key_is_refused(fed):
    data, model = fed
    alg = fa.fedavg(model, INJECTED, **SIZES)
    refused(lambda: run(alg, data, HParams(extra={"client.learning_rate": -0.1})),
            r"'client.learning_rate' must be >= 0 \(got -0.1\)")


@pytest.mark.parametrize("key,msg", [
    (0, r"key must be one PRNG key, jax.random.key\(seed\) \(got int 0\)"),
    (jax.random.split(jax.random.key(0), 3), r"got an array key<fry>\[3\]"),
])
def test_a_key_that_is_not_one_prng_key_is_refused(fed, key, msg):
    data, model = fed
    refused(lambda: run(fa.fedavg(model, optax.sgd(0.1), **SIZES), data, key=key), msg)


def test_a_raw_prng_key_is_the_typed_key(fed):
    data, model = fed
    alg = fa.fedavg(model, optax.sgd(0.1), **SIZES)
    assert (run(alg, data, key=jax.random.PRNGKey(3)).history ==
            run(alg, data, key=jax.random.wrap_key_data(jax.random.PRNGKey(3))).history)


def test_what_the_built_functions_refuse_is_refused_before_tracing(fed):
    data, model = fed
    refused(lambda: run(fa.fedavg(model, optax.sgd(0.1), local_steps=3, batch_size=4,
                                  cohort=50), data), "cohort 50 is larger than the data's 6")
    refused(lambda: run(fa.fedavg(model, optax.sgd(0.1), selector=fa.SubTrunc(phi="lgo"),
                                  **SIZES), data), "phi must be log or identity")


# --- from_arrays ------------------------------------------------------------------------

X = np.random.default_rng(0).normal(size=(600, 8)).astype(np.float32)
Y = np.random.default_rng(1).integers(0, 10, 600)


class OneRowFirst:
    """A partition of one's own whose first client holds a single row."""

    def split(self, labels, total, rng, min_samples):
        idx = np.arange(len(labels))
        return [idx[:1], *np.array_split(idx[1:], total - 1)]


@pytest.mark.parametrize("kw,msg", [
    (dict(partition=fa.Dirichlet(0.5), clients=10, num_classes=5),
     r"num_classes=5 but a label is 9; give num_classes=10 or more"),
    (dict(partition=fa.Dirichlet(0.5), clients=400),
     r"600 samples cannot give 400 clients 10 samples each: lower clients/unseen_clients or "
     "min_samples"),
    (dict(partition=fa.Dirichlet(0.5), clients=10, min_samples=1),
     r"min_samples >= 2 \(each client needs a train and a test row\)"),
    (dict(partition=OneRowFirst(), clients=10),
     "client 0 of the partition holds 1 rows, fewer than min_samples=10"),
    (dict(partition=fa.Dirichlet, clients=10), "partition=Dirichlet is a class"),
    (dict(partition=fa.Dirichlet(-1.0), clients=10), "Dirichlet's alpha must be > 0"),
])
def test_from_arrays_names_its_own_arguments(kw, msg):
    text = refused(lambda: fa.from_arrays(X, Y, **kw), msg)
    assert "--" not in text


def test_the_messages_docs_library_quotes_are_the_messages(fed):
    from pathlib import Path
    page = (Path(__file__).resolve().parent.parent / "docs" / "library.md").read_text()
    quoted = page.split("in one line that names\nwhat sets it instead:\n\n```\n", 1)[1]
    quoted = quoted.split("```", 1)[0].splitlines()
    data, model = fed
    alg = fa.fedavg(model, optax.sgd(0.1), weights=fa.ExpAlpha(0.2), **SIZES)
    said = [refused(lambda hp=hp: run(alg, data, hp), "would ignore")
            for hp in (HParams(client_lr=5.0), HParams(exp_alpha=0.01))]
    assert quoted == said
