"""Generated client pools of the Exp-alpha seed: class-imbalanced clients, Digits domains.

* `imbalanced_federation`: a pool of `clients + unseen_clients` clients, each with an
  imbalance ratio (`heterogeneity.client_ratios`) and per-class train counts
  n_c = n_max ratio^(c/(C-1)) (LDAM recipe; class 0 is the head for every client, as in
  LDAM's long-tailed CIFAR-10). Each client's test split is balanced
  (`imbalance_test_per_class` rows per class, disjoint from every train row), so the mean
  test accuracy over clients estimates accuracy on the balanced global test set. The seed
  re-samples fresh clients every round; here a pool several times the cohort is generated
  once and a cohort is sampled from it each round (`--selector random|stratified`).
* `digits_federation`: domain shift (FedBN, Li et al. 2021): one domain per client,
  assigned round-robin from `--domains` (mnist, usps, mnistm), `domain_samples` rows each,
  all converted to 28x28x3 uint8 (USPS resized 16->28 bilinear, grey repeated to 3
  channels; MNIST-M resized 32->28). SVHN and SynthDigits of the FedBN/Exp-alpha Digits
  benchmark are not in the data directory.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..core.arrays import ClientArrays, FederatedData, on_device
from ..core.config import ConfigError, Options
from ..core.fields import option
from . import heterogeneity, partition, sources
from .pool import DATASETS, apply_heterogeneity, data_seed, load_dataset
from .sources import Dataset

DIGIT_DOMAINS = ("mnist", "usps", "mnistm")


def _federated(ds: Dataset, labels: np.ndarray, train: list[np.ndarray],
               test: list[np.ndarray], num_seen: int, info: dict, uinfo: dict,
               global_test: np.ndarray | None = None) -> FederatedData:

    fd = dict(train=ClientArrays.from_indices(ds.x, labels, train[:num_seen]),
              test=ClientArrays.from_indices(ds.x, labels, test[:num_seen]))
    if len(train) > num_seen:
        fd.update(unseen_train=ClientArrays.from_indices(ds.x, labels, train[num_seen:]),
                  unseen_test=ClientArrays.from_indices(ds.x, labels, test[num_seen:]))
    if global_test is not None and len(global_test):  # clean labels
        fd["global_test"] = ClientArrays.from_indices(ds.x, ds.y, [global_test])
    return FederatedData(**fd, info=on_device(info), unseen_info=on_device(uinfo),
                         num_classes=ds.num_classes, name=ds.name)


def _split_info(values: dict[str, np.ndarray], num_seen: int) -> tuple[dict, dict]:
    return ({k: v[:num_seen] for k, v in values.items()},
            {k: v[num_seen:] for k, v in values.items()})


def client_counts(opts: Options, ratios: np.ndarray, num_classes: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """[M, C] train rows per class of every generated client, and [M] its largest class.

    `--imbalance-size N`: N rows each, shares ∝ ratio^(r/(C-1)) over the client's class
    order (`--imbalance-major shared|random`); else LDAM counts n_max ratio^(c/(C-1)).
    """
    try:
        orders = heterogeneity.class_orders(len(ratios), num_classes, opts.imbalance_major, rng)
    except ValueError as e:
        raise ConfigError(f"--imbalance-major: {e}") from None
    if opts.imbalance_size > 0:
        counts = np.stack([heterogeneity.equal_size_counts(opts.imbalance_size, r, num_classes, o)
                           for r, o in zip(ratios, orders, strict=True)])
    else:
        counts = np.stack([heterogeneity.imbalance_counts(opts.imbalance_nmax, r, num_classes)[
            np.argsort(o)] for r, o in zip(ratios, orders, strict=True)])
        counts = np.maximum(counts, 0)
        counts[np.arange(len(ratios)), orders[:, 0]] = np.maximum(
            counts[np.arange(len(ratios)), orders[:, 0]], 1)  # at least one train row
    return counts, orders[:, 0]


def flipped_copies(ds: Dataset, labels: np.ndarray, train: list[np.ndarray],
                   test: list[np.ndarray], opts: Options
                   ) -> tuple[Dataset, np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Append a label-flipped copy of every client (`--flip-protocol bernoulli|fixed`).

    Client M + k holds the rows of client k with labels remapped by its own derangement
    (`heterogeneity.flip_map`, flip ratio `--flip-ratio`); the selector serves a sampled
    client k by its copy when the round flips it (`selection.flip_cohort`). Returns the
    extended dataset, labels and the 2M train / test index lists.
    """
    rng = np.random.default_rng([data_seed(opts), 0xF11B])
    xs, ys, tr2, te2 = [ds.x], [labels], list(train), list(test)
    start = len(ds)
    for tr, te in zip(train, test, strict=True):
        fmap = heterogeneity.flip_map(ds.num_classes, opts.flip_ratio, rng)
        rows = np.concatenate([tr, te])
        xs.append(ds.x[rows])
        ys.append(fmap[labels[rows]])
        tr2.append(start + np.arange(len(tr)))
        te2.append(start + len(tr) + np.arange(len(te)))
        start += len(rows)
    ext = dataclasses.replace(ds, x=np.concatenate(xs), y=np.concatenate([ds.y] + ys[1:]),
                              groups=None)
    return ext, np.concatenate(ys), tr2, te2


# The class-imbalanced pool: on with `--imbalance-ratios`; the options that configure it
# apply only then (`heterogeneity.IMBALANCED`).
IMBALANCED = heterogeneity.IMBALANCED
IMBALANCE_RATIOS = option(
    "imbalance_ratios", "", "generated pool of class-imbalanced clients: 'random' ratios, or a "
    "composition like '1.0x4,0.01x3' (n_c = n_max ratio^(c/(C-1))); '' = off", group="data",
    data=True)
IMBALANCE_SIZE = option(
    "imbalance_size", 0, "equal-size imbalanced clients: every generated client holds this "
    "many train rows, class shares ∝ ratio^(c/(C-1)) (0 = LDAM counts from "
    "--imbalance-nmax)", applies=IMBALANCED, group="data", ge=0, data=True)
GLOBAL_TEST_PER_CLASS = option(
    "global_test_per_class", 0, "generated pools: hold out this many rows per class as a "
    "balanced global test set (test_acc_global); 0 = none", applies=IMBALANCED, group="data",
    ge=0, data=True)
option("imbalance_nmax", 100, "rows of the largest class of each imbalanced client (n_max)",
       applies=IMBALANCED, group="data", ge=1, data=True)
option("imbalance_test_per_class", 20, "balanced test rows per class of each generated client "
       "(its test split; a proxy for the global test set)", applies=IMBALANCED, group="data",
       ge=1, data=True)
option("imbalance_major", "shared", "largest class of each generated imbalanced client: class "
       "0 for all (shared) or drawn per client (random; the other classes' order too)",
       ("shared", "random"), applies=IMBALANCED, group="data", data=True)


def imbalanced_federation(ds: Dataset, opts: Options, rng: np.random.Generator
                          ) -> FederatedData:
    """A pool of class-imbalanced clients with balanced test splits (see module doc)."""
    total = opts.clients + opts.unseen_clients
    num_classes = ds.num_classes
    try:
        ratios, groups, _ = heterogeneity.client_ratios(total, opts.imbalance_ratios, rng)
    except ValueError as e:
        raise ConfigError(f"--imbalance-ratios: {e}") from None
    t, g = opts.imbalance_test_per_class, opts.global_test_per_class
    if g < 0 or t < 0:
        raise ConfigError("--imbalance-test-per-class and --global-test-per-class must be >= 0")
    counts, majors = client_counts(opts, ratios, num_classes, rng)
    pools = [rng.permutation(np.flatnonzero(ds.y == c)) for c in range(num_classes)]
    need = counts.max(axis=0)
    if any(len(p) < g + total * t + need[c] for c, p in enumerate(pools)):
        raise ConfigError(f"{total} clients x {t} test rows per class + {g} global test rows "
                          f"per class + the largest client class exceed a class of {ds.name}: "
                          "lower --imbalance-test-per-class, --global-test-per-class, "
                          "--imbalance-size / --imbalance-nmax or --clients")
    global_test = np.sort(np.concatenate([p[:g] for p in pools])) if g else None
    test_pools = [p[g:g + total * t] for p in pools]
    train_pools = [p[g + total * t:] for p in pools]
    if t == 0:
        raise ConfigError("--imbalance-test-per-class must be >= 1 (each client's test split)")
    test = [np.sort(np.concatenate([tp[k * t:(k + 1) * t] for tp in test_pools]))
            for k in range(total)]
    train, disjoint = heterogeneity.deal_counts(train_pools, counts, rng)
    info, uinfo = _split_info({"imbalance_ratio": ratios.astype(np.float32),
                               "imbalanced": ratios < 1.0,
                               "group": groups.astype(np.int32),
                               "major": majors.astype(np.int32)}, opts.clients)
    labels = ds.y
    if opts.flip_protocol != "static":
        if opts.label_flip_fraction <= 0:
            raise ConfigError(f"--flip-protocol {opts.flip_protocol} needs "
                              "--label-flip-fraction p > 0 (the flip probability / share)")
        if opts.unseen_clients:
            raise ConfigError(f"--flip-protocol {opts.flip_protocol} needs --unseen-clients 0")
        ds, labels, train, test = flipped_copies(ds, labels, train, test, opts)
        info = {k: np.concatenate([v, v]) for k, v in info.items()}
        info["flipped"] = np.repeat([False, True], opts.clients)
        return _federated(ds, labels, train, test, 2 * opts.clients, info, {}, global_test)
    if opts.label_flip_fraction > 0:
        if not disjoint:
            raise ConfigError("label flipping needs disjoint clients: lower --imbalance-nmax "
                              "or --clients so that the pool fits the dataset")
        whole = [np.sort(np.concatenate([a, b])) for a, b in zip(train, test, strict=True)]
        lab, finfo, fu = apply_heterogeneity(ds, whole[:opts.clients], whole[opts.clients:], opts)
        labels = ds.y if lab is None else lab
        info.update({k: v for k, v in finfo.items() if k != "group"})
        uinfo.update({k: v for k, v in fu.items() if k != "group"})
    return _federated(ds, labels, train, test, opts.clients, info, uinfo, global_test)


def _to_rgb28(x: np.ndarray) -> np.ndarray:
    """uint8 images [N, H, W] or [N, H, W, 3] -> [N, 28, 28, 3]."""
    if x.shape[1:3] != (28, 28):
        x = sources.resize_images(x, (28, 28))
    if x.ndim == 3:
        x = np.repeat(x[..., None], 3, axis=-1)
    return np.ascontiguousarray(x, np.uint8)


def digits_federation(opts: Options, rng: np.random.Generator
                      ) -> tuple[FederatedData, Dataset]:
    """One Digits domain per client (see module doc); returns (data, pooled dataset)."""
    names = [d.strip() for d in opts.domains.split(",") if d.strip()]
    bad = [d for d in names if d not in DIGIT_DOMAINS]
    if not names or bad:
        raise ConfigError(f"--domains must be a comma list of {', '.join(DIGIT_DOMAINS)} "
                          f"(got {opts.domains!r}); SVHN and SynthDigits are not available")
    total = opts.clients + opts.unseen_clients
    dom = np.arange(total) % len(names)
    n = opts.domain_samples
    if n < 2:
        raise ConfigError("--domain-samples must be >= 2")
    xs, ys, clients, start = [], [], [], 0
    loaders = {"mnist": sources.load_mnist, "usps": sources.load_usps,
               "mnistm": sources.load_mnistm}
    per_client: list[np.ndarray] = [np.empty(0, np.int64)] * total
    for d, name in enumerate(names):
        members = np.flatnonzero(dom == d)
        src = loaders[name](opts.data_dir or None)
        need = len(members) * n
        if need > len(src):
            raise ConfigError(f"{len(members)} clients x {n} rows exceed {name} ({len(src)} "
                              "rows): lower --domain-samples or --clients")
        pick = rng.choice(len(src), need, replace=False)
        xs.append(_to_rgb28(src.x[pick]))
        ys.append(src.y[pick])
        for j, k in enumerate(members):
            per_client[k] = start + np.arange(j * n, (j + 1) * n)
        start += need
    x, y = np.concatenate(xs), np.concatenate(ys)
    mean, std = sources._image_stats(x, 1.0 / 255.0)
    ds = Dataset("digits", x, y.astype(np.int64), 10, None, 1.0 / 255.0, mean, std)
    clients = per_client
    seen, unseen = clients[:opts.clients], clients[opts.clients:]
    labels, finfo, fu = apply_heterogeneity(ds, seen, unseen, opts)
    tr, te = partition.train_test_split(clients, opts.train_fraction, rng)
    info, uinfo = _split_info({"domain": dom.astype(np.int32), "group": dom.astype(np.int32)},
                              opts.clients)
    info.update({k: v for k, v in finfo.items() if k != "group"})
    uinfo.update({k: v for k, v in fu.items() if k != "group"})
    return _federated(ds, ds.y if labels is None else labels, tr, te, opts.clients, info,
                      uinfo), ds


def load_generated(opts: Options) -> tuple[FederatedData, Dataset]:
    """The federation of a generated pool (`--imbalance-ratios` or `--dataset digits`)."""
    rng = np.random.default_rng([data_seed(opts), 0xE7A])
    if opts.dataset == "digits":
        if opts.imbalance_ratios:
            raise ConfigError("--imbalance-ratios does not combine with --dataset digits")
        fed, ds = digits_federation(opts, rng)
        ds = dataclasses.replace(ds, model=DATASETS["digits"].model)
        if sources.check_dataset(ds, opts.num_classes).num_classes != ds.num_classes:
            raise ConfigError(f"--num-classes {opts.num_classes} does not apply to --dataset "
                              f"digits ({ds.num_classes} classes): drop it")
        return fed, ds
    ds = load_dataset(opts, rng)
    if opts.max_samples and opts.max_samples < len(ds):
        ds = ds.subset(np.sort(rng.choice(len(ds), opts.max_samples, replace=False)))
    return imbalanced_federation(ds, opts, rng), ds
