"""What an algorithm is built from and supports, declared once when it registers
(`algorithms.register(name, Supports(...))`), and the predicates of option declarations
that read it (`algorithm`, `part`, `capable`).

The flags say what the algorithm's round does (`compose` provides the defaults); they decide
nothing by themselves: an option whose value needs a flag says so in its own declaration
(`option(..., needs=capable("dp", ...))`), and an option of a shared part (FedAvg's local
SGD) applies to the algorithms that list the part (`Supports.parts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .fields import Applies, Reason, component
from .registry import Registry


@dataclasses.dataclass(frozen=True)
class Supports:
    """Capability flags of an algorithm (the defaults are what `compose` provides).

    aggregation: `--aggregation` picks its weight rule (False: it computes its own).
    selector: `--selector` / `--flip-protocol` pick its cohort (False: it draws its own).
    varied_steps: its clients take tau_k local steps (`--local-steps-dist`).
    fednova: its clients report FedNova's normaliser a_k (`--aggregation fednova`).
    uplink: what its clients send can be compressed (`--compress`).
    dp: user-level DP-FedAvg applies (`--dp`): its only upload is the model delta with a
      uniform slot weight.
    byzantine: it runs the Byzantine hook (`--byzantine-fraction`).
    availability: synchronous rounds with availability and a deadline.
    layouts: it runs its cohort through the shared executor (`--client-lanes`,
      `--client-chunk`, `--devices`).
    needs_requirements: its rule reads the clients' requirements rho_k, so the appeal
      protocol is on by default.
    parts: the shared parts it is built on (e.g. "sgd_local", FedAvg's local SGD): the
      options of a part (declared with `applies=part(name)`) apply to it.
    notes: (capability, why) pairs: the reason given when a capability is missing.
    """

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
    """Applies to the algorithms `names` (`component("algorithm", ...)`); a plugin keeps it
    and registers with it, naming its algorithm once: `MINE = algorithm("mine")`,
    `option(..., applies=MINE)`, `@register(MINE)`."""
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
    (the values of an option that ask nothing of it). Its reason: the algorithm's note on
    the flag (`Supports.notes`; else `missing`, `{alg}` standing for its name), then
    `advice`; or `reason`."""
    def why(cfg) -> str:
        text = supports(cfg.algorithm).why(flag, missing.format(alg=cfg.algorithm))
        return f"{text}: {advice}" if advice else text

    return Applies(lambda cfg: bool(unless and unless(cfg)) or getattr(supports(cfg.algorithm),
                                                                       flag),
                   reason or why, [("capability", flag)])
