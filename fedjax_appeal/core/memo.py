"""One function object per value of a builder's arguments (`shared`).

JAX traces, lowers and compiles a program once per function object and argument shapes,
and keeps all three in memory. A builder that returns a new closure on every call (the
initial model of a `Model`, its evaluator, the solo models of the appeal protocol) makes
every arm of a comparison trace and lower its program again, even when XLA's cache then
serves the compiled form. Wrapped in `shared`, equal arguments (models and option views
compare by value) return the very same function, so the second arm reuses the first one's
program without tracing it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def shared(builder: F, maxsize: int = 64) -> F:
    """`builder` returning one result per value of its arguments (an LRU cache of
    `maxsize`); arguments that cannot be hashed build a fresh result, as without it."""
    cached = functools.lru_cache(maxsize=maxsize)(builder)

    @functools.wraps(builder)
    def build(*args, **kwargs):
        try:
            return cached(*args, **kwargs)
        except TypeError as e:
            if "unhashable" not in str(e):
                raise
            return builder(*args, **kwargs)

    build.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return build  # type: ignore[return-value]
