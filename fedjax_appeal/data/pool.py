"""Pooled datasets into federations: load a pool, partition it over clients, tag
heterogeneous clients, split every client into train and test `ClientArrays`."""

from __future__ import annotations

import dataclasses
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..core.arrays import ClientArrays, FederatedData, on_device
from ..core.config import ConfigError, Options, RunConfig, declarations
from ..core.fields import component, option, when
from ..core.registry import Registry
from . import heterogeneity, partition, sources
from .partition import PARTITIONS
from .sources import Dataset

DATASETS = Registry("dataset")  # `--dataset` name -> DatasetEntry (`register_dataset`)
NPZ_FILE = when(lambda cfg: cfg.dataset.startswith("npz:"),
                "it applies to --dataset npz:PATH only (registered datasets carry their own "
                "scale)")
option("dataset", "fmnist", "dataset name (or npz:PATH, your own arrays)", DATASETS,
       group="data", prefixes=("npz:",), data=True)
# the built-in datasets that read no file of the npz data folder (a plugin's dataset may)
NO_DATA_DIR = ("fmnist", "synthetic")
option("data_dir", "", "directory with the npz data files", group="data",
       shown="$FEDJAX_APPEAL_DATA", data=True,
       applies=when(lambda cfg: cfg.dataset not in NO_DATA_DIR
                    and not cfg.dataset.startswith(("npz:", "tfds:")),
                    "the dataset reads no file of the npz data folder (fmnist: --fmnist-dir; "
                    "npz:PATH: its path; tfds:NAME: TensorFlow Datasets' own folder)"))
option("fmnist_dir", "/usr/share/datasets/fashion-mnist", "directory with the Fashion-MNIST "
       "IDX .gz files", group="data", data=True,
       applies=when(lambda cfg: cfg.dataset == "fmnist", "it applies to --dataset fmnist only"))
option("cache_dir", "", "cache for decoded arrays", group="data",
       shown="$FEDJAX_APPEAL_CACHE, else ~/.cache/fedjax_appeal", data=True)
option("max_samples", 0, "at most this many samples (0 = all)", group="data",
       ge=0, data=True)
option("input_scale", 0.0, "dataset npz:PATH: the model multiplies its inputs by this first "
       "(0 = 1/255 for uint8 inputs, 1 for float inputs)", applies=NPZ_FILE, group="data",
       ge=0, hint="0 = 1/255 for uint8 inputs, 1 for float inputs", data=True, needs=when(
           lambda cfg: not cfg.input_scale or cfg.dataset.startswith("npz:"),
           "--input-scale applies to --dataset npz:PATH only (registered datasets carry their "
           "own scale)"))
option("num_classes", 0, "classes (0: from the labels)", group="data",
       ge=0, hint="0 = the largest label + 1", data=True)
option("seed", 0, "random seed (also of the data, unless --data-seed)",
       group="output", ge=0, lt=2 ** 63, data=True)
option("data_seed", -1, "seed of the data: partition, splits, flips (-1 = --seed)",
       group="data", ge=-1, lt=2 ** 63, data=True)
option("clients", 100, "number of seen (training) clients", group="federation", ge=1, data=True)
option("unseen_clients", 100, "number of unseen clients (never trained on)",
       group="federation", ge=0, data=True)
# the options of the generated datasets
SYNTHETIC, DIGITS = component("dataset", "synthetic"), component("dataset", "digits")
option("synthetic_alpha", 1.0, "Synthetic(alpha, beta): model heterogeneity alpha",
       applies=SYNTHETIC, group="data", data=True)
option("synthetic_beta", 1.0, "Synthetic(alpha, beta): data heterogeneity beta",
       applies=SYNTHETIC, group="data", data=True)
option("domains", "mnist,usps,mnistm", "dataset 'digits': one domain per client, assigned "
       "round-robin from this list", applies=DIGITS, group="data", data=True)
option("domain_samples", 500, "dataset 'digits': rows per client (train + test)",
       applies=DIGITS, group="data", ge=1, data=True)


def data_seed(opts: RunConfig | Options) -> int:
    """The seed of a run's data (`--data-seed`, or `--seed` when that is -1)."""
    return opts.seed if opts.data_seed < 0 else opts.data_seed


def data_fields() -> tuple[str, ...]:
    """The static options that change a run's data (runs equal in them share the data)."""
    return tuple(o.name for o in declarations(RunConfig) if o.data)


def data_options(config: RunConfig | Options, component: str = "the data layer") -> Options:
    """The read-only view of `config`'s data options that the data layer (and every
    registered dataset and partition) receives."""
    return config.view(data_fields(), component)


class DatasetEntry(NamedTuple):
    """A dataset, declared once (`register_dataset`): `load(opts, rng) -> Dataset`, its
    number of `classes` (0: as its labels say), the `model` that `--model auto` builds for
    it, and `rows(opts)`, its number of rows read from file headers (None: not known), for
    the size check before anything is loaded. Its options are declared with
    `option(..., applies=component("dataset", name))`."""

    load: Callable[[Options, np.random.Generator], Dataset]
    classes: int = 0
    model: str = "mlp"
    rows: Callable[[Options], int | None] | None = None


def register_dataset(name: str, *, classes: int = 0, model: str = "mlp",
                     rows: Callable[[Options], int | None] | None = None):
    """Decorator: `fn(opts, rng) -> Dataset` becomes `--dataset NAME` (run, sweep, reproduce),
    with the fields of its `DatasetEntry`. `rng` is the run's data generator (seeded by
    `--data-seed`); draw any randomness from it, so the same data seed gives the same data.
    """
    def deco(fn):
        DATASETS[name] = DatasetEntry(fn, classes, model, rows)
        return fn

    return deco


def npz_file(name: str, members: tuple[str, ...]) -> Callable[[Options], int | None]:
    """`rows` of a dataset stored as `name` in the data folder (`--data-dir`)."""
    def rows(opts: Options) -> int | None:
        folder = opts.data_dir or os.environ.get(sources.DATA_ENV, "")
        return sources.npz_rows(Path(folder).expanduser() / name, members) if folder else None

    return rows


def _builtin(name: str, load: Callable[[Options], Dataset], classes: int, model: str = "mlp",
             rows: Callable[[Options], int | None] | None = None) -> None:
    register_dataset(name, classes=classes, model=model, rows=rows)(lambda opts, rng: load(opts))


TRAIN_TEST = ("y_train", "y_test")
_builtin("fmnist", lambda opts: sources.load_fmnist(opts.fmnist_dir, opts.cache_dir or None), 10,
         rows=lambda opts: sources.idx_rows(opts.fmnist_dir, ("train-labels-idx1-ubyte",
                                                              "t10k-labels-idx1-ubyte")))
_builtin("mnist", lambda opts: sources.load_mnist(opts.data_dir or None), 10,
         rows=npz_file("mnist.npz", TRAIN_TEST))
_builtin("cifar10", lambda opts: sources.load_cifar10(opts.data_dir or None,
                                                    opts.cache_dir or None), 10,
         "cnn", npz_file("cifar10_jpeg.npz", TRAIN_TEST))
_builtin("femnist", lambda opts: sources.load_femnist(opts.data_dir or None), 62,
         rows=npz_file("femnist_partial.npz", ("y",)))
_builtin("sent140", lambda opts: sources.load_sent140(opts.data_dir or None), 2, "sent_mlp",
         npz_file("sent140_subset.npz", ("label",)))
register_dataset("synthetic", classes=10, model="logistic")(
    lambda opts, rng: sources.synthetic(opts.synthetic_alpha, opts.synthetic_beta,
                                        opts.clients + opts.unseen_clients, rng))
_builtin("usps", lambda opts: sources.load_usps(opts.data_dir or None), 10,
         rows=npz_file("usps.npz", TRAIN_TEST))
_builtin("mnistm", lambda opts: sources.load_mnistm(opts.data_dir or None), 10, "cnn",
         npz_file("mnistm_subset.npz", TRAIN_TEST))
for _name, _classes in sources.TFDS_NAMES.items():
    _builtin(f"tfds:{_name}", lambda opts, n=_name: sources.load_tfds(
        n, cache=opts.cache_dir or None), _classes, "cnn" if _name == "cifar10" else "mlp")


def _per_client(opts: Options) -> Dataset:
    raise ConfigError("dataset 'digits' is built per client: use load_federated")


# the Digits domain shift (MNIST, USPS, MNIST-M), one domain per client: data/generated.py
_builtin("digits", _per_client, 10, "cnn_bn")


def default_model(dataset: str) -> str:
    """The model `--model auto` builds for `dataset` (its entry's; `mlp` for npz:PATH)."""
    return DATASETS[dataset].model if dataset in DATASETS else "mlp"


def dataset_rows(opts: Options) -> int | None:
    """The rows of the dataset of `opts` (its data options), read from file headers only
    (nothing decoded); None when not known (generated data, tfds, a missing or unreadable
    file: the loader then reports that problem itself)."""
    if opts.imbalance_ratios:
        return None
    try:
        if opts.dataset.startswith(sources.NPZ_PREFIX):
            return sources.npz_rows(opts.dataset[len(sources.NPZ_PREFIX):])
        entry = DATASETS[opts.dataset] if opts.dataset in DATASETS else None
        return entry.rows(opts) if entry is not None and entry.rows is not None else None
    except (OSError, KeyError, ValueError, ConfigError, zipfile.BadZipFile):
        return None


def register_partition(name: str):
    """Decorator: `fn(ds, total, opts, rng) -> list of index arrays` (one per client, seen
    and unseen together) becomes `--partition NAME`."""
    def deco(fn):
        PARTITIONS[name] = fn
        return fn

    return deco


def load_dataset(opts: Options, rng: np.random.Generator | None = None) -> Dataset:
    """The pooled `Dataset` named by `opts.dataset`, checked (finite features, valid labels;
    `sources.check_dataset`) and with `opts.num_classes` applied, whatever its source."""
    return sources.check_dataset(_load_source(opts, rng), opts.num_classes)


def _load_source(opts: Options, rng: np.random.Generator | None) -> Dataset:
    name = opts.dataset
    if name.startswith(sources.NPZ_PREFIX):
        return sources.load_npz(name[len(sources.NPZ_PREFIX):], opts.input_scale,
                                opts.num_classes)
    entry = DATASETS.get(name)
    rng = rng if rng is not None else np.random.default_rng(data_seed(opts))
    return dataclasses.replace(entry.load(opts, rng), model=entry.model)


def partition_clients(ds: Dataset, opts: Options, rng: np.random.Generator
                      ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Index arrays of the seen and the unseen clients (disjoint, same distribution)."""
    total = opts.clients + opts.unseen_clients
    if callable(PARTITIONS[opts.partition] if opts.partition in PARTITIONS else None):
        parts = [np.asarray(p) for p in PARTITIONS[opts.partition](ds, total, opts, rng)]
        if len(parts) != total:
            raise ConfigError(f"partition '{opts.partition}' returned {len(parts)} clients, "
                              f"not --clients + --unseen-clients = {total}")
    elif opts.partition == "dirichlet":
        parts = partition.dirichlet(ds.y, total, opts.alpha, rng, opts.min_samples)
    elif opts.partition == "clusters":
        parts = partition.clusters(ds.y, total, opts.num_clusters, opts.labels_per_cluster, rng,
                                   opts.min_samples, opts.cluster_labels)
    elif opts.partition == "classes":
        parts = partition.classes_per_client(ds.y, total, opts.classes_per_client, rng,
                                             opts.min_samples)
    elif opts.partition == "natural":
        if ds.groups is None:
            raise ConfigError(f"dataset '{ds.name}' has no natural clients: use --partition "
                              "dirichlet|clusters|classes")
        parts = partition.natural(ds.groups, opts.min_samples)
    else:
        raise ConfigError(f"unknown partition '{opts.partition}'; choose one of: "
                          "dirichlet, clusters, classes, natural")
    return partition.split_seen_unseen(parts, opts.clients, opts.unseen_clients, rng)


def build_federated(ds: Dataset, seen: list[np.ndarray], unseen: list[np.ndarray],
                    train_fraction: float, rng: np.random.Generator,
                    labels: np.ndarray | None = None, info: dict | None = None,
                    unseen_info: dict | None = None) -> FederatedData:
    """Per-client train/test split, then flat `ClientArrays` for every split.

    `labels` replaces `ds.y` (e.g. after label flipping) when given; `info`/`unseen_info`
    are per-client tags (name -> [M] / [U] array).
    """
    y = ds.y if labels is None else labels
    tr, te = partition.train_test_split(seen, train_fraction, rng)
    fd = dict(train=ClientArrays.from_indices(ds.x, y, tr),
              test=ClientArrays.from_indices(ds.x, y, te))
    if unseen:
        utr, ute = partition.train_test_split(unseen, train_fraction, rng)
        fd.update(unseen_train=ClientArrays.from_indices(ds.x, y, utr),
                  unseen_test=ClientArrays.from_indices(ds.x, y, ute))
    return FederatedData(**fd, info=on_device(info or {}),
                         unseen_info=on_device(unseen_info or {}),
                         num_classes=ds.num_classes, name=ds.name)


def apply_heterogeneity(ds: Dataset, seen: list[np.ndarray], unseen: list[np.ndarray],
                        opts: Options) -> tuple[np.ndarray | None, dict, dict]:
    """Label flipping and Byzantine tags from `opts`: (labels or None, info, unseen_info).

    Uses its own seeded stream, so the partition does not depend on these options.
    """
    rng = np.random.default_rng([data_seed(opts), 0xF11B])
    labels, info, uinfo = None, {}, {}
    if opts.label_flip_fraction > 0:
        fs = heterogeneity.choose_fraction(len(seen), opts.label_flip_fraction, rng)
        fu = heterogeneity.choose_fraction(len(unseen), opts.label_flip_fraction, rng)
        labels, _ = heterogeneity.flip_labels(ds.y, seen, fs, ds.num_classes, opts.flip_ratio, rng)
        labels, _ = heterogeneity.flip_labels(labels, unseen, fu, ds.num_classes, opts.flip_ratio,
                                              rng)
        info["flipped"], uinfo["flipped"] = fs, fu
        # group tag (0 clean / 1 flipped) for --selector stratified
        info["group"], uinfo["group"] = fs.astype(np.int32), fu.astype(np.int32)
    if opts.byzantine_fraction > 0:
        info["byzantine"] = heterogeneity.choose_fraction(len(seen), opts.byzantine_fraction, rng)
    return labels, info, uinfo
