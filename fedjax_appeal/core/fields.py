"""One declaration per option: `option(name, default, help, ..., applies=...)`, beside the
component that reads it, by the built-in components and by plugins alike.

Static or tunable: an option declared `tunable=True` is a vmappable hyperparameter (a float
of `HParams`; a sweep over it is one compiled program); every other option is static (a key
of `RunConfig`; each value is a program of its own). Its one `applies` predicate says where
it has an effect, with the reason given where it has none: refusals, `--help`, the
hyperparameters results.json records and the components' `Options` all read it.
"""

from __future__ import annotations

import collections
import math
import operator
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .errors import ConfigError
from .registry import Registry, load_option_modules  # noqa: F401 - its users import it here

Reason = str | Callable[[Any], str]
# The `--help` sections, in order: every option declares one (`group=`).
GROUPS = {
    "data": "data: dataset, partition, generated clients, label noise",
    "federation": "federation: clients, cohort, rounds, local training, Byzantine clients",
    "algorithm": "algorithm: local objective, aggregation, server optimizer, model",
    "selection": "client selection: Power-of-Choice, DivFL, SubTrunc, UnionFL",
    "uplink": "uplink: update compression and differential privacy",
    "hetero": "heterogeneous and unreliable clients",
    "appeal": "appeal protocol: requirements, GM-Appeal, opt-out, fine-tuning",
    "scale": "scale and layout: devices, chunks, lanes, checkpoints",
    "output": "output: schedule, seeds, folder",
    "tracking": "tracking",
}


class Applies:
    """Where an option has an effect: `test(cfg)`, the `reason` (text, or a function of the
    configuration) given where it fails, and the components it names (`mentions`, (kind,
    name) pairs), whose builders read the option. `a & b`: both (the reason of the first
    that fails); `a | b`: either (the reason of `a`); `p.because(reason)`: another reason."""

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


when = Applies  # when(test, reason): a condition on the configuration (a part switched on)


def component(kind: str, *names: str) -> Applies:
    """Where the configuration key `kind` ("selector", "dp", ...) names one of `names`."""
    return Applies(lambda cfg: getattr(cfg, kind) in names,
                   f"it configures --{kind.replace('_', '-')} {' or '.join(names)}",
                   [(kind, n) for n in names])


_KIND = {bool: "bool", int: "int", float: "float", str: "str"}
_META = ("help", "group", "hint", "range", "data", "registry", "prefixes", "shown")


class Option(collections.namedtuple("Option", "name default help choices group range hint "
                                     "registry data prefixes shown tunable applies needs origin")):
    """A declared option: `option`'s arguments, its bounds as `range` ({"ge": 0, ...}) and
    the `origin` module that declared it."""

    @property
    def type(self) -> str:
        """"bool", "int", "float" or "str"."""
        return "float" if self.tunable else _KIND[type(self.default)]

    @property
    def metadata(self) -> dict[str, Any]:
        """Text, section and limits by name (as the CLI reads them)."""
        out = {k: getattr(self, k) for k in _META}
        return out if self.choices is None else {**out, "choices": self.choices}


class _Attribute:
    """An option read as an attribute of its record (`cfg.cohort`; `RunConfig.cohort` is its
    default)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, cls=None):
        return OPTIONS[self.name].default if obj is None else obj.get(self.name)


RECORDS: dict[bool, type] = {}  # {False: the static records, True: HParams} (core.config)
TUNABLES: dict[str, Option] = {}  # the tunables components declare (not the learning rates)
_CORE = __name__.rsplit(".", 1)[0] + ".config"


class _Declared(Registry):
    """The declared options by name; each is an attribute of its record while declared."""

    def __setitem__(self, name: str, opt: Option) -> None:
        if name in self:  # declared again (a re-imported plugin)
            del self[name]
        super().__setitem__(name, opt)
        setattr(RECORDS[opt.tunable], name, _Attribute(name))
        if opt.tunable and opt.origin != _CORE:
            TUNABLES[name] = opt

    def __delitem__(self, name: str) -> None:
        delattr(RECORDS[self[name].tunable], name)
        TUNABLES.pop(name, None)
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
    """Declare an option, in the file of the component that reads it; returns `name`.

    Args:
      name, default, help: an identifier no other option has (a module may declare its own
        again), the value of a run that gives none (its type is the option's), one line.
      choices, registry, prefixes: the allowed values, or the kind of component whose
        names it takes, and value prefixes accepted besides (`npz:` of `--dataset`).
      applies: where it has an effect (`ALWAYS`, `component`, `when`, `algorithm`,
        `part`, `capable`; `&`, `|`); given where it fails, it is refused with the reason.
      tunable: a vmappable hyperparameter (a float of `HParams`); else static.
      needs: a condition every value must meet, given or not (e.g. what the run's
        algorithm supports); its reason is the refusal.
      group, ge/gt/le/lt, hint, shown: the `--help` section, the range of a number and
        the hint added to its refusal, what `--help` says the default stands for.
      data: it changes a run's data (runs that differ in it do not share them).

    Raises:
      ConfigError: a taken or malformed name, a default of the wrong type or outside the
        range, an unknown group.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"option {name!r}: the name must be a Python identifier (letters, "
                          "digits, _), e.g. 'my_window'")
    origin = sys._getframe(1).f_globals.get("__name__", "")
    old = OPTIONS[name] if name in OPTIONS else None
    if (old is None and name in RESERVED) or (
            old is not None and old.origin != origin and old.origin.startswith(_PACKAGE)):
        raise ConfigError(f"option: '{name}' is already a configuration key; choose another "
                          "name")
    if tunable and (type(default) not in (int, float) or not math.isfinite(default)):
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


def mentioning(kind: str, name: str | None = None) -> tuple[str, ...]:
    """The static options whose `applies` names a component of `kind` (`name` only, when
    given): what the builders of that kind read beside the shared options."""
    load_option_modules()
    return tuple(n for n, o in OPTIONS.items() if not o.tunable and any(
        k == kind and (name is None or c == name) for k, c in o.applies.mentions))
