"""One shape for the federations of several seeds: `shape_of`, `common_shapes`,
`pad_federation`.

XLA compiles one program per argument shape. The federations of a paper table's seeds
differ in their number of rows S and in their largest client (Dirichlet and power-law
partitions), so every seed traces and compiles every program again (the chunk of rounds
of each arm, the evaluation, the solo models, the fine-tuning). Padded to one shape, the
seeds run the programs compiled for the first.

A padded split gains rows that no client owns (owner = M, x and y zero) and a larger
`max_count`; its clients, their rows, offsets and counts are unchanged, so:

* a minibatch (`arrays.sample_batch`) and a per-client sweep (`arrays.client_chunk`) read
  only the client's own rows;
* the evaluation of every client (`evaluate.evaluation.evaluate_split`) runs over the
  extra rows too, in the same chunks, and `jax.ops.segment_sum` drops the values of rows
  whose owner is out of range;
* a per-client sweep takes chunks of chunk = min(256, max_count) rows:
  `local.client.client_loss` ceil(max_count / chunk) of them, the extra ones all masked
  (they add exact zeros); DivFL's `client_grad` the client's own count // chunk, then its
  rest at the next of `select.selectors.tail_sizes(chunk)`, which depend on the chunk and
  the client's count only.

So every value stays the same, to the last bit, as long as no chunk changes size: rows
are added only to a split of at least `MIN_ROWS` rows (the evaluation's chunk is
min(chunk, S) with chunk <= 2048) and `max_count` is raised only from `ROW_CHUNK` (the
per-client sweeps' chunk). A split below them keeps its shape (and its programs differ
per seed, as without padding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from .arrays import ROW_CHUNK, ClientArrays, FederatedData

MIN_ROWS = 2048  # the evaluation's largest chunk (`evaluate.evaluation.MAX_CHUNK`)
SPLITS = ("train", "test", "unseen_train", "unseen_test")
MAX_WASTE = 2.0  # a padded size is at most this many times the federation's own


class SplitShape(NamedTuple):
    rows: int  # S: rows of the split (owned or padding)
    max_count: int  # rows of its largest client, or more (static)


def shape_of(data: FederatedData) -> dict[str, SplitShape]:
    """The shape of every split present (train, test, unseen_train, unseen_test)."""
    return {name: SplitShape(a.num_samples, a.max_count) for name, a in data.splits().items()}


def _paddable(size: int, floor: int) -> bool:
    return size >= floor


def _fits(group: list[dict[str, SplitShape]], waste: float) -> bool:
    """Whether federations of these shapes can share one padded shape: the same splits;
    per split and dimension, either one value, or every value paddable and the largest at
    most `waste` times the smallest."""
    if len({tuple(s) for s in group}) != 1:
        return False
    for name in group[0]:
        for dim, floor in ((0, MIN_ROWS), (1, ROW_CHUNK)):
            vals = [s[name][dim] for s in group]
            if len(set(vals)) == 1:
                continue
            if not all(_paddable(v, floor) for v in vals) or max(vals) > waste * min(vals):
                return False
    return True


def common_shapes(shapes: Sequence[dict[str, SplitShape]], waste: float = MAX_WASTE
                  ) -> list[dict[str, SplitShape]]:
    """The shape to pad each federation of `shapes` to: federations are grouped (smallest
    first, each joining the first group it fits, see `_fits`) and every member of a group
    gets the group's largest value of each dimension, so that one program serves the
    group. A dimension below its floor (`MIN_ROWS`, `ROW_CHUNK`) is never padded."""
    order = sorted(range(len(shapes)), key=lambda i: sorted(
        (name, tuple(s)) for name, s in shapes[i].items()))
    groups: list[list[int]] = []
    for i in order:
        for g in groups:
            if _fits([shapes[j] for j in (*g, i)], waste):
                g.append(i)
                break
        else:
            groups.append([i])
    out: list[dict[str, SplitShape]] = [{} for _ in shapes]
    for g in groups:
        top = {name: SplitShape(*(max(shapes[j][name][d] for j in g) for d in (0, 1)))
               for name in shapes[g[0]]}
        for j in g:
            out[j] = top
    return out


def pad_rows(arrays: ClientArrays, rows: int, max_count: int) -> ClientArrays:
    """`arrays` with rows no client owns (owner = M, x and y zero) up to `rows` rows and
    `max_count` raised to `max_count`; raises ValueError for a padding that could change a
    value (a smaller shape, or a dimension below its floor, see the module docstring)."""
    s, mc = arrays.num_samples, arrays.max_count
    if rows < s or max_count < mc:
        raise ValueError(f"cannot pad a split of {s} rows (largest client {mc}) to {rows} "
                         f"rows (largest client {max_count}): padding only adds")
    if (rows > s and s < MIN_ROWS) or (max_count > mc and mc < ROW_CHUNK):
        raise ValueError(f"a split of {s} rows (largest client {mc}) keeps its shape: rows "
                         f"are padded from {MIN_ROWS} rows, max_count from {ROW_CHUNK}")
    if rows == s and max_count == mc:
        return arrays
    extra = rows - s

    def grow(a, fill):
        a = np.asarray(a)
        return jax.device_put(np.concatenate([a, np.full((extra, *a.shape[1:]), fill,
                                                          a.dtype)]))

    return arrays.replace(x=grow(arrays.x, 0), y=grow(arrays.y, 0),
                          owner=grow(arrays.owner, arrays.num_clients), max_count=max_count)


def pad_federation(data: FederatedData, shape: dict[str, SplitShape]) -> FederatedData:
    """`data` with each split of `shape` padded to it (`pad_rows`); the per-client tags,
    the global test set and every other field unchanged. Token data (`vocab_size` > 0)
    are refused: their baselines (`evaluate.text_baselines`) count every row host-side."""
    if data.vocab_size:
        raise ValueError("token data (vocab_size > 0) cannot be padded: their baselines "
                         "count every row; run them unpadded")
    if set(shape) != set(data.splits()):
        raise ValueError(f"the shape names the splits {sorted(shape)}, the federation has "
                         f"{sorted(data.splits())}")
    return data.replace(**{name: pad_rows(getattr(data, name), *shape[name])
                           for name in shape})
