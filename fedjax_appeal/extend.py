"""What user code needs to add a component: the registries and the types they hold.

A plugin module (`fedjax-appeal run --plugin MODULE`, or `plugin = [...]` in a config file)
imports from here and registers its parts; the CLI then accepts their names everywhere
(run, sweep, reproduce, validation, `list`, `--help`). See docs/extending.md.

Registries (name -> value):

  * `AGGREGATIONS`: `--aggregation` -> `WeightRule(fn(updates, idx, valid, state, hp), needs)`.
  * `SELECTORS`: `--selector` -> `builder(model, opts) -> Selector(init, select, update)`.
  * `SERVER_OPTS`: `--server-opt` -> `fn(hp) -> optax.GradientTransformation`.
  * `ALGORITHMS`: `--algorithm` -> `builder(model, opts, executor=None) -> FederatedAlgorithm`
    (usually `compose(name, model, opts, ...)`; register with `@register("name",
    Supports(...))`, its capability flags: what it supports decides what is refused, see
    `core/capabilities.py`).
  * `MODELS`: `--model` -> `fn(num_classes, norm) -> flax module`.
  * `DATASETS`: `--dataset` -> `fn(opts, rng) -> Dataset` (`@register_dataset("name")`).
  * `PARTITIONS`: `--partition` -> `fn(ds, total, opts, rng) -> [index array per client]`
    (`@register_partition("name")`).
  * `TUNABLES`: a user hyperparameter -> `Tunable(default, help)`
    (`register_tunable("name", default, help)`); read it as `hp.get("name")`.

Static options (an int, a string, a bool or a float that fixes a program's structure: a
number of inner steps, a variant) are declared beside the component that reads them with
`register_option(name, default, help, choices, kind="algorithm", names=("mine",))`, as the
built-in components declare theirs (`pfedme_k`, `poc_d`, `union_window`, ...): the option is
then `--name` on run and sweep, a `--config` key, a static `--grid` axis, `cfg.name` and
`opts.name` in the builders of the components named, and refused in one line for a run
that builds none of them.

`opts` is the component's read-only `Options`: the configuration fields its kind declares
(`options_for(name, cfg)` for an algorithm: `SHARED_OPTIONS` plus its `Supports(options=...,
reads=...)`); reading another field raises `UndeclaredOption`.

Rule, selector and server-optimizer values are pure functions of arrays and `hp` (the
vmappable `HParams`, whose `extra` dict holds the registered tunables), so a sweep vmaps
over them like over the built-in ones.

Also here, for experiment scripts that go below `run_config`: `build` (an algorithm from a
RunConfig), `model_for`, `Model`, `FederatedData` / `ClientArrays`, `client_loss`,
`APPEAL_DEFS` / `per_cluster` (the appeal protocol's definitions and per-cluster means) and
`poisson_buffer` (the DP noise multiplier of a Poisson-sampled buffer).
"""

from __future__ import annotations

from .aggregate.aggregation import AGGREGATIONS, masked_softmax, proportional, uniform_weights
from .aggregate.privacy import poisson_buffer
from .aggregate.server import SERVER_OPTS
from .algorithms import ALGORITHMS, build
from .algorithms.base import SHARED_OPTIONS, compose, options_for, register
from .algorithms.fedavg import sgd_local
from .core.arrays import ClientArrays, FederatedData
from .core.capabilities import Supports, Switch
from .core.config import DATASETS, PARTITIONS, HParams, Options, RunConfig
from .core.errors import UndeclaredOption
from .core.fields import COMPONENT_OPTIONS, register_option, register_switched
from .core.models import MODELS, Model, Normalize, model_for
from .core.parts import ClientUpdate, Selector, ServerState, WeightRule
from .core.tunables import TUNABLES, Tunable, register_tunable
from .data.pool import register_dataset, register_partition
from .data.sources import Dataset
from .local.client import Trained, client_loss, local_sgd, proximal
from .protocols.appeal.appeal import APPEAL_DEFS, per_cluster
from .select.selection import uniform as uniform_cohort
from .select.selection import weighted as weighted_cohort
from .select.selectors import SELECTORS

__all__ = ["AGGREGATIONS", "ALGORITHMS", "APPEAL_DEFS", "COMPONENT_OPTIONS", "DATASETS", "MODELS",
           "PARTITIONS",
           "SELECTORS", "SERVER_OPTS", "SHARED_OPTIONS", "TUNABLES", "ClientArrays",
           "ClientUpdate", "Dataset", "FederatedData", "HParams", "Model", "Normalize",
           "Options", "RunConfig", "Selector", "ServerState", "Supports", "Switch", "Trained",
           "Tunable",
           "UndeclaredOption", "WeightRule", "build", "client_loss", "compose", "local_sgd",
           "masked_softmax", "model_for", "options_for", "per_cluster", "poisson_buffer",
           "proportional", "proximal", "register", "register_dataset", "register_option",
           "register_partition", "register_switched",
           "register_tunable", "sgd_local", "uniform_cohort", "uniform_weights",
           "weighted_cohort"]
