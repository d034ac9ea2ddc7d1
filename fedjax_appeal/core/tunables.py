"""The tunables: options declared with `option(..., tunable=True)` (see `core.fields`).

A tunable is a float scalar of the `HParams` pytree, so a sweep's `jax.vmap` over stacked
`HParams` batches it; it is read inside the round as `hp.NAME` or `hp.get(NAME)`.
`TUNABLES` lists the ones components declare (all but the two learning rates).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .errors import ConfigError
from .fields import _PACKAGE, OPTIONS, Option, in_range, load_option_modules
from .registry import did_you_mean

__all__ = ["TUNABLES", "check_tunable", "in_range", "plugin_tunables"]
_CORE = "fedjax_appeal.core.config"  # declares client_lr and server_lr


class _Tunables(Mapping):
    """The declared tunables of the components, by name (a live view of `OPTIONS`)."""

    def __getitem__(self, name: str) -> Option:
        o = OPTIONS[name] if name in OPTIONS else None
        if o is None or not o.tunable or o.origin == _CORE:
            raise KeyError(name)
        return o

    def __iter__(self) -> Iterator[str]:
        return (n for n, o in OPTIONS.items() if o.tunable and o.origin != _CORE)

    def __len__(self) -> int:
        return sum(1 for _ in self)


TUNABLES = _Tunables()


def plugin_tunables() -> list[str]:
    """The tunables declared outside the package (by plugins and user code)."""
    return [k for k in TUNABLES if not OPTIONS[k].origin.startswith(_PACKAGE)]


def check_tunable(name: str, builtin: Iterable[str] = ()) -> None:
    """Raise a one-line `ConfigError` unless `name` is a declared tunable; the closest
    tunable or `builtin` name is suggested."""
    if name not in OPTIONS:
        load_option_modules()
    if name in OPTIONS and OPTIONS[name].tunable:
        return
    guess = did_you_mean(name, [*builtin, *TUNABLES])
    plugins = plugin_tunables()
    known = ", ".join(plugins) if plugins else "none (a plugin adds one with " \
        "fedjax_appeal.extend.option(..., tunable=True))"
    raise ConfigError(f"unknown hyperparameter '{name}'; "
                      + (f"did you mean '{guess}'? " if guess else "")
                      + f"tunables registered by plugins: {known}; the built-in ones are "
                      "listed by `fedjax-appeal run --help-all`")
