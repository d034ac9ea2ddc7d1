"""Aggregation weight rules as objects, for the library's algorithm factories
(`fedjax_appeal.algorithms.library`): `fedavg(model, opt, weights=ExpAlpha(0.2))`.

Each object gives the round its `WeightRule` (`rule()`, the package's own, as
`--aggregation` builds it) and its hyperparameters (`hypers()`, see `core.hyper`). A
`WeightRule` of your own may be passed to a factory as it is.
"""

from __future__ import annotations

import dataclasses

from ..core.errors import ConfigError, refuse_class
from ..core.hyper import Hyper
from ..core.parts import WeightRule
from .aggregation import AGGREGATIONS, EXP_ALPHA_RULES


@dataclasses.dataclass(frozen=True)
class Proportional:
    """FedAvg's weights n_k / sum_j n_j over the cohort (McMahan et al. 2017)."""

    def rule(self) -> WeightRule:
        return AGGREGATIONS["proportional"]

    def hypers(self) -> tuple[Hyper, ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class Uniform:
    """Equal weights 1/m' over the m' valid cohort slots."""

    def rule(self) -> WeightRule:
        return AGGREGATIONS["uniform"]

    def hypers(self) -> tuple[Hyper, ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class ExpAlpha:
    """Exp-alpha weights rho_i ∝ exp((F_i(w_i) - F_i(w)) / alpha) ("EXP-alpha: Beyond
    Proportional Aggregation in Federated Learning"; `aggregation.exp_alpha`), on any
    backbone. `scaled` multiplies by the data sizes n_i (its Corollary 1.1).

    Hyperparameter: "exp_alpha.alpha" (the temperature alpha > 0).
    """

    alpha: float = 0.2
    scaled: bool = False

    def __post_init__(self):
        if not self.alpha > 0:
            raise ConfigError(f"ExpAlpha: alpha must be > 0 (got {self.alpha})")

    def rule(self) -> WeightRule:
        return AGGREGATIONS[EXP_ALPHA_RULES[1 if self.scaled else 0]]

    def hypers(self) -> tuple[Hyper, ...]:
        return (Hyper("exp_alpha.alpha", float(self.alpha), "exp_alpha"),)


def weight_rule(choice) -> tuple[WeightRule, tuple[Hyper, ...]]:
    """(the `WeightRule`, its hyperparameters) of a factory's `weights=` argument: one of
    the objects above, or a `WeightRule` of your own (no hyperparameters)."""
    refuse_class("weights", choice)
    if isinstance(choice, WeightRule):
        return choice, ()
    if hasattr(choice, "rule") and hasattr(choice, "hypers"):
        return choice.rule(), tuple(choice.hypers())
    raise ConfigError(f"weights must be Proportional(), Uniform(), ExpAlpha(alpha) or a "
                      f"WeightRule, not {type(choice).__name__}")
