"""User-defined tunables: scalars a plugin adds to the vmappable `HParams`.

A component registered by user code (a weight rule with its own temperature, a selector
with its own exponent) often needs a hyperparameter that the built-in `HParams` fields do
not have. `register_tunable(name, default, help)` adds one: it then lives in
`HParams.extra` (a dict of float32 scalars that is part of the pytree, so `jax.vmap` over a
stacked `HParams` batches it like any built-in field), is read inside the round as
`hp.get(name)` or `hp.extra[name]`, and is accepted everywhere a built-in hyperparameter is:
`--NAME X` and `--hp NAME=X` on `run`/`sweep`, a key of `--config FILE`, a `--grid` axis of
`sweep`, the `hparams` of results.json, sweep rows, checkpoints and trackers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from .errors import ConfigError
from .registry import Registry, did_you_mean


class Tunable(NamedTuple):
    """A registered user tunable: its default value and its `--help` text."""

    default: float
    help: str


TUNABLES = Registry("tunable")

# Names a tunable may not take: keys of the command line and config files; config.py adds
# the fields of RunConfig and HParams (`reserve`).
RESERVED = {"extra", "plugin", "config", "hp", "grid", "seeds", "metric", "metric_mode",
            "max_parallel", "overwrite", "coordinator_address", "num_processes", "process_id",
            "heartbeat_timeout", "command", "func"}


def reserve(names) -> None:
    """Forbid `names` as tunable names (the built-in configuration fields)."""
    RESERVED.update(names)


def register_tunable(name: str, default: float, help: str = "") -> str:
    """Add a vmappable hyperparameter `name` (a float scalar) with its default and help.

    Registering the same name again replaces its default and help (a re-imported plugin).

    Args:
      name: a Python identifier, not a field of `RunConfig` or `HParams`.
      default: the value a run uses when the user gives none.
      help: one line for `--help` and `list`.

    Returns:
      `name`, so the call can define a module constant: `TEMP = register_tunable(...)`.

    Raises:
      ConfigError: the name is taken or not an identifier, or the default is not finite.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"register_tunable: name {name!r} must be a Python identifier "
                          "(letters, digits, _), e.g. 'my_temperature'")
    if name in RESERVED:
        raise ConfigError(f"register_tunable: '{name}' is already a configuration key; "
                          "choose another name")
    if isinstance(default, bool) or not isinstance(default, int | float) or not math.isfinite(
            float(default)):
        raise ConfigError(f"register_tunable: default of '{name}' must be a finite number "
                          f"(got {default!r})")
    TUNABLES[name] = Tunable(float(default), str(help))
    return name


def check_tunable(name: str, builtin: Iterable[str] = ()) -> None:
    """Raise a one-line `ConfigError` unless `name` is a registered tunable; the closest
    tunable or `builtin` name (the HParams fields) is suggested."""
    if name in TUNABLES:
        return
    guess = did_you_mean(name, [*builtin, *TUNABLES])
    known = ", ".join(TUNABLES) if len(TUNABLES) else "none (a plugin adds one with " \
        "fedjax_appeal.extend.register_tunable)"
    raise ConfigError(f"unknown hyperparameter '{name}'; "
                      + (f"did you mean '{guess}'? " if guess else "")
                      + f"registered tunables: {known}; built-in ones are the HParams fields "
                      "(see `fedjax-appeal run --help`)")
