"""How a configuration field is declared, and the options components declare in their own
files (`register_option`).

Every static configuration key has one declaration: its default, `--help` text, section
(`GROUPS`), allowed values and range. The keys every run has are the fields of
`RunConfig` (`core/config.py`); a component's own keys (an algorithm's inner steps, a
selector's window) are declared beside the component's builder with `register_option`, by
the built-in components and by plugins alike, and `RunConfig` takes them like its own fields:
`RunConfig(pfedme_k=3)`, `cfg.pfedme_k`, `--pfedme-k 3`, a `--config` key, a static
`--grid` axis of `sweep`, the `config` of results.json.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any

from .capabilities import Switch, Switched, supports
from .errors import ConfigError
from .groups import GROUPS
from .tunables import RESERVED, TUNABLES, reserve

_KIND = {bool: "bool", int: "int", float: "float", str: "str"}

# name -> the declared option (a `dataclasses.Field` with name, type and metadata, like a
# RunConfig field's), in the order of declaration
COMPONENT_OPTIONS: dict[str, dataclasses.Field] = {}
_DECLARED: set[str] = set()  # every name ever declared here (a re-declaration replaces)


def meta(help: str, group: str, choices, ge, gt, le, lt, hint: str, **extra) -> dict:
    """The metadata of a declared field: help, group, hint, choices, range and `extra`."""
    if group not in GROUPS:
        raise ValueError(f"unknown configuration group {group!r}")
    out = {"help": help, "group": group, "hint": hint, **extra}
    if choices is not None:
        out["choices"] = choices
    out["range"] = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt))
                    if v is not None}
    return out


def register_option(name: str, default: bool | int | float | str, help: str,
                    choices: tuple | None = None, *, kind: str = "",
                    names: tuple[str, ...] = (), switch: Switch | None = None,
                    every_run: bool = False, group: str = "algorithm", ge=None, gt=None,
                    le=None, lt=None, hint: str = "", registry: str = "",
                    data: bool = False) -> str:
    """Declare a static option of a component, in the component's own file.

    A static option fixes a program's structure or shapes (a number of inner steps, a
    variant, a window); a scalar that only enters arithmetic is a tunable instead
    (`register_tunable`, vmapped by sweeps). Declaring the same name again (a re-imported
    plugin) replaces the declaration.

    Args:
      name: a Python identifier, not a key of the configuration already.
      default: the value of a run that does not give one; its type (bool, int, float or
        str) is the option's type, checked strictly like a RunConfig field's.
      help: one line for `--help`.
      choices: the allowed values, if they are few.
      kind: the configuration key that names the kind of component reading the option
        ("algorithm", "selector", "aggregation", "partition", "compress", ...).
      names: the components of that kind that read it: a run that builds none of them
        refuses the option in one line ("it configures --selector poc"), and the builders
        of these components find it in their `Options`.
      switch: instead of `kind` and `names`, for an option of a part of every run that a
        condition switches on (label flipping, the imbalanced pool): a
        `core.capabilities.Switch`; a run in which it is off refuses the option with its
        reason.
      every_run: instead of the above, for the option that switches a part of every run
        on (`--label-flip-fraction`, `--byzantine-fraction`, `--deadline`): never refused as
        having no effect (an algorithm without the part refuses a value that turns it on,
        `run.validate`'s capability checks).
      group: the `--help` section (`GROUPS`).
      ge, gt, le, lt: the allowed range of a number.
      hint: appended to a refusal of a value out of range.
      registry: the name of the registry whose names the option takes.
      data: the option changes a run's data (a partition's): runs that differ in it do not
        share their data (`core.config.data_fields`), and the data layer reads it.

    Returns:
      `name`, so that a module can keep it: `WINDOW = register_option("union_window", ...)`.

    Raises:
      ConfigError: the name is taken or not an identifier, or the default's type is not
        bool, int, float or str.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"register_option: name {name!r} must be a Python identifier "
                          "(letters, digits, _), e.g. 'my_window'")
    typ = _KIND.get(type(default))
    if typ is None:
        raise ConfigError(f"register_option {name!r}: the default must be a bool, int, "
                          f"float or str (got {default!r})")
    if name in RESERVED and name not in _DECLARED:
        raise ConfigError(f"register_option: '{name}' is already a configuration key; "
                          "choose another name")
    modes = sum((bool(kind or names), switch is not None, bool(every_run)))
    if modes > 1:
        raise ConfigError(f"register_option {name!r}: give one of kind= and names=, "
                          "switch= or every_run=True, not both")
    if switch is None and not every_run and (not kind or isinstance(names, str) or not names):
        raise ConfigError(f"register_option {name!r}: give kind= and names=, a tuple of "
                          "the components of that kind that read the option, switch=, the "
                          "condition that switches its part of the run on, or "
                          "every_run=True for the option that switches a part on")
    f = dataclasses.field(default=default, metadata=meta(
        help, group, choices, ge, gt, le, lt, hint, data=data, registry=registry,
        prefixes=(), shown="", owner=(kind, tuple(names)) if kind else None,
        switch=switch))
    f.name, f.type = name, typ
    COMPONENT_OPTIONS[name] = f
    _DECLARED.add(name)
    reserve([name])
    return name


def load_option_modules() -> None:
    """Import the package's modules that declare built-in options (the package lists them
    in its `OPTION_MODULES`), once, so that every built-in option is known before options
    are listed or a key is refused."""
    pkg = sys.modules.get(__name__.split(".")[0])
    for module in getattr(pkg, "OPTION_MODULES", ()):
        if module not in sys.modules:
            importlib.import_module(module)


def declared_for(kind: str, name: str | None = None) -> tuple[str, ...]:
    """The declared options of the components of `kind` (of component `name` only, when
    given), in the order of declaration."""
    return tuple(n for n, f in COMPONENT_OPTIONS.items() if f.metadata["owner"] is not None
                 and f.metadata["owner"][0] == kind
                 and (name is None or name in f.metadata["owner"][1]))


# options of one component that another part, when on, overrides (`register_switched`)
OVERRIDDEN: dict[tuple[str, ...], Switched] = {}


def register_switched(options: tuple[str, ...], switch: Switch) -> tuple[str, ...]:
    """Declare, in the module of a part, that the options of another component apply only
    while `switch` is active: the part replaces what they configure (the imbalanced pool
    replaces the Dirichlet partition's `alpha`; UnionFL on a DivFL base ignores SubTrunc's
    options). A run in which the switch is off refuses them with its reason, as it refuses
    a switched part's own options. Declaring the same options again replaces the
    declaration.

    Returns:
      `options`.
    """
    if isinstance(options, str) or not options:
        raise ConfigError("register_switched: give a tuple of option names")
    OVERRIDDEN[tuple(options)] = Switched(tuple(options), *switch)
    return tuple(options)


def declared_switched() -> list[Switched]:
    """The declared options and tunables of switched parts (`register_option(...,
    switch=...)`, `register_tunable(..., switch=...)`, `register_switched`), each with the
    condition and the reason of its part."""
    return [*OVERRIDDEN.values(),
            *(Switched((n,), *f.metadata["switch"]) for n, f in COMPONENT_OPTIONS.items()
              if f.metadata["switch"] is not None),
            *(Switched((n,), *t.switch) for n, t in TUNABLES.items() if t.switch is not None)]


def owner_reason(option: str, built: Any) -> str | None:
    """"it configures --KIND NAME" when `option` is a declared component option and
    `built(kind)` (the name of the component of that kind that a run builds) is none of
    the components that read it; else None. An algorithm whose `Supports` lists the
    option among its own (`options`, `tuning`: a plugin built on a shared part) reads it
    too."""
    f = COMPONENT_OPTIONS.get(option)
    if f is None or f.metadata["owner"] is None:
        return None
    kind, names = f.metadata["owner"]
    if built(kind) in names:
        return None
    if kind == "algorithm":
        sup = supports(built(kind))
        if option in (*sup.options, *sup.tuning):
            return None
    return f"it configures --{kind.replace('_', '-')} {' or '.join(names)}"


def option_value(options: tuple[tuple[str, Any], ...], name: str) -> Any:
    """The value of the declared option `name` in a configuration's given `options` (its
    default when not given)."""
    for k, v in options:
        if k == name:
            return v
    return COMPONENT_OPTIONS[name].default
