"""What an algorithm is built from and supports (`register(name, Supports(...))`), and the
predicates of option declarations that read it: `algorithm`, `part` (a shared part's options
apply to the algorithms listing it) and `capable` (`needs=capable("dp", ...)`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .fields import Applies, Reason, component
from .registry import Registry


@dataclasses.dataclass(frozen=True)
class Supports:
    """What an algorithm's round does (defaults: what `compose` provides). aggregation,
    selector: `--aggregation`, `--selector` / `--flip-protocol` pick them; varied_steps:
    tau_k local steps; fednova: its clients report a_k; uplink: `--compress`; dp: DP-FedAvg
    applies (it uploads only the delta, slots weighted uniformly); byzantine: the Byzantine
    hook; availability: synchronous rounds (availability, deadline); layouts: the shared
    executor; needs_requirements: its rule reads rho_k (the appeal protocol is on by
    default); parts: the shared parts it is built on ("sgd_local", "proximal"), whose
    options apply to it; notes: (capability, why) pairs, the reason of a refusal."""

    aggregation: bool = True
    selector: bool = True
    varied_steps: bool = False
    fednova: bool = False
    uplink: bool = True
    dp: bool = False
    byzantine: bool = True
    availability: bool = True
    layouts: bool = True
    needs_requirements: bool = False
    parts: tuple[str, ...] = ()
    notes: tuple[tuple[str, str], ...] = ()

    def why(self, capability: str, default: str) -> str:
        """The declared reason a capability is missing, or `default`."""
        return dict(self.notes).get(capability, default)


SUPPORTS = Registry("algorithm", sort=True)  # name -> Supports


def supports(name: str) -> Supports:
    """The declared flags of algorithm `name` (the defaults for an unregistered name)."""
    return SUPPORTS[name] if name in SUPPORTS else Supports()


def with_capability(flag: str) -> list[str]:
    """The registered algorithms that declare `flag` (for messages naming them)."""
    return [n for n in SUPPORTS if getattr(SUPPORTS[n], flag)]


def algorithm(*names: str) -> Applies:
    """Applies to the algorithms `names`. A plugin keeps it and registers with it, naming
    its algorithm once: `MINE = algorithm("mine")`, `option(..., applies=MINE)`,
    `@register(MINE)`."""
    return component("algorithm", *names)


def part(name: str) -> Applies:
    """Applies to the algorithms built on the shared part `name` (`Supports.parts`)."""
    def users(cfg) -> str:
        return "it configures --algorithm " + " or ".join(
            n for n in SUPPORTS if name in SUPPORTS[n].parts)

    return Applies(lambda cfg: name in supports(cfg.algorithm).parts, users, [("part", name)])


def capable(flag: str, missing: str = "{alg} does not support it", advice: str = "", *,
            unless: Callable[[Any], bool] | None = None, reason: Reason | None = None
            ) -> Applies:
    """Holds for an algorithm that declares the capability `flag`, or where `unless` holds
    (the values that ask nothing of it). Its reason: the algorithm's note on the flag
    (else `missing`, `{alg}` its name), then `advice`; or `reason`."""
    def why(cfg) -> str:
        text = supports(cfg.algorithm).why(flag, missing.format(alg=cfg.algorithm))
        return f"{text}: {advice}" if advice else text

    return Applies(lambda cfg: bool(unless and unless(cfg)) or getattr(supports(cfg.algorithm),
                                                                       flag),
                   reason or why, [("capability", flag)])
