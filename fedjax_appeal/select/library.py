"""Cohort selectors as objects, for the library's algorithm factories
(`fedjax_appeal.algorithms.library`): `fedavg(model, opt, selector=DivFL())`.

Each object builds the package's `parts.Selector` for a model, a cohort size and a number
of clients (`build`, the same builders `--selector` uses, `selectors.SELECTORS`) and names
its hyperparameters (`hypers()`, see `core.hyper`). A `parts.Selector` of your own may be
passed to a factory as it is.

  * `RandomCohort()`: uniform without replacement from the available clients.
  * `PowerOfChoice(d)`: Power-of-Choice (Cho, Wang, Joshi 2020): the m clients of largest
    loss among d candidates drawn proportionally to their data size.
  * `DivFL()`, `SubTrunc(lam, b)`, `UnionFL(mu, window)`: facility location on the
    clients' gradients (Balakrishnan et al., ICLR 2022), plus the truncated loss term or
    minus the recent-window penalty (Castillo, Kaya, Ye, Hashemi); see `selectors.py`.
"""

from __future__ import annotations

import dataclasses

from ..core.config import Options
from ..core.errors import ConfigError, refuse_class
from ..core.hyper import Hyper
from ..core.models import Model
from ..core.parts import Selector
from .selectors import power_of_choice, submodular_selector, uniform_selector


@dataclasses.dataclass(frozen=True)
class RandomCohort:
    """m clients uniformly without replacement from the available pool."""

    def build(self, model: Model, cohort: int, clients: int) -> Selector:
        return uniform_selector(cohort)

    def hypers(self) -> tuple[Hyper, ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class PowerOfChoice:
    """Power-of-Choice with `d` candidates per round (0 = 2 x cohort, at most the number of
    clients)."""

    d: int = 0

    def build(self, model: Model, cohort: int, clients: int) -> Selector:
        if self.d and not cohort <= self.d <= clients:
            raise ConfigError(f"PowerOfChoice: d = {self.d} must lie between the cohort "
                              f"({cohort}) and the number of clients ({clients}); 0 = 2 x "
                              "cohort")
        return power_of_choice(model, Options("PowerOfChoice", {
            "cohort": cohort, "clients": clients, "poc_d": self.d}))

    def hypers(self) -> tuple[Hyper, ...]:
        return ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class DivFL:
    """DivFL: greedy facility location on every client's full local gradient.

    candidates: stochastic greedy with this many random candidates per pick (0 = exact).
    epsilon: stochastic greedy with r = ceil((N/m) ln(1/eps)) candidates (0 = `candidates`).
    refresh: recompute every client's gradient every this many rounds (0 = at round 0 only;
      the cohort's are refreshed every round).
    feature_dim: random projection of the gradients to this many dimensions (0 = none).
    objective: "raw" (the paper's sum of gradient distances) or "normalized".
    distance_budget_mb: largest distance matrix the greedy holds (the stochastic greedy:
      where cohort x candidates >= clients; else it computes the columns each pick reads).
    """

    candidates: int = 0
    epsilon: float = 0.0
    refresh: int = 0
    feature_dim: int = 0
    objective: str = "raw"
    distance_budget_mb: float = 256.0

    kind = "divfl"

    def _options(self, cohort: int, clients: int) -> dict:
        if self.objective not in ("raw", "normalized"):
            raise ConfigError(f"{type(self).__name__}: objective must be raw or normalized "
                              f"(got {self.objective!r})")
        return {"cohort": cohort, "clients": clients, "greedy_candidates": self.candidates,
                "greedy_epsilon": self.epsilon, "selector_features": "grad",
                "feature_refresh": self.refresh, "feature_dim": self.feature_dim,
                "distance_budget_mb": self.distance_budget_mb,
                "selector_objective": self.objective, "subtrunc_phi": "log",
                "union_base": "divfl", "union_window": 1}

    def build(self, model: Model, cohort: int, clients: int) -> Selector:
        return submodular_selector(model, Options(type(self).__name__,
                                                  self._options(cohort, clients)), self.kind)

    def hypers(self) -> tuple[Hyper, ...]:
        return ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubTrunc(DivFL):
    """SubTrunc: facility location + lam * min(b, sum_{i in S} phi(f_i)), phi = log1p
    ("log") or the identity. Hyperparameters "subtrunc.lambda" and "subtrunc.b"."""

    lam: float = 0.5
    b: float = 1.10
    phi: str = "log"

    kind = "subtrunc"

    def _options(self, cohort: int, clients: int) -> dict:
        if self.phi not in ("log", "identity"):
            raise ConfigError(f"{type(self).__name__}: phi must be log or identity (got "
                              f"{self.phi!r})")
        return {**super()._options(cohort, clients), "subtrunc_phi": self.phi}

    def hypers(self) -> tuple[Hyper, ...]:
        return (Hyper("subtrunc.lambda", float(self.lam), "subtrunc_lambda"),
                Hyper("subtrunc.b", float(self.b), "subtrunc_b"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnionFL(SubTrunc):
    """UnionFL: the DivFL (`base="divfl"`) or SubTrunc (`base="subtrunc"`) objective minus
    mu per selected client of the last `window` cohorts. Hyperparameter "unionfl.mu" (and
    SubTrunc's on a SubTrunc base)."""

    mu: float = 1.0
    window: int = 5
    base: str = "divfl"

    kind = "unionfl"

    def _options(self, cohort: int, clients: int) -> dict:
        if self.base not in ("divfl", "subtrunc") or self.window < 1:
            raise ConfigError(f"UnionFL: base must be divfl or subtrunc and window >= 1 "
                              f"(got {self.base!r}, {self.window})")
        return {**super()._options(cohort, clients), "union_base": self.base,
                "union_window": self.window}

    def hypers(self) -> tuple[Hyper, ...]:
        own = (Hyper("unionfl.mu", float(self.mu), "union_mu"),)
        return own + (super().hypers() if self.base == "subtrunc" else ())


def selector_hypers(choice) -> tuple[Hyper, ...]:
    """The hyperparameters of a factory's `selector=` argument (one of the objects above,
    or a `Selector` of your own, which has none); anything else is refused in one line, so
    a factory refuses it when called."""
    refuse_class("selector", choice)
    if isinstance(choice, Selector):
        return ()
    if hasattr(choice, "build") and hasattr(choice, "hypers"):
        return tuple(choice.hypers())
    raise ConfigError(f"selector must be RandomCohort(), PowerOfChoice(d), DivFL(), "
                      f"SubTrunc(...), UnionFL(...) or a Selector, not {type(choice).__name__}")


def cohort_selector(choice, model: Model, cohort: int, clients: int
                    ) -> tuple[Selector, tuple[Hyper, ...]]:
    """(the `Selector`, its hyperparameters) of a factory's `selector=` argument: one of
    the objects above, or a `Selector` of your own (no hyperparameters)."""
    hypers = selector_hypers(choice)
    if isinstance(choice, Selector):
        return choice, ()
    return choice.build(model, cohort, clients), hypers
