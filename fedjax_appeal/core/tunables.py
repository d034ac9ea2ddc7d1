"""Tunables: the vmappable scalars a component declares beside its code (`HParams`).

A component (a weight rule with its own temperature, a selector with its own exponent),
built in or registered by user code, declares each hyperparameter of its own with
`register_tunable(name, default, help)`: it then lives in
`HParams.extra` (a dict of float32 scalars that is part of the pytree, so `jax.vmap` over a
stacked `HParams` batches it like any built-in field), is read inside the round as
`hp.get(name)` or `hp.extra[name]`, and is accepted everywhere a built-in hyperparameter is:
`--NAME X` and `--hp NAME=X` on `run`/`sweep`, a key of `--config FILE`, a `--grid` axis of
`sweep`, the `hparams` of results.json, sweep rows, checkpoints and trackers.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from typing import NamedTuple

from .capabilities import Switch
from .errors import ConfigError
from .groups import GROUPS
from .registry import Registry, did_you_mean


class Tunable(NamedTuple):
    """A declared tunable: its default value, its `--help` text, its `--help` section
    (`core.fields.GROUPS`), its allowed range (`(("ge", 0.0), ...)`), a hint appended
    to a refusal of a value out of range, and the `switch` of the part of a run that reads
    it (None: its component's declarations decide, e.g. an algorithm's `Supports`)."""

    default: float
    help: str
    group: str = "algorithm"
    range: tuple[tuple[str, float], ...] = ()
    hint: str = ""
    switch: Switch | None = None


TUNABLES = Registry("tunable")

# Names a tunable may not take: keys of the command line and config files; config.py adds
# the fields of RunConfig and HParams (`reserve`).
RESERVED = {"extra", "plugin", "config", "hp", "grid", "seeds", "metric", "metric_mode",
            "max_parallel", "overwrite", "coordinator_address", "num_processes", "process_id",
            "heartbeat_timeout", "command", "func"}


_PACKAGE = __name__.split(".")[0] + "."
_ORIGIN: dict[str, str] = {}  # tunable -> the module that declared it (a re-import may again)


def reserve(names) -> None:
    """Forbid `names` as tunable names (the built-in configuration fields)."""
    RESERVED.update(names)


def register_tunable(name: str, default: float, help: str = "", *, group: str = "algorithm",
                     ge: float | None = None, gt: float | None = None,
                     le: float | None = None, lt: float | None = None,
                     hint: str = "", switch: Switch | None = None) -> str:
    """Add a vmappable hyperparameter `name` (a float scalar) with its default and help.

    Registering the same name again replaces its declaration (a re-imported plugin).

    Args:
      name: a Python identifier, not a field of `RunConfig` or `HParams`.
      default: the value a run uses when the user gives none.
      help: one line for `--help` and `list`.
      group: the `--help` section (`core.fields.GROUPS`).
      ge, gt, le, lt: the allowed range; a value outside it is refused in one line.
      hint: appended to that refusal.
      switch: for a tunable of a part of a run that a condition switches on (lognormal
        local steps, Bernoulli availability): a `core.capabilities.Switch`; a run in which
        it is off refuses the tunable with its reason.

    Returns:
      `name`, so the call can define a module constant: `TEMP = register_tunable(...)`.

    Raises:
      ConfigError: the name is taken or not an identifier, the default is not finite or
        outside the range.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"register_tunable: name {name!r} must be a Python identifier "
                          "(letters, digits, _), e.g. 'my_temperature'")
    caller = sys._getframe(1).f_globals.get("__name__", "")
    origin = _ORIGIN.get(name)
    if (name in RESERVED and origin is None) or (
            origin is not None and origin.startswith(_PACKAGE) and caller != origin):
        raise ConfigError(f"register_tunable: '{name}' is already a configuration key; "
                          "choose another name")
    if isinstance(default, bool) or not isinstance(default, int | float) or not math.isfinite(
            float(default)):
        raise ConfigError(f"register_tunable: default of '{name}' must be a finite number "
                          f"(got {default!r})")
    if group not in GROUPS:
        raise ConfigError(f"register_tunable {name!r}: group must be one of "
                          f"{', '.join(GROUPS)} (got {group!r})")
    bounds = tuple((k, float(v)) for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt))
                   if v is not None)
    if not in_range(float(default), bounds):
        raise ConfigError(f"register_tunable: default of '{name}' ({default}) is outside "
                          f"its range {dict(bounds)}")
    TUNABLES[name] = Tunable(float(default), str(help), group, bounds, hint, switch)
    _ORIGIN[name] = caller
    reserve([name])
    return name


def in_range(value: float, bounds: Iterable[tuple[str, float]]) -> bool:
    """Whether `value` satisfies every (ge|gt|le|lt, bound) pair (a declared range, of a
    tunable or of any configuration field)."""
    ops = {"ge": lambda b: value >= b, "gt": lambda b: value > b,
           "le": lambda b: value <= b, "lt": lambda b: value < b}
    return all(ops[k](b) for k, b in bounds)


def plugin_tunables() -> list[str]:
    """The tunables declared outside the package (by plugins and user code)."""
    return [k for k in TUNABLES if not _ORIGIN.get(k, "").startswith(_PACKAGE)]


def check_tunable(name: str, builtin: Iterable[str] = ()) -> None:
    """Raise a one-line `ConfigError` unless `name` is a registered tunable; the closest
    tunable or `builtin` name (the HParams fields) is suggested."""
    if name in TUNABLES:
        return
    guess = did_you_mean(name, [*builtin, *TUNABLES])
    plugins = plugin_tunables()
    known = ", ".join(plugins) if plugins else "none (a plugin adds one with " \
        "fedjax_appeal.extend.register_tunable)"
    raise ConfigError(f"unknown hyperparameter '{name}'; "
                      + (f"did you mean '{guess}'? " if guess else "")
                      + f"tunables registered by plugins: {known}; the built-in ones are "
                      "listed by `fedjax-appeal run --help-all`")
