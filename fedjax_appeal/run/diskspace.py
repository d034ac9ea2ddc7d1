"""Writes that can fail for lack of space: one-line errors that say what was kept, and a
free-space check before training.

A run writes two kinds of files: its checkpoint (`checkpoint.npz`, replaced atomically, so
for a moment the old and the new copy both exist) and, at the end, its results
(`results.json`, `history.csv`, `accuracy.png`, `model.msgpack`, `model.json`). Before
training, `check_free` compares an estimate of those bytes with the free space of the output
file system and refuses in one line when it is short. A write that fails anyway (another
process filled the disk, a quota) raises `WriteFailed`: the temporary file is removed, the
previous checkpoint stays, and the message names it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import jax
import numpy as np

from ..core.config import ConfigError

# Bytes of results.json per round metric value (a JSON float with its separator).
JSON_VALUE_BYTES = 24
# Fixed part of the results: the history, the config block, the plot.
RESULTS_FIXED_BYTES = 128 * 1024


class WriteFailed(ConfigError):
    """A file of the run could not be written (full disk, quota, permissions); the message
    says what could not be written and where the last good state is. Exit status 1."""

    exit_code = 1


def reason(e: OSError) -> str:
    """'No space left on device' (the system's words for `e`)."""
    if e.errno:
        return e.strerror or os.strerror(e.errno)
    return str(e) or type(e).__name__


def tree_bytes(tree) -> int:
    """Bytes of the arrays of a pytree (PRNG keys as their key data)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", np.float32), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        total += int(np.prod(np.shape(leaf))) * np.dtype(leaf.dtype).itemsize
    return total


def estimate_bytes(state, metric_values: int) -> int:
    """Bytes a run holds on disk at its peak: two copies of the checkpoint while one replaces
    the other (the server state and the `metric_values` per-round metric values as float32),
    plus the results (those values as JSON, the history and plot, and the model, which is
    part of the state)."""
    state_b = tree_bytes(state)
    checkpoint = state_b + 4 * metric_values
    results = RESULTS_FIXED_BYTES + JSON_VALUE_BYTES * metric_values + state_b
    return 2 * checkpoint + results


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def existing_parent(directory: str | Path) -> Path:
    """`directory` or its nearest existing ancestor (where its files will land)."""
    p = Path(directory).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_free(directory: str | Path, need: int) -> None:
    """Refuse in one line when the file system of `directory` has fewer than `need` bytes
    free."""
    where = existing_parent(directory)
    free = shutil.disk_usage(where).free
    if free < need:
        raise ConfigError(f"{directory}: the file system has {human(free)} free and this run "
                          f"will write about {human(need)} (checkpoints and results); free "
                          "space or choose another --out")
