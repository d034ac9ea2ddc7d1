"""`Registry`: every name list of the package (algorithms, weight rules, selectors, server
optimizers, models, datasets, partitions) is one of these, so validation, the CLI's
`list` command and the builders read the same names and give the same one-line error."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .errors import ConfigError

_REGISTRIES: list[weakref.ref] = []  # every registry, for `registrations`


def did_you_mean(name: Any, choices) -> str:
    """The declared choice closest to `name` (the same but for case first), or ""."""
    names = [str(c) for c in choices]
    text = str(name)
    same_case = [c for c in names if c.lower() == text.lower()]
    close = same_case or difflib.get_close_matches(text.lower(), names, n=1, cutoff=0.6)
    return close[0] if close else ""


class Registry(Mapping):
    """Names -> values (builders, or None where only the name matters), in order.

    Args:
      what: what a name names, for messages ("algorithm", "server optimizer", ...).
      entries: the initial names and values.
      extra: names accepted besides the entries (e.g. the model "auto").
      sort: list the names sorted (else in registration order).
    """

    def __init__(self, what: str, entries: Mapping[str, Any] | None = None, *,
                 extra: tuple[str, ...] = (), sort: bool = False):
        self.what = what
        self._items: dict[str, Any] = dict(entries or {})
        self.extra = tuple(extra)
        self.sort = sort
        _REGISTRIES.append(weakref.ref(self))

    def __getitem__(self, name: str) -> Any:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items) if self.sort else self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setitem__(self, name: str, value: Any) -> None:
        self._items[name] = value

    def __delitem__(self, name: str) -> None:
        del self._items[name]

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {list(self)})"

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator adding `name` -> the decorated value."""

        def deco(value):
            self._items[name] = value
            return value

        return deco

    def choices(self) -> tuple[str, ...]:
        """Every accepted name, the `extra` ones first."""
        return self.extra + tuple(self)

    def check(self, name: str) -> None:
        """Raise `ConfigError` unless `name` is accepted (with a "did you mean")."""
        if name not in self._items and name not in self.extra:
            guess = did_you_mean(name, self.choices())
            raise ConfigError(f"unknown {self.what} '{name}'; "
                              + (f"did you mean '{guess}'? " if guess else "")
                              + f"choose one of: {', '.join(self.choices())}")

    def get(self, name: str) -> Any:  # noqa: D102 - Mapping.get with the one-line error
        """The value of `name`, or `ConfigError` naming the choices."""
        self.check(name)
        return self._items[name]


def load_option_modules() -> None:
    """Import, once, the package's modules that declare the built-in options (its
    `OPTION_MODULES`), so that every option is known before one is used or listed."""
    pkg = sys.modules.get(__name__.split(".")[0])
    for module in getattr(pkg, "OPTION_MODULES", ()):
        if module not in sys.modules:
            importlib.import_module(module)


@contextlib.contextmanager
def registrations() -> Iterator[None]:
    """Undo, when the block ends, every registration made inside it: each registry (the
    components, options, datasets, capabilities, ...) is left as it was before. For tests and
    scripts that register components for a while; a plugin's registrations last otherwise."""
    # the built-ins first: declared inside the block, they would be undone with the rest
    # and never declared again (their modules stay imported)
    load_option_modules()
    saved = [(r, dict(r._items)) for r in (ref() for ref in _REGISTRIES) if r is not None]
    try:
        yield
    finally:
        for reg, items in saved:
            for name in [n for n in reg._items if n not in items]:
                del reg[name]
            for name, value in items.items():
                if name not in reg._items or reg._items[name] is not value:
                    reg[name] = value
