"""Flat, unpadded per-client storage on device: `ClientArrays` and `FederatedData`.

Each split of each client set is stored once, flat and compact:

    x [S, ...]   samples of all clients back to back (uint8 for images, int32 token ids)
    y [S]        int32 labels, or y [S, T] one target token per position (`core.sequence`)
    offset [M]   first row of client k
    count [M]    number of rows of client k
    owner [S]    client of each row

A minibatch of client k is the gather `offset[k] + randint(key, (b,), 0, count[k])`, which
vmaps over k; an evaluation of every client is one pass over S followed by
`jax.ops.segment_sum(..., owner, M)`. Nothing is padded to the largest client.

Per-position targets (`y [S, T]`, language models) are averaged per counted target token,
not per row: `tokens [2, M]` holds each client's number of targets counted by the loss and
by the accuracy (`core.sequence`), and `client_norms` gives the divisors of a client's
summed loss and correct count (the row counts for every other task).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .sequence import target_counts

ROW_CHUNK = 256  # rows per step of a sweep over one client's rows (`client_chunk`)


@struct.dataclass
class ClientArrays:
    """One split (train or test) of one client set, stored flat."""

    x: jax.Array  # [S, *input_shape] uint8 (images) or float32 (features)
    y: jax.Array  # [S] int32 labels (float32 targets for regression)
    offset: jax.Array  # [M] int32, first row of each client
    count: jax.Array  # [M] int32, rows of each client (>= 1)
    owner: jax.Array  # [S] int32, client of each row
    max_count: int = struct.field(pytree_node=False, default=0)  # max(count), static
    # [2, M] float32, per-position targets only: targets each client's loss / accuracy
    # counts (`core.sequence.target_counts`); None for one target per row
    tokens: jax.Array | None = None

    @property
    def num_clients(self) -> int:
        return self.offset.shape[0]

    @property
    def num_samples(self) -> int:
        """Rows of the flat arrays (S), including rows no client owns (`core.padding`)."""
        return self.y.shape[0]

    def owned_rows(self) -> int:
        """Rows that belong to a client: sum(count) (= S unless padded, `core.padding`)."""
        return int(np.asarray(self.count, np.int64).sum())

    @classmethod
    def from_indices(cls, x: np.ndarray, y: np.ndarray,
                     clients: Sequence[np.ndarray]) -> ClientArrays:
        """Build from a dataset (numpy) and one index array per client (in client order)."""
        counts = np.array([len(c) for c in clients], dtype=np.int64)
        if len(clients) == 0:
            raise ValueError("ClientArrays needs at least one client")
        if counts.min() < 1:
            raise ValueError("every client needs at least one sample in every split")
        idx = np.concatenate([np.asarray(c, dtype=np.int64) for c in clients])
        offset = np.concatenate([[0], np.cumsum(counts)[:-1]])
        owner = np.repeat(np.arange(len(clients)), counts)
        y = np.asarray(y)[idx]
        y = y.astype(np.int32) if np.issubdtype(y.dtype, np.integer) else y.astype(np.float32)
        tokens = None
        if y.ndim == 2:  # one target per position: per-client counted targets
            tokens = jax.device_put(np.stack(
                [target_counts(y[o:o + c]) for o, c in zip(offset, counts, strict=True)], 1))
        return cls(  # transfers (`on_device`), no program compiled per shape
            x=jax.device_put(x[idx]),
            y=jax.device_put(y),
            offset=jax.device_put(offset.astype(np.int32)),
            count=jax.device_put(counts.astype(np.int32)),
            owner=jax.device_put(owner.astype(np.int32)),
            max_count=int(counts.max()),
            tokens=tokens,
        )

    def client_numpy(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of client k as numpy arrays (host side; for tests and references)."""
        o, c = int(self.offset[k]), int(self.count[k])
        return np.asarray(self.x[o:o + c]), np.asarray(self.y[o:o + c])


def client_norms(arrays: ClientArrays) -> tuple[jax.Array, jax.Array]:
    """[M] divisors of each client's summed per-row loss and correct count: its rows, or
    for per-position targets its counted target tokens (at least 1)."""
    if arrays.tokens is None:
        n = arrays.count.astype(jnp.float32)
        return n, n
    return jnp.maximum(arrays.tokens[0], 1.0), jnp.maximum(arrays.tokens[1], 1.0)


def eval_counts(arrays: ClientArrays) -> jax.Array:
    """[M] what a client's accuracy is a mean over: rows, or counted target tokens."""
    return arrays.count if arrays.tokens is None else arrays.tokens[1].astype(jnp.int32)


def on_device(values: dict) -> dict:
    """Host values (numpy arrays, lists) as device arrays, each a plain transfer:
    `jnp.asarray` of a numpy array compiles a small program per shape, `device_put` none."""
    return {k: jax.device_put(np.asarray(v)) for k, v in values.items()}


def sample_batch(arrays: ClientArrays, k: jax.Array, key: jax.Array,
                 batch_size: int) -> tuple[jax.Array, jax.Array]:
    """A minibatch of `batch_size` rows of client k, drawn uniformly with replacement.

    A gather into the flat arrays; it vmaps over (k, key).
    """
    j = jax.random.randint(key, (batch_size,), 0, arrays.count[k])
    idx = arrays.offset[k] + j
    return arrays.x[idx], arrays.y[idx]


def client_chunk(arrays: ClientArrays, k: jax.Array, start: jax.Array,
                 size: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Rows [start, start+size) of client k, clipped, with a validity mask.

    Used to sweep over a client's whole data in fixed-size chunks (vmappable over k).
    """
    j = start + jnp.arange(size)
    valid = j < arrays.count[k]
    idx = arrays.offset[k] + jnp.minimum(j, arrays.count[k] - 1)
    return arrays.x[idx], arrays.y[idx], valid


@struct.dataclass
class FederatedData:
    """Train/test splits of the seen clients and of the unseen clients.

    `unseen_train`/`unseen_test` are None when the run has no unseen clients. Unseen
    clients never take part in training; they are only evaluated.
    """

    train: ClientArrays
    test: ClientArrays
    unseen_train: ClientArrays | None = None
    unseen_test: ClientArrays | None = None
    # Per-client tags (e.g. "flipped", "byzantine", "domain"): name -> [M] / [U] arrays.
    info: dict = struct.field(default_factory=dict)
    unseen_info: dict = struct.field(default_factory=dict)
    num_classes: int = struct.field(pytree_node=False, default=10)
    name: str = struct.field(pytree_node=False, default="")
    # A balanced held-out global test set as one client (generated pools with
    # --global-test-per-class), evaluated as `test_acc_global`; None = none.
    global_test: ClientArrays | None = None
    # token tasks: the tokenizer's number of ids (0 = not token data; `data/text.py`)
    vocab_size: int = struct.field(pytree_node=False, default=0)

    @property
    def num_clients(self) -> int:
        return self.train.num_clients

    @property
    def num_unseen(self) -> int:
        return 0 if self.unseen_train is None else self.unseen_train.num_clients

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    def splits(self) -> dict[str, ClientArrays]:
        """The splits present, by name: train, test, unseen_train, unseen_test."""
        out = {"train": self.train, "test": self.test}
        if self.unseen_train is not None:
            out["unseen_train"] = self.unseen_train
            out["unseen_test"] = self.unseen_test
        return out
