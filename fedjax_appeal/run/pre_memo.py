"""Outputs of a pre-init program kept for the next run that would compute them again.

A run's pre-init program (`FederatedAlgorithm.pre_init`: the initial model and, under the
appeal protocol, every client's solo model, `protocols.appeal.requirement.solo_models`) is
a pure function of the run's root key, its data and its hyperparameters, and one function
serves every algorithm under the protocol. The arms of a paper table on one seed share the
federation, so they compute the same solo models whenever their hyperparameters are equal
(MaxFL's Table 2: FedAvg, FedProx and SCAFFOLD share their tuned client lr; IncFL's
synthetic table: all five arms). Training the solo models is most of such a run's work
(200 clients x 100 local steps against 200 rounds x 5 clients x 10 steps).

`PRE_MEMO` hands the later run the arrays the earlier one computed: the same function of
the same inputs, so no value changes, only the time goes. The key is the function
object, the driver's layout (runs axis, lanes, mesh), the data object itself (held by a
weak reference: a new federation, even an equal one, is a new key) and the values of the
root key(s) and of every hyperparameter. At most `MAX_ENTRIES` outputs are kept (small:
per-client statistics and one model); they are dropped with their data.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

MAX_ENTRIES = 8


class NotLocal(Exception):
    """A value spans devices of other processes: this process cannot read it to key it."""


def values_key(tree: Any) -> tuple:
    """The structure, dtypes, shapes and values of a pytree of arrays (typed PRNG keys by
    their key data), as a hashable tuple.

    Raises:
        NotLocal: a leaf spans other processes' devices (a multi-process run), so its
            values are not this process's to read; such runs are not memoized.
    """
    leaves, treedef = jax.tree.flatten(tree)
    plain = [jax.random.key_data(a) if jax.dtypes.issubdtype(getattr(a, "dtype", None),
                                                              jax.dtypes.prng_key) else a
             for a in leaves]
    if any(isinstance(v, jax.Array) and not v.is_fully_addressable for v in plain):
        raise NotLocal
    values = [np.asarray(v) for v in jax.device_get(plain)]
    return (str(treedef), tuple((v.dtype.str, v.shape, v.tobytes()) for v in values))


class OutputMemo:
    """Outputs of pure programs of (key, data, hp), keyed as the module docstring says."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[tuple, tuple[weakref.ref, Any]] = (
            collections.OrderedDict())
        self.hits = 0

    def _key(self, fn: Callable, layout: str, data: Any, keys: Any, hp: Any) -> tuple:
        return (fn, layout, id(data), values_key(keys), values_key(hp))

    def get_or_compute(self, fn: Callable, layout: str, data: Any, keys: Any, hp: Any,
                       compute: Callable[[], Any]) -> Any:
        """The output kept for (fn, layout, data, keys, hp), else `compute()` (kept)."""
        try:
            key = self._key(fn, layout, data, keys, hp)
            ref = weakref.ref(data)
        except (TypeError, NotLocal):  # unhashable, no weak references, or not local
            return compute()
        self._purge()
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is data:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]
        out = compute()
        self._entries[key] = (ref, out)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return out

    def _purge(self) -> None:
        """Drop the entries whose data is gone (its id may be reused)."""
        for k in [k for k, (ref, _) in self._entries.items() if ref() is None]:
            del self._entries[k]

    def clear(self) -> None:
        self._entries.clear()


# The driver's memo of pre-init outputs (`Driver.init`).
PRE_MEMO = OutputMemo()
