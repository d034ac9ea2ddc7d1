"""One declaration per option: `option(name, default, help, ...)`, beside the component that
reads it, by the built-in components and by plugins alike.

The declaration gives the option's default, `--help` text and section (`GROUPS`), allowed
values (`choices`, or the `registry` of component names) and range, and one `applies`
predicate (`Applies`): where the option has an effect, with the reason given where it has
none. The rule for static and tunable: an option declared with `tunable=True` is a
vmappable hyperparameter (a float of `HParams`; a sweep over it is one compiled program);
every other option is static (a key of `RunConfig`; each value is a program of its own).

From the declaration alone the option is a `--flag` of run and sweep, a config-file key, a
`--grid` axis, an attribute of `RunConfig` or `HParams` (`cfg.pfedme_k`, `hp.qffl_q`), a
key of results.json; a run where `applies` fails refuses it in one line when given; a
results.json lists the hyperparameters that apply; and a component's builder finds in its
`Options` the static options whose `applies` names it (`Applies.mentions`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import operator
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigError
from .groups import GROUPS
from .registry import Registry

Reason = str | Callable[[Any], str]


class Applies:
    """Where an option has an effect: `test(cfg)` of a run's configuration, the `reason`
    (text, or a function of the configuration) a run where it fails is given, and the
    components it names, `mentions` ((kind, name) pairs), whose builders read the option.

    Combine with `a & b` (both; the reason of the first that fails) and `a | b` (either;
    the reason of `a`); `p.because(reason)` gives another reason."""

    __slots__ = ("test", "reason", "mentions")

    def __init__(self, test: Callable[[Any], bool], reason: Reason = "",
                 mentions: Iterable[tuple[str, str]] = ()):
        self.test, self.reason, self.mentions = test, reason, frozenset(mentions)

    def why(self, cfg) -> str | None:
        """None where the option acts in `cfg`, else why it does not."""
        if self.test(cfg):
            return None
        return self.reason(cfg) if callable(self.reason) else self.reason

    def because(self, reason: Reason) -> Applies:
        return Applies(self.test, reason, self.mentions)

    def __and__(self, other: Applies) -> Applies:
        return Applies(lambda c: self.test(c) and other.test(c),
                       lambda c: self.why(c) or other.why(c), self.mentions | other.mentions)

    def __or__(self, other: Applies) -> Applies:
        return Applies(lambda c: self.test(c) or other.test(c), self.reason,
                       self.mentions | other.mentions)

    def names(self, kind: str) -> tuple[str, ...]:
        """The components of `kind` it names."""
        return tuple(sorted(n for k, n in self.mentions if k == kind))


ALWAYS = Applies(lambda cfg: True)


def when(test: Callable[[Any], bool], reason: Reason) -> Applies:
    """A condition on the configuration (a part of the run switched on: label flipping,
    the appeal protocol, ...), with the reason given where it is false."""
    return Applies(test, reason)


def component(kind: str, *names: str) -> Applies:
    """Applies where the configuration key `kind` ("selector", "dp", "partition", ...)
    names one of `names`; their builders read the option."""
    return Applies(lambda cfg: getattr(cfg, kind) in names,
                   f"it configures --{kind.replace('_', '-')} {' or '.join(names)}",
                   [(kind, n) for n in names])


_KIND = {bool: "bool", int: "int", float: "float", str: "str"}


@dataclasses.dataclass(frozen=True)
class Option:
    """A declared option (see `option`); `type` is "bool", "int", "float" or "str"."""

    name: str
    default: Any
    help: str
    choices: Any
    group: str
    range: Mapping[str, float]
    hint: str
    registry: str
    data: bool
    prefixes: tuple[str, ...]
    shown: str
    tunable: bool
    applies: Applies
    needs: Applies | None
    origin: str

    @property
    def type(self) -> str:
        return "float" if self.tunable else _KIND[type(self.default)]

    @property
    def metadata(self) -> dict[str, Any]:
        """The declaration's text, section and limits by name (as the CLI reads them)."""
        out = {k: getattr(self, k) for k in ("help", "group", "hint", "range", "data",
                                             "registry", "prefixes", "shown")}
        return out if self.choices is None else {**out, "choices": self.choices}


class _Attribute:
    """A declared option read as an attribute of its record (`cfg.cohort`, `hp.qffl_q`;
    `RunConfig.cohort` is its default)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, cls=None):  # on the class: the declared default
        return OPTIONS[self.name].default if obj is None else obj.get(self.name)


# the records of the two kinds of option: {False: RunConfig, True: HParams} (core.config)
RECORDS: dict[bool, type] = {}


class _Declared(Registry):
    """The declared options by name; declaring one makes it an attribute of its record."""

    def __setitem__(self, name: str, opt: Option) -> None:
        if name in self:
            del self[name]
        super().__setitem__(name, opt)
        setattr(RECORDS[opt.tunable], name, _Attribute(name))

    def __delitem__(self, name: str) -> None:
        delattr(RECORDS[self[name].tunable], name)
        super().__delitem__(name)


OPTIONS = _Declared("option")

# Names an option may not take: keys of the command line and attributes of the records.
RESERVED = {"extra", "plugin", "config", "hp", "grid", "seeds", "metric", "metric_mode",
            "max_parallel", "overwrite", "coordinator_address", "num_processes", "process_id",
            "heartbeat_timeout", "command", "func", "get", "replace", "as_dict", "view",
            "make", "with_values", "to_dict", "as_arrays", "names", "component"}
_PACKAGE = __name__.split(".")[0] + "."


def option(name: str, default: bool | int | float | str, help: str,
           choices: tuple | Registry | None = None, *, applies: Applies = ALWAYS,
           tunable: bool = False, needs: Applies | None = None, group: str = "algorithm",
           ge=None, gt=None, le=None, lt=None, hint: str = "", registry: str = "",
           data: bool = False, prefixes: tuple[str, ...] = (), shown: str = "") -> str:
    """Declare an option, in the file of the component that reads it.

    Args:
      name: a Python identifier, no other configuration key.
      default: the value of a run that gives none; its type (bool, int, float or str) is
        the option's, checked strictly.
      help: one line for `--help`.
      choices: the allowed values, if they are few (a tuple, or a `Registry` of names).
      applies: where the option has an effect (`ALWAYS`, `component`, `when`, combined with
        `&` and `|`); a run where it fails refuses the option, given, with its reason.
      tunable: a vmappable hyperparameter (a float in `HParams`); else a static option.
      needs: a condition every value of the option must meet (refused, with its reason as
        the message, whether given or not): e.g. what the run's algorithm supports.
      group: the `--help` section (`GROUPS`).
      ge, gt, le, lt: the allowed range of a number; `hint` is added to its refusal.
      registry: the kind of component whose registered names the option takes.
      data: the option changes a run's data (runs that differ in it do not share them).
      prefixes: value prefixes accepted besides the choices (`npz:` of `--dataset`).
      shown: what `--help` says the default is, when it stands for something else.

    Returns:
      `name`, so that a module can keep it: `WINDOW = option("union_window", 5, ...)`.

    Raises:
      ConfigError: the name is taken or no identifier, the default has the wrong type or
        lies outside the range, or the group is unknown. A module may declare its own
        option again (a re-imported plugin), not another module's built-in one.
    """
    origin = sys._getframe(1).f_globals.get("__name__", "")
    old = OPTIONS[name] if name in OPTIONS else None
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"option {name!r}: the name must be a Python identifier (letters, "
                          "digits, _), e.g. 'my_window'")
    if (old is None and name in RESERVED) or (
            old is not None and old.origin != origin and old.origin.startswith(_PACKAGE)):
        raise ConfigError(f"option: '{name}' is already a configuration key; choose another "
                          "name")
    if tunable and (isinstance(default, bool) or not isinstance(default, int | float)
                    or not math.isfinite(default)):
        raise ConfigError(f"option {name!r}: the default of a tunable must be a finite number "
                          f"(got {default!r})")
    if type(default) not in _KIND:
        raise ConfigError(f"option {name!r}: the default must be a bool, int, float or str "
                          f"(got {default!r})")
    if group not in GROUPS:
        raise ConfigError(f"option {name!r}: group must be one of {', '.join(GROUPS)} "
                          f"(got {group!r})")
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    if isinstance(default, int | float) and not in_range(default, bounds.items()):
        raise ConfigError(f"option {name!r}: the default {default} is outside its range "
                          f"{bounds}")
    OPTIONS[name] = Option(name, float(default) if tunable else default, str(help), choices,
                           group, bounds, hint, registry, data, tuple(prefixes), shown,
                           tunable, applies, needs, origin)
    return name


def in_range(value: float, bounds: Iterable[tuple[str, float]]) -> bool:
    """Whether `value` satisfies every (ge|gt|le|lt, bound) pair of a declared range."""
    ops = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
    return all(ops[k](value, b) for k, b in bounds)


def load_option_modules() -> None:
    """Import, once, the package's modules that declare the built-in options (its
    `OPTION_MODULES`), so that every option is known before one is listed or refused."""
    pkg = sys.modules.get(__name__.split(".")[0])
    for module in getattr(pkg, "OPTION_MODULES", ()):
        if module not in sys.modules:
            importlib.import_module(module)


def mentioning(kind: str, name: str | None = None) -> tuple[str, ...]:
    """The static options whose `applies` names a component of `kind` (`name` only, when
    given): what the builders of that kind read beside the shared options."""
    load_option_modules()
    return tuple(n for n, o in OPTIONS.items() if not o.tunable and any(
        k == kind and (name is None or c == name) for k, c in o.applies.mentions))
