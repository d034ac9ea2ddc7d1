"""Data layer: sources (numpy in), partitioners, heterogeneity generators, and
`load_federated`, which turns them into a run's on-device `core.arrays.FederatedData`."""

from __future__ import annotations

import numpy as np

from ..core.arrays import FederatedData
from ..core.config import ConfigError, Options, RunConfig
from . import heterogeneity, partition, sources, text  # noqa: F401  (public submodules)
from .generated import load_generated
from .pool import (
    apply_heterogeneity,
    build_federated,
    data_fields,
    data_options,
    data_seed,
    load_dataset,
    partition_clients,
)
from .sources import Dataset

__all__ = ["Dataset", "build_federated", "data_fields", "data_options", "data_seed",
           "load_dataset", "load_federated", "partition", "partition_clients", "sources", "text"]


def load_federated(opts: RunConfig | Options) -> tuple[FederatedData, Dataset]:
    """Load, partition and split the data of a run; everything seeded by `data_seed(opts)`.

    `opts`: the run's configuration, or options holding its data fields
    (`data_fields`); the data layer (and every registered dataset and
    partition) reads only those.
    """
    opts = data_options(opts)
    if opts.imbalance_ratios or opts.dataset == "digits":  # generated client pools
        return load_generated(opts)
    if opts.flip_protocol != "static" or opts.imbalance_size or opts.global_test_per_class:
        raise ConfigError("--flip-protocol bernoulli|fixed, --imbalance-size and "
                          "--global-test-per-class need a generated pool: add "
                          "--imbalance-ratios (e.g. 1.0 for balanced clients)")
    rng = np.random.default_rng([data_seed(opts), 0xDA7A])
    ds = load_dataset(opts, rng)
    if opts.max_samples and opts.max_samples < len(ds):
        ds = ds.subset(np.sort(rng.choice(len(ds), opts.max_samples, replace=False)))
    seen, unseen = partition_clients(ds, opts, rng)
    labels, info, uinfo = apply_heterogeneity(ds, seen, unseen, opts)
    if opts.partition == "clusters":  # cluster id per client (original labels): diagnostics
        ids = partition.client_clusters(ds.y, list(seen) + list(unseen))
        info["cluster"], uinfo["cluster"] = ids[:len(seen)], ids[len(seen):]
    if text.is_text(ds):  # token tasks: the tokenizer from the seen clients' train rows
        return text.build_text_federated(ds, seen, unseen, opts, rng, labels, info, uinfo)
    return build_federated(ds, seen, unseen, opts.train_fraction, rng, labels, info, uinfo), ds
