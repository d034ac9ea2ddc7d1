"""What user code needs to add a component: the registries, the one way to declare an
option, and the types components take and return.

A plugin module (`fedjax-appeal run --plugin MODULE`, or `plugin = [...]` in a config file)
imports from here and registers its parts; the CLI then accepts their names everywhere
(run, sweep, reproduce, validation, `list`, `--help`). See docs/extending.md.

Registries (name -> value):

  * `AGGREGATIONS`: `--aggregation` -> `WeightRule(fn(updates, idx, valid, state, hp), needs)`.
  * `SELECTORS`: `--selector` -> `builder(model, opts) -> Selector(init, select, update)`.
  * `SERVER_OPTS`: `--server-opt` -> `fn(hp) -> optax.GradientTransformation`.
  * `ALGORITHMS`: `--algorithm` -> `builder(model, opts, executor=None) -> FederatedAlgorithm`
    (usually `compose(name, model, opts, ...)`; register with `@register(name,
    Supports(...))`: what it is built from and supports, see `core/capabilities.py`).
  * `MODELS`: `--model` -> `fn(num_classes, norm) -> flax module`.
  * `DATASETS`: `--dataset` -> `fn(opts, rng) -> Dataset` (`@register_dataset("name")`).
  * `PARTITIONS`: `--partition` -> `fn(ds, total, opts, rng) -> [index array per client]`
    (`@register_partition("name")`).

Options, static or tunable, are declared with `option(name, default, help, ...,
applies=...)` beside the component that reads them (`core/fields.py`): `applies` says where
the option has an effect (`component("selector", "mine")`, `algorithm("mine")`,
`when(test, reason)`, `part("sgd_local")`, `ALWAYS`; combined with `&` and `|`), and
`tunable=True` makes it a vmappable hyperparameter of `HParams` (read as `hp.NAME`);
otherwise it is static (`cfg.NAME`, and `opts.NAME` in the builders `applies` names).
A run where `applies` fails refuses the option, given, in one line.

`opts` is the component's read-only `Options`; reading an option it is not given raises
`UndeclaredOption`. `registrations()` undoes the registrations made inside a `with` block
(tests, scripts).

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
from .core.capabilities import Supports, algorithm, capable, part
from .core.config import HParams, Options, RunConfig
from .core.errors import UndeclaredOption
from .core.fields import ALWAYS, OPTIONS, Applies, component, option, when
from .core.models import MODELS, Model, Normalize, model_for
from .core.parts import ClientUpdate, Selector, ServerState, WeightRule
from .core.registry import registrations
from .core.tunables import TUNABLES
from .data.partition import PARTITIONS
from .data.pool import DATASETS, register_dataset, register_partition
from .data.sources import Dataset
from .local.client import Trained, client_loss, local_sgd, proximal
from .protocols.appeal.appeal import APPEAL_DEFS, per_cluster
from .select.selection import uniform as uniform_cohort
from .select.selection import weighted as weighted_cohort
from .select.selectors import SELECTORS

__all__ = ["AGGREGATIONS", "ALGORITHMS", "ALWAYS", "APPEAL_DEFS", "DATASETS", "MODELS",
           "OPTIONS", "PARTITIONS", "SELECTORS", "SERVER_OPTS", "SHARED_OPTIONS", "TUNABLES",
           "Applies", "ClientArrays", "ClientUpdate", "Dataset", "FederatedData", "HParams",
           "Model", "Normalize", "Options", "RunConfig", "Selector", "ServerState", "Supports",
           "Trained", "UndeclaredOption", "WeightRule", "algorithm", "build", "capable",
           "client_loss", "component", "compose", "local_sgd", "masked_softmax", "model_for",
           "option", "options_for", "part", "per_cluster", "poisson_buffer", "proportional",
           "proximal", "register", "register_dataset", "register_partition", "registrations",
           "sgd_local", "uniform_cohort", "uniform_weights", "weighted_cohort", "when"]
