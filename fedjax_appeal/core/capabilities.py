"""What an algorithm supports: capability flags declared once, when it registers.

`algorithms.register(name, supports=Supports(...))` files the flags here; every refusal of
an option an algorithm cannot honour, and every "has no effect here" message about one it
ignores, is derived from them (`run/validate.py`), so adding an algorithm (built-in or
plugin) means one file, and an option it does not support is refused in one line, never
ignored. The registry is filled when `fedjax_appeal.algorithms` (or a plugin) is imported,
which every entry point (validation, assembly, `build`) does first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

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
    options: the configuration fields only it (and the other algorithms listing them)
      reads; given to another algorithm, they are refused as having no effect.
    reads: further configuration fields its builder reads that other components share
      (never refused); with `options` and the fields every algorithm reads
      (`algorithms.base.SHARED_OPTIONS`) they make up the options its builder receives.
    tuning: configuration fields of its own that change how it runs, not what it computes
      (e.g. `local_unroll`, the unroll factor of FedAvg's local SGD scan, declared in
      `algorithms/fedavg.py`); refused for the algorithms that do not list them, like
      `options`. A plugin built on a shared part lists that part's options here to take
      them.
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
    options: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    tuning: tuple[str, ...] = ()
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


def owners(option: str) -> list[str]:
    """The registered algorithms that declare `option` as one of their own (`options` or
    `tuning`)."""
    return [n for n in SUPPORTS if option in (*SUPPORTS[n].options, *SUPPORTS[n].tuning)]


class Switch(NamedTuple):
    """The condition that switches a part of a run on (label flipping, the imbalanced pool,
    the solo models, ...): `active(cfg, supports)`, and the `reason` given when an option
    of that part is refused because it is off. An option declared with
    `register_option(..., switch=...)` belongs to that part."""

    active: Callable[[Any, Supports], bool]
    reason: str


class Switched(NamedTuple):
    """Options that only a part of a run reads which a condition switches on (the appeal
    protocol, label flipping, Byzantine clients, ...), declared in that part's module
    (`core.fields.register_option(..., switch=...)`, `register_tunable(..., switch=...)`,
    `register_switched`) and refused in one line, with `reason`, by
    `run.validate.ignored_reason` for a run in which `active(cfg, supports)` is false
    (`supports`: the capability flags of the run's algorithm)."""

    options: tuple[str, ...]
    active: Callable[[Any, Supports], bool]
    reason: str
