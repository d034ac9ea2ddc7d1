"""Pooled datasets into federations: load a pool, partition it over clients, tag
heterogeneous clients, split every client into train and test `ClientArrays`."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..core.arrays import ClientArrays, FederatedData
from ..core.config import DATASETS, PARTITIONS, ConfigError, RunConfig, data_seed
from . import heterogeneity, partition, sources
from .sources import Dataset


def register_dataset(name: str):
    """Decorator: `fn(cfg, rng) -> Dataset` becomes `--dataset NAME` (run, sweep, reproduce).

    `rng` is the run's data generator (seeded by `--data-seed`); draw any randomness from
    it, so the same data seed gives the same data.
    """
    def deco(fn):
        DATASETS[name] = fn
        return fn

    return deco


def register_partition(name: str):
    """Decorator: `fn(ds, total, cfg, rng) -> list of index arrays` (one per client, seen
    and unseen together) becomes `--partition NAME`."""
    def deco(fn):
        PARTITIONS[name] = fn
        return fn

    return deco


def load_dataset(cfg: RunConfig, rng: np.random.Generator | None = None) -> Dataset:
    """The pooled `Dataset` named by `cfg.dataset`, checked (finite features, valid labels;
    `sources.check_dataset`) and with `cfg.num_classes` applied, whatever its source."""
    return sources.check_dataset(_load_source(cfg, rng), cfg.num_classes)


def _load_source(cfg: RunConfig, rng: np.random.Generator | None) -> Dataset:
    name = cfg.dataset
    d = cfg.data_dir or None
    if callable(DATASETS.get(name) if name in DATASETS else None):  # registered by user code
        rng = rng if rng is not None else np.random.default_rng(data_seed(cfg))
        return DATASETS[name](cfg, rng)
    if name == "fmnist":
        return sources.load_fmnist(cfg.fmnist_dir)
    if name == "mnist":
        return sources.load_mnist(d)
    if name == "cifar10":
        return sources.load_cifar10(d, cfg.cache_dir or None)
    if name == "femnist":
        return sources.load_femnist(d)
    if name == "sent140":
        return sources.load_sent140(d)
    if name == "usps":
        return sources.load_usps(d)
    if name == "mnistm":
        return sources.load_mnistm(d)
    if name == "synthetic":
        rng = rng if rng is not None else np.random.default_rng(data_seed(cfg))
        return sources.synthetic(cfg.synthetic_alpha, cfg.synthetic_beta,
                                 cfg.clients + cfg.unseen_clients, rng)
    if name == "digits":
        raise ConfigError("dataset 'digits' is built per client: use load_federated")
    if name.startswith("tfds:"):
        return sources.load_tfds(name[5:], cache=cfg.cache_dir or None)
    if name.startswith(sources.NPZ_PREFIX):
        return sources.load_npz(name[len(sources.NPZ_PREFIX):], cfg.input_scale,
                                cfg.num_classes)
    raise ConfigError(f"unknown dataset '{name}'; choose one of: "
                      "fmnist, mnist, cifar10, femnist, sent140, synthetic, usps, mnistm, "
                      "tfds:fashion_mnist, tfds:mnist, tfds:emnist/byclass, tfds:cifar10, "
                      "npz:PATH")


def partition_clients(ds: Dataset, cfg: RunConfig, rng: np.random.Generator
                      ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Index arrays of the seen and the unseen clients (disjoint, same distribution)."""
    total = cfg.clients + cfg.unseen_clients
    if callable(PARTITIONS[cfg.partition] if cfg.partition in PARTITIONS else None):
        parts = [np.asarray(p) for p in PARTITIONS[cfg.partition](ds, total, cfg, rng)]
        if len(parts) != total:
            raise ConfigError(f"partition '{cfg.partition}' returned {len(parts)} clients, "
                              f"not --clients + --unseen-clients = {total}")
    elif cfg.partition == "dirichlet":
        parts = partition.dirichlet(ds.y, total, cfg.alpha, rng, cfg.min_samples)
    elif cfg.partition == "clusters":
        parts = partition.clusters(ds.y, total, cfg.num_clusters, cfg.labels_per_cluster, rng,
                                   cfg.min_samples, cfg.cluster_labels)
    elif cfg.partition == "classes":
        parts = partition.classes_per_client(ds.y, total, cfg.classes_per_client, rng,
                                             cfg.min_samples)
    elif cfg.partition == "natural":
        if ds.groups is None:
            raise ConfigError(f"dataset '{ds.name}' has no natural clients: use --partition "
                              "dirichlet|clusters|classes")
        parts = partition.natural(ds.groups, cfg.min_samples)
    else:
        raise ConfigError(f"unknown partition '{cfg.partition}'; choose one of: "
                          "dirichlet, clusters, classes, natural")
    return partition.split_seen_unseen(parts, cfg.clients, cfg.unseen_clients, rng)


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
    tags = lambda d: {k: jnp.asarray(v) for k, v in (d or {}).items()}
    return FederatedData(**fd, info=tags(info), unseen_info=tags(unseen_info),
                         num_classes=ds.num_classes, name=ds.name)


def apply_heterogeneity(ds: Dataset, seen: list[np.ndarray], unseen: list[np.ndarray],
                        cfg: RunConfig) -> tuple[np.ndarray | None, dict, dict]:
    """Label flipping and Byzantine tags from `cfg`: (labels or None, info, unseen_info).

    Uses its own seeded stream, so the partition does not depend on these options.
    """
    rng = np.random.default_rng([data_seed(cfg), 0xF11B])
    labels, info, uinfo = None, {}, {}
    if cfg.label_flip_fraction > 0:
        fs = heterogeneity.choose_fraction(len(seen), cfg.label_flip_fraction, rng)
        fu = heterogeneity.choose_fraction(len(unseen), cfg.label_flip_fraction, rng)
        labels, _ = heterogeneity.flip_labels(ds.y, seen, fs, ds.num_classes, cfg.flip_ratio, rng)
        labels, _ = heterogeneity.flip_labels(labels, unseen, fu, ds.num_classes, cfg.flip_ratio,
                                              rng)
        info["flipped"], uinfo["flipped"] = fs, fu
        # group tag (0 clean / 1 flipped) for --selector stratified
        info["group"], uinfo["group"] = fs.astype(np.int32), fu.astype(np.int32)
    if cfg.byzantine_fraction > 0:
        info["byzantine"] = heterogeneity.choose_fraction(len(seen), cfg.byzantine_fraction, rng)
    return labels, info, uinfo
