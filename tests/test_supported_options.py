"""Every option an algorithm declares it supports changes what it computes: a capability
flag (`core.capabilities.Supports`) or one of its own options, set to another allowed
value, gives other server parameters after two rounds than the same run without it. With
`test_capabilities.py` (what is not supported is refused in one line), nothing a user
sets is ever silently ignored. Parametrised over the registry, so a new algorithm is
covered by its declaration."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from fedjax_appeal.algorithms import ALGORITHMS
from fedjax_appeal.core.capabilities import supports
from fedjax_appeal.core.config import HParams, RunConfig, declarations, field_names
from fedjax_appeal.core.fields import OPTIONS
from fedjax_appeal.data import load_federated
from fedjax_appeal.run.assemble import assemble
from fedjax_appeal.run.driver import make_chunk
from fedjax_appeal.run.validate import validate

BASE = RunConfig(dataset="synthetic", partition="natural", clients=8, unseen_clients=0,
                 cohort=4, local_steps=2, batch_size=4, min_samples=4, rounds=2)
# capability -> the configuration that uses it (fednova needs unequal local steps to differ
# from FedAvg's weights; Byzantine clients must be drawn into the two cohorts)
USES = {
    "selector": dict(selector="poc"),
    "varied_steps": dict(local_steps_dist="uniform", local_steps_min=1),
    "fednova": dict(aggregation="fednova", local_steps_dist="uniform", local_steps_min=1),
    "uplink": dict(compress="qsgd"),
    "dp": dict(dp="fixed", aggregation="uniform"),
    "byzantine": dict(byzantine_fraction=0.5),
    "availability": dict(availability="bernoulli"),
}
# the setting an algorithm needs (FedBN: a model with BatchNorm, which needs images)
SETTING = {"fedbn": dict(model="cnn_bn", dataset="mnist", max_samples=400,
                         partition="dirichlet")}
# an option that only acts together with another value of the algorithm's options
COMPANION = {"perfedavg_delta": dict(perfedavg_variant="hf")}
# (algorithm, option) whose every other value the algorithm refuses (FedNova's normaliser
# a_k assumes plain SGD clients: tests/test_client_opt.py)
REFUSED = {("fednova", "client_opt")}


def other_value(name: str):
    """A value of option `name` other than its default, allowed by its declaration."""
    (f,) = [f for f in declarations(RunConfig) + declarations(HParams) if f.name == name]
    choices = f.metadata.get("choices")
    if choices:
        return next(c for c in choices if c != f.default)
    if isinstance(f.default, bool):
        return not f.default
    if isinstance(f.default, int):
        return f.default + 2
    hi = f.metadata.get("le", f.metadata.get("lt"))
    value = f.default * 3 + 0.05
    return value if hi is None or value < hi else f.default / 3


def _split(kw):
    hp_names = set(field_names(HParams))
    return ({k: v for k, v in kw.items() if k not in hp_names},
            {k: v for k, v in kw.items() if k in hp_names})


@functools.cache
def assembled(alg_name: str, static: tuple):
    """(algorithm, data, jitted init, jitted chunk) of `alg_name` with the configuration
    options `static`; one program per configuration, shared by every hyperparameter."""
    cfg = BASE.replace(algorithm=alg_name, **SETTING.get(alg_name, {}), **dict(static))
    validate(cfg, HParams())
    data, ds = load_federated(cfg)
    alg = assemble(cfg, data=data, dataset=ds).alg
    return alg, data, jax.jit(alg.init), jax.jit(make_chunk(alg))


def final_params(alg_name: str, options: dict) -> list[np.ndarray]:
    """Server parameters after `BASE.rounds` rounds of `alg_name` with `options`."""
    run_kw, hp_kw = _split(options)
    alg, data, init, chunk = assembled(alg_name, tuple(sorted(run_kw.items())))
    h = HParams.make(**hp_kw).as_arrays()
    state = init(jax.random.key(0), data, h)
    state, _ = chunk(state, data, jax.random.key(1), h, np.arange(BASE.rounds, dtype=np.int32))
    return [np.asarray(a) for a in jax.tree.leaves(state.params)]


def round_program(alg_name: str, options: dict) -> str:
    """The traced program (jaxpr) of two rounds of `alg_name` with `options`: what the
    configuration computes, without compiling it."""
    run_kw, hp_kw = _split(options)
    cfg = BASE.replace(algorithm=alg_name, **SETTING.get(alg_name, {}), **run_kw)
    validate(cfg, HParams.make(**hp_kw))
    data, ds = load_federated(cfg)
    alg = assemble(cfg, data=data, dataset=ds).alg
    h = HParams.make(**hp_kw).as_arrays()
    state = jax.eval_shape(alg.init, jax.random.key(0), data, h)
    return str(jax.make_jaxpr(make_chunk(alg))(state, data, jax.random.key(1), h,
                                               np.arange(BASE.rounds, dtype=np.int32)))


def own_options(alg: str) -> list[str]:
    """The options declared for algorithm `alg` (by name or a part it is built on) that
    change what it computes (`local_unroll`, the scan's unroll factor, changes how)."""
    mentions = {("algorithm", alg), *(("part", p) for p in supports(alg).parts)}
    return sorted(n for n, o in OPTIONS.items() if mentions & o.applies.mentions
                  and n != "local_unroll")


CASES = ([(a, "capability", c) for a in sorted(ALGORITHMS) for c in USES
          if getattr(supports(a), c)]
         + [(a, "option", o) for a in sorted(ALGORITHMS) for o in own_options(a)
            if (a, o) not in REFUSED])


@pytest.mark.parametrize("alg, kind, name", CASES)
def test_each_supported_option_changes_the_result(alg, kind, name):
    """A capability changes the configuration's program (its traced rounds differ from
    the rounds without it: an ignored option leaves them identical; the numbers of each
    capability are checked against references in its own tests); an option of the
    algorithm changes the server parameters it computes."""
    if kind == "capability":
        assert round_program(alg, USES[name]) != round_program(alg, {}), \
            f"{alg}: {USES[name]} leaves its rounds unchanged"
        return
    base = COMPANION.get(name, {})
    changed = {**base, name: other_value(name)}
    a, b = final_params(alg, base), final_params(alg, changed)
    assert all(np.isfinite(x).all() for x in b)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True)), \
        f"{alg}: {changed} leaves the server parameters unchanged"
