"""Walking a jaxpr: every equation, those of the jaxprs nested in it included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def jaxpr_eqns(jaxpr) -> Iterator[Any]:
    """Every equation of a jaxpr in program order, each followed by those of the jaxprs
    nested in its parameters (scan, cond, pjit, custom_vjp bodies, ...)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for v in eqn.params.values():
            for sub in (v if isinstance(v, tuple | list) else (v,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from jaxpr_eqns(inner)
