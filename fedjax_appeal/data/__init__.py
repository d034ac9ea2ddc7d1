"""Data layer: sources (numpy in), partitioners, heterogeneity generators, and
`load_federated`, which turns them into a run's on-device `core.arrays.FederatedData`."""

from __future__ import annotations

import numpy as np

from ..core.arrays import FederatedData
from ..core.config import ConfigError, RunConfig, data_seed
from . import heterogeneity, partition, sources  # noqa: F401  (public submodules)
from .generated import load_generated
from .pool import apply_heterogeneity, build_federated, load_dataset, partition_clients
from .sources import Dataset

__all__ = ["Dataset", "load_dataset", "partition_clients", "build_federated", "load_federated",
           "partition", "sources"]


def load_federated(cfg: RunConfig) -> tuple[FederatedData, Dataset]:
    """Load, partition and split the data of a run; everything seeded by `data_seed(cfg)`."""
    if cfg.imbalance_ratios or cfg.dataset == "digits":  # generated client pools
        return load_generated(cfg)
    if cfg.flip_protocol != "static" or cfg.imbalance_size or cfg.global_test_per_class:
        raise ConfigError("--flip-protocol bernoulli|fixed, --imbalance-size and "
                          "--global-test-per-class need a generated pool: add "
                          "--imbalance-ratios (e.g. 1.0 for balanced clients)")
    rng = np.random.default_rng([data_seed(cfg), 0xDA7A])
    ds = load_dataset(cfg, rng)
    if cfg.max_samples and cfg.max_samples < len(ds):
        ds = ds.subset(np.sort(rng.choice(len(ds), cfg.max_samples, replace=False)))
    seen, unseen = partition_clients(ds, cfg, rng)
    labels, info, uinfo = apply_heterogeneity(ds, seen, unseen, cfg)
    if cfg.partition == "clusters":  # cluster id per client (original labels): diagnostics
        ids = partition.client_clusters(ds.y, list(seen) + list(unseen))
        info["cluster"], uinfo["cluster"] = ids[:len(seen)], ids[len(seen):]
    return build_federated(ds, seen, unseen, cfg.train_fraction, rng, labels, info, uinfo), ds
