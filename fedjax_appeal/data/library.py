"""A federation from in-memory arrays in one call (`from_arrays`), for the library.

    data = from_arrays(x, y, partition=Dirichlet(0.5), clients=100, unseen_clients=100)
    data = from_arrays(x, y, client_ids=writer_of_each_row)

The same steps as `load_federated` (and with the same seeded draws, so the same arrays give
the same federation as `--dataset npz:PATH`): the rows are split over clients by a
partition object (`Dirichlet`, `Clusters`, `ClassesPerClient`: the functions of
`data.partition`) or by the given client id of each row (natural clients, one per id), the
clients are drawn into seen and unseen ones, and each client's rows are split into train
and test (`pool.build_federated`). `fashion_mnist`, `mnist` and `cifar10` return the arrays of the
package's sources.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..core.arrays import FederatedData
from ..core.config import ConfigError
from ..core.errors import refuse_class
from . import partition as partitions
from . import sources
from .pool import build_federated
from .sources import Dataset

DATA_STREAM = 0xDA7A  # the data generator of a run: default_rng([seed, DATA_STREAM])


@dataclasses.dataclass(frozen=True)
class Dirichlet:
    """Label skew: for each class, client shares ~ Dirichlet(alpha) (Hsu et al. 2019);
    redrawn until every client holds `min_samples` rows (`partition.dirichlet`)."""

    alpha: float = 0.5

    def split(self, labels: np.ndarray, total: int, rng: np.random.Generator,
              min_samples: int) -> list[np.ndarray]:
        return partitions.dirichlet(labels, total, self.alpha, rng, min_samples)


@dataclasses.dataclass(frozen=True)
class Clusters:
    """`num_clusters` clusters own `labels_per_cluster` disjoint labels each; clients join
    a cluster at random (`partition.clusters`; labels "random" or "pairs")."""

    num_clusters: int = 5
    labels_per_cluster: int = 2
    labels: str = "random"

    def split(self, labels: np.ndarray, total: int, rng: np.random.Generator,
              min_samples: int) -> list[np.ndarray]:
        return partitions.clusters(labels, total, self.num_clusters, self.labels_per_cluster,
                                  rng, min_samples, self.labels)


@dataclasses.dataclass(frozen=True)
class ClassesPerClient:
    """Every client holds exactly `k` classes (`partition.classes_per_client`)."""

    k: int = 3

    def split(self, labels: np.ndarray, total: int, rng: np.random.Generator,
              min_samples: int) -> list[np.ndarray]:
        return partitions.classes_per_client(labels, total, self.k, rng, min_samples)


def arrays_dataset(x: np.ndarray, y: np.ndarray, client_ids: np.ndarray | None = None,
                   num_classes: int = 0, name: str = "arrays") -> Dataset:
    """The pooled `Dataset` of in-memory arrays, checked as a `--dataset npz:PATH` file is
    (`sources.check_features`, `sources.check_labels`): x [N, ...] uint8 or floating point
    (kept as float32), y [N] integer labels in 0 .. C-1, client ids [N] or None."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim < 2 or len(x) != len(y) or (client_ids is not None and
                                          len(np.asarray(client_ids)) != len(y)):
        raise ConfigError(f"x [N, ...], y [N] and client_ids [N] must have the same number "
                          f"of rows N (got x {x.shape}, y {y.shape}"
                          + ("" if client_ids is None else
                             f", client_ids {np.asarray(client_ids).shape}") + ")")
    if x.dtype != np.uint8 and not np.issubdtype(x.dtype, np.floating):
        raise ConfigError(f"x must be uint8 or floating point, not {x.dtype}")
    sources.check_features(name, x)
    sources.check_labels(name, y, num_classes)
    if x.dtype != np.uint8:
        x = np.ascontiguousarray(x, np.float32)
    return Dataset(name, x, np.asarray(y, np.int64), max(int(y.max()) + 1, num_classes),
                   None if client_ids is None else np.asarray(client_ids))


def from_arrays(x: np.ndarray, y: np.ndarray, *, partition=None,
                client_ids: np.ndarray | None = None, clients: int | None = None,
                unseen_clients: int = 0, train_fraction: float = 0.6, min_samples: int = 10,
                num_classes: int = 0, seed: int = 0, name: str = "arrays") -> FederatedData:
    """The on-device `FederatedData` of in-memory arrays.

    Args:
      x: [N, ...] inputs, uint8 (images) or floating point.
      y: [N] integer class labels.
      partition: how rows are split over clients: `Dirichlet(alpha)`, `Clusters(...)`,
        `ClassesPerClient(k)`, or any object with `split(labels, total, rng, min_samples)`
        returning one index array per client; with it, `clients` is required.
      client_ids: [N] the client of each row instead (natural clients, one per id, those
        with fewer than `min_samples` rows dropped); `clients` defaults to all of them but
        the unseen ones.
      clients, unseen_clients: the seen (trained) and unseen (only evaluated) clients,
        drawn disjointly from the partition's clients.
      train_fraction: each client's train share; the rest is its test split.
      min_samples: the fewest rows a client may hold.
      num_classes: the class count when the labels do not use every class (0 = max + 1).
      seed: the seed of every draw (partition, seen/unseen, train/test): the data seed of
        `load_federated`.
      name: the data's name (results, messages).
    """
    if (partition is None) == (client_ids is None):
        raise ConfigError("give either partition=Dirichlet(alpha) (or Clusters(...), "
                          "ClassesPerClient(k)) or client_ids, one per row")
    if unseen_clients < 0 or (clients is not None and clients < 1) or min_samples < 2:
        raise ConfigError(f"clients must be >= 1, unseen_clients >= 0 and min_samples >= 2 "
                          f"(each client needs a train and a test row) (got {clients}, "
                          f"{unseen_clients}, {min_samples})")
    if partition is not None and clients is None:
        raise ConfigError("with a partition, give the number of clients: clients=N")
    refuse_class("partition", partition)
    if partition is not None and (isinstance(partition, str) or not hasattr(partition, "split")):
        raise ConfigError(f"partition must be Dirichlet(alpha), Clusters(...), "
                          f"ClassesPerClient(k) or have a split(labels, total, rng, "
                          f"min_samples) method, not {type(partition).__name__}")
    if not 0.0 < train_fraction < 1.0:
        raise ConfigError(f"train_fraction must be in (0, 1) (got {train_fraction})")
    try:
        return _federate(x, y, partition, client_ids, clients, unseen_clients, train_fraction,
                         min_samples, num_classes, seed, name)
    except ConfigError as e:  # the shared checks name the command line's flags
        raise ConfigError(as_keywords(str(e))) from None


# the command line's flags that the shared data checks name, as `from_arrays` names them
KEYWORDS = (("--clients/--unseen-clients", "clients/unseen_clients"),
            ("--num-classes ", "num_classes="), ("--num-classes", "num_classes"),
            ("--min-samples", "min_samples"), ("--train-fraction", "train_fraction"),
            ("--clients", "clients"), ("--alpha", "Dirichlet's alpha"),
            ("--cluster-labels", "Clusters' labels"),
            ("--classes-per-client", "ClassesPerClient's k"))


def as_keywords(message: str) -> str:
    """A data check's message with the command line's flags replaced by `from_arrays`'s
    argument names ("give --num-classes 13" -> "give num_classes=13")."""
    for flag, word in KEYWORDS:
        message = message.replace(flag, word)
    return message


def _federate(x, y, partition, client_ids, clients, unseen_clients, train_fraction,
              min_samples, num_classes, seed, name) -> FederatedData:
    ds = arrays_dataset(x, y, client_ids, num_classes, name)
    rng = np.random.default_rng([int(seed), DATA_STREAM])
    if partition is not None:
        total = clients + unseen_clients
        parts = [np.asarray(p) for p in partition.split(ds.y, total, rng, min_samples)]
        if len(parts) != total:
            raise ConfigError(f"the partition returned {len(parts)} clients, not clients + "
                              f"unseen_clients = {total}")
        sizes = np.array([len(p) for p in parts])
        if sizes.min() < min_samples:
            i = int(np.argmin(sizes))
            raise ConfigError(f"client {i} of the partition holds {sizes[i]} rows, fewer than "
                              f"min_samples={min_samples}: lower clients or change the "
                              "partition")
    else:
        parts = partitions.natural(ds.groups, min_samples)
        clients = len(parts) - unseen_clients if clients is None else clients
        if clients < 1:
            raise ConfigError(f"client_ids give {len(parts)} clients with >= {min_samples} "
                              f"rows, {unseen_clients} of them unseen: lower unseen_clients "
                              "or min_samples")
    seen, unseen = partitions.split_seen_unseen(parts, clients, unseen_clients, rng)
    return build_federated(ds, seen, unseen, train_fraction, rng)


def fashion_mnist(directory: str | Path | None = None, cache: str | Path | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's 70,000 images [N, 28, 28] uint8 and labels [N] (train then test),
    from the IDX files of Debian's `dataset-fashion-mnist` (`sources.load_fmnist`)."""
    ds = sources.load_fmnist(directory or sources.FMNIST_DEFAULT_DIR, cache)
    return ds.x, ds.y


def mnist(directory: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """MNIST's images [N, 28, 28] uint8 and labels from the npz data folder
    ($FEDJAX_APPEAL_DATA; `sources.load_mnist`)."""
    ds = sources.load_mnist(directory)
    return ds.x, ds.y


def cifar10(directory: str | Path | None = None, cache: str | Path | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10's images [N, 32, 32, 3] uint8 and labels from the npz data folder
    ($FEDJAX_APPEAL_DATA; `sources.load_cifar10`)."""
    ds = sources.load_cifar10(directory, cache)
    return ds.x, ds.y
