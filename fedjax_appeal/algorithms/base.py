"""`FederatedAlgorithm`: the init/round/evaluate triple every algorithm provides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from ..config import ConfigError, HParams, RunConfig
from ..data.arrays import FederatedData
from ..evaluation import evaluate_global
from ..models import Model
from ..round import ServerState

InitFn = Callable[[jax.Array, FederatedData, HParams], ServerState]
RoundFn = Callable[[ServerState, FederatedData, jax.Array, HParams], tuple[ServerState, dict]]
EvalFn = Callable[[ServerState, FederatedData, HParams], dict[str, Any]]


class FederatedAlgorithm(NamedTuple):
    """Pure functions of a federated algorithm (in the spirit of fedjax's).

    init(key, data, hp) -> state
    round(state, data, key, hp) -> (state, metrics)   # metrics: dict of scalars
    evaluate(state, data, hp) -> {split: ClientEval, ..., "metrics": {name: scalar}}
    """

    name: str
    init: InitFn
    round: RoundFn
    evaluate: EvalFn


def global_evaluator(model: Model) -> EvalFn:
    """Evaluate the global model on every split (the default)."""
    def evaluate(state, data, hp):
        out = evaluate_global(model, state.params, state.model_state, data)
        from ..expalpha_metrics import tag_metrics  # per-group test accuracy

        tags = tag_metrics(out, data.info)
        if data.global_test is not None:  # accuracy on the balanced global test set
            from ..evaluation import evaluate_split

            g = evaluate_split(model, state.params, state.model_state, data.global_test)
            tags = {**tags, "test_acc_global": g.acc[0], "test_loss_global": g.loss[0]}
        return {**out, "metrics": tags} if tags else out

    return evaluate


Builder = Callable[[Model, RunConfig], FederatedAlgorithm]
ALGORITHMS: dict[str, Builder] = {}


def register(name: str):
    """Decorator adding an algorithm builder `(model, cfg) -> FederatedAlgorithm`."""

    def deco(fn: Builder) -> Builder:
        ALGORITHMS[name] = fn
        return fn

    return deco


def build(name: str, model: Model, cfg: RunConfig) -> FederatedAlgorithm:
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm '{name}'; choose one of: "
                          f"{', '.join(sorted(ALGORITHMS))}")
    from ..distributed import make_mesh
    from ..round import scale_options

    with scale_options(getattr(cfg, "client_chunk", 0), make_mesh(getattr(cfg, "devices", 1))):
        return ALGORITHMS[name](model, cfg)
