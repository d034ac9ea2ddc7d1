"""The tunables (options declared `tunable=True`): `TUNABLES`, those components declare."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ConfigError
from .fields import _PACKAGE, OPTIONS, TUNABLES, load_option_modules
from .registry import did_you_mean


def plugin_tunables() -> list[str]:
    """The tunables declared outside the package (by plugins and user code)."""
    return [k for k, o in TUNABLES.items() if not o.origin.startswith(_PACKAGE)]


def check_tunable(name: str, builtin: Iterable[str] = ()) -> None:
    """Raise a one-line `ConfigError` unless `name` is a declared tunable; the closest
    tunable or `builtin` name is suggested."""
    if name not in OPTIONS:
        load_option_modules()
    if name in OPTIONS and OPTIONS[name].tunable:
        return
    guess = did_you_mean(name, [*builtin, *TUNABLES])
    known = ", ".join(plugin_tunables()) or ("none (a plugin adds one with "
                                             "fedjax_appeal.extend.option(..., tunable=True))")
    raise ConfigError(f"unknown hyperparameter '{name}'; "
                      + (f"did you mean '{guess}'? " if guess else "")
                      + f"tunables registered by plugins: {known}; the built-in ones are "
                      "listed by `fedjax-appeal run --help-all`")
