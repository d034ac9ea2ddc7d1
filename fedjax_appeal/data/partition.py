"""Partitioners: plain numpy functions of (labels, rng, ...) -> one index array per client.

Every partitioner returns disjoint index arrays into the dataset, each of at least
`min_samples` rows, sorted ascending. The seen/unseen split and the per-client train/test
split are applied on top (`split_seen_unseen`, `train_test_split`).
"""

from __future__ import annotations

import math

import numpy as np

from ..core.config import ConfigError
from ..core.fields import component, option, when
from ..core.registry import Registry

# `--partition` name -> fn(ds, total, opts, rng) -> [index array per client], or None for
# the built-in ones below (`pool.partition_clients`); plugins add theirs
# (`pool.register_partition`)
PARTITIONS = Registry("partition", dict.fromkeys(("dirichlet", "clusters", "classes",
                                                  "natural")))
option("partition", "dirichlet", "how samples are split over clients", PARTITIONS,
       group="data", data=True)
option("min_samples", 10, "minimum samples per client", group="data", ge=0,
       data=True)
option("train_fraction", 0.6, "per-client train share; the rest is the client's test split",
       group="data", gt=0, lt=1, data=True)
# the options of each partition (the Dirichlet alpha also not with the generated imbalanced
# pool, which builds its own clients)
CLUSTERS = component("partition", "clusters")
option("alpha", 0.5, "Dirichlet concentration", applies=when(
    lambda cfg: not cfg.imbalance_ratios, "it is the Dirichlet concentration, and "
    "--imbalance-ratios builds its own pool") & component("partition", "dirichlet"),
    group="data", gt=0, data=True)
option("num_clusters", 5, "number of label clusters (partition=clusters)", applies=CLUSTERS,
       group="data", ge=1, data=True)
option("labels_per_cluster", 2, "disjoint labels per cluster (partition=clusters)",
       applies=CLUSTERS, group="data", ge=1, data=True)
option("cluster_labels", "random", "labels of each cluster (partition=clusters): random (a "
       "seeded permutation) or pairs (cluster c gets labels c*L .. c*L+L-1: (0,1), (2,3), ...)",
       ("random", "pairs"), applies=CLUSTERS, group="data", data=True)
option("classes_per_client", 3, "classes per client (partition=classes)",
       applies=component("partition", "classes"), group="data", ge=1, data=True)


def dirichlet(labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator,
              min_samples: int = 10, max_tries: int = 1000) -> list[np.ndarray]:
    """Label-skewed split: for each class, client shares ~ Dirichlet(alpha * 1_M).

    The usual recipe (Hsu et al. 2019; Wang et al. 2020): samples of class c are cut into M
    pieces with proportions drawn from Dir(alpha). Redrawn until every client holds at
    least `min_samples` rows.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if alpha <= 0:
        raise ConfigError(f"--alpha must be > 0 for the Dirichlet partition (got {alpha})")
    if num_clients * min_samples > n:
        raise ConfigError(f"{n} samples cannot give {num_clients} clients {min_samples} samples "
                          "each: lower --clients/--unseen-clients or --min-samples")
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    short = 0  # clients below min_samples, summed over the draws so far
    for t in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            p = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(int)
            for k, piece in enumerate(np.split(idx, cuts)):
                parts[k].append(piece)
        out = [np.sort(np.concatenate(p)) for p in parts]
        n_short = sum(len(o) < min_samples for o in out)
        if n_short == 0:
            return out
        short += n_short
        if hopeless(short, t + 1, max_tries):
            raise ConfigError(
                f"Dirichlet({alpha}) over {num_clients} clients leaves clients with fewer than "
                f"{min_samples} of the {n} samples ({n // num_clients} a client on average): "
                f"{short / (t + 1):.0f} fell short per draw on average in the first {t + 1} "
                f"draws, so none of {max_tries} draws would do; use fewer clients "
                "(--clients, --unseen-clients), raise --alpha or lower --min-samples")
    raise ConfigError(f"Dirichlet({alpha}) over {num_clients} clients gave a client fewer than "
                      f"{min_samples} of the {n} samples ({n // num_clients} a client on "
                      f"average) in {max_tries} draws: use fewer clients (--clients, "
                      "--unseen-clients), raise --alpha or lower --min-samples")


# draws of the Dirichlet partition after which a hopeless one is refused (`hopeless`)
FIRST_DRAWS = 10


def hopeless(short: int, draws: int, max_tries: int, chance: float = 0.01) -> bool:
    """Whether the remaining draws of a partition that redraws until no client falls short
    would succeed with a chance below `chance`, judged after `FIRST_DRAWS` draws.

    `short` clients fell short over `draws` draws. The number short in a draw is a sum of
    many rare events, about Poisson with the observed mean m, so a draw succeeds with
    probability about exp(-m), and the expected successes of the draws left are
    (max_tries - draws) exp(-m). A partition that has to be refused is refused after
    `FIRST_DRAWS` draws instead of all `max_tries` (minutes for thousands of clients).
    """
    if draws < FIRST_DRAWS:
        return False
    return (max_tries - draws) * math.exp(-short / draws) < chance


def cluster_label_sets(classes: np.ndarray, num_clusters: int, labels_per_cluster: int,
                       rng: np.random.Generator, order: str = "random") -> np.ndarray:
    """[C, L] labels of each cluster: `pairs` takes the sorted classes in order (cluster c
    gets classes c*L .. c*L+L-1, i.e. (0, 1), (2, 3), ... for L = 2); `random` takes them
    after a seeded permutation."""
    classes = np.sort(np.asarray(classes))
    need = num_clusters * labels_per_cluster
    if order == "pairs":
        return classes[:need].reshape(num_clusters, labels_per_cluster)
    if order != "random":
        raise ConfigError(f"--cluster-labels must be random or pairs (got {order!r})")
    return rng.permutation(classes)[:need].reshape(num_clusters, labels_per_cluster)


def client_clusters(labels: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """Cluster id of each client of a `clusters` partition, from the (original) labels.

    Labels held by one client belong to one cluster; clusters are the connected groups of
    labels that co-occur in some client, numbered by their smallest label (with `pairs`
    labels, cluster c is the one holding labels c*L .. c*L+L-1). Clients with no rows get -1.
    """
    labels = np.asarray(labels)
    parent = {}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    sets = [np.unique(labels[np.asarray(idx, np.int64)]) for idx in parts]
    for ls in sets:
        for lab in ls:
            parent.setdefault(int(lab), int(lab))
        for lab in ls[1:]:
            ra, rb = find(int(ls[0])), find(int(lab))
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    roots = sorted({find(a) for a in parent})
    rank = {r: i for i, r in enumerate(roots)}
    return np.array([rank[find(int(ls[0]))] if ls.size else -1 for ls in sets], np.int32)


def clusters(labels: np.ndarray, num_clients: int, num_clusters: int, labels_per_cluster: int,
             rng: np.random.Generator, min_samples: int = 10, label_order: str = "random"
             ) -> list[np.ndarray]:
    """Label clusters: C clusters own L disjoint labels each; clients join a random cluster.

    The MaxFL/IncFL FMNIST setting is 5 clusters x 2 labels. Labels are assigned to clusters
    by `cluster_label_sets` (`label_order`: random or pairs); clients are assigned to
    clusters at random with balanced sizes (each cluster gets floor or ceil of M/C
    clients); inside a cluster the cluster's samples are shuffled and dealt out evenly, so
    clients of one cluster are homogeneous.
    """
    labels = np.asarray(labels)
    classes = np.unique(labels)
    need = num_clusters * labels_per_cluster
    if num_clusters < 1 or labels_per_cluster < 1 or need > len(classes):
        raise ConfigError(f"{num_clusters} clusters x {labels_per_cluster} labels needs {need} "
                          f"distinct labels, the dataset has {len(classes)}: lower "
                          "--num-clusters or --labels-per-cluster")
    if num_clients < num_clusters:
        raise ConfigError(f"{num_clients} clients cannot fill {num_clusters} clusters: "
                          "raise --clients or lower --num-clusters")
    cluster_labels = cluster_label_sets(classes, num_clusters, labels_per_cluster, rng,
                                        label_order)
    assignment = rng.permutation(np.arange(num_clients) % num_clusters)
    out: list[np.ndarray] = [np.empty(0, np.int64)] * num_clients
    for c in range(num_clusters):
        members = np.flatnonzero(assignment == c)
        idx = rng.permutation(np.flatnonzero(np.isin(labels, cluster_labels[c])))
        for k, piece in zip(members, np.array_split(idx, len(members)), strict=True):
            out[k] = np.sort(piece)
    small = min(len(o) for o in out)
    if small < min_samples:
        raise ConfigError(f"a cluster client got {small} < {min_samples} samples: lower --clients "
                          "or --min-samples")
    return out


def classes_per_client(labels: np.ndarray, num_clients: int, k: int, rng: np.random.Generator,
                       min_samples: int = 10) -> list[np.ndarray]:
    """Each client holds exactly k distinct classes (SubTrunc uses k = 3).

    Classes are dealt so that every class is used about equally often: the client-class
    slots are filled from a shuffled repeated sequence of classes, redrawn when a client
    would get the same class twice. The samples of each class are then split evenly
    among the clients that hold it.
    """
    labels = np.asarray(labels)
    classes = np.unique(labels)
    if not 1 <= k <= len(classes):
        raise ConfigError(f"--classes-per-client must be in [1, {len(classes)}] (got {k})")
    picks = None
    for _ in range(1000):
        seq = rng.permutation(np.resize(classes, num_clients * k)).reshape(num_clients, k)
        if all(len(set(row)) == k for row in seq):
            picks = seq
            break
    if picks is None:  # fall back to independent draws (always distinct)
        picks = np.stack([rng.choice(classes, k, replace=False) for _ in range(num_clients)])
    out: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in classes:
        holders = np.flatnonzero((picks == c).any(axis=1))
        if len(holders) == 0:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for h, piece in zip(holders, np.array_split(idx, len(holders)), strict=True):
            out[h].append(piece)
    res = [np.sort(np.concatenate(p)) for p in out]
    small = min(len(o) for o in res)
    if small < min_samples:
        raise ConfigError(f"a client got {small} < {min_samples} samples: lower --clients or "
                          "--min-samples")
    return res


def natural(groups: np.ndarray, min_samples: int = 10) -> list[np.ndarray]:
    """Natural clients (FEMNIST writers, Sent140 users): one client per group id.

    Groups with fewer than `min_samples` rows are dropped; clients come in ascending id order.
    """
    groups = np.asarray(groups)
    order = np.argsort(groups, kind="stable")
    ids, starts, counts = np.unique(groups[order], return_index=True, return_counts=True)
    return [np.sort(order[s:s + c]) for s, c in zip(starts, counts, strict=True)
            if c >= min_samples]


def split_seen_unseen(clients: list[np.ndarray], num_seen: int, num_unseen: int,
                      rng: np.random.Generator, shuffle: bool = True
                      ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Draw `num_seen` seen and `num_unseen` disjoint unseen clients from one pool."""
    if num_seen + num_unseen > len(clients):
        raise ConfigError(f"only {len(clients)} clients are available, {num_seen} seen + "
                          f"{num_unseen} unseen were asked for: lower --clients/--unseen-clients "
                          "or --min-samples")
    order = rng.permutation(len(clients)) if shuffle else np.arange(len(clients))
    seen = [clients[i] for i in order[:num_seen]]
    unseen = [clients[i] for i in order[num_seen:num_seen + num_unseen]]
    return seen, unseen


def train_test_split(clients: list[np.ndarray], train_fraction: float,
                     rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split each client's rows at random into train (share `train_fraction`) and test.

    Each side keeps at least one row, so every client has both splits.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ConfigError(f"--train-fraction must be in (0, 1) (got {train_fraction})")
    train, test = [], []
    for idx in clients:
        if len(idx) < 2:
            raise ConfigError("a client with fewer than 2 samples cannot be split into train and "
                              "test: raise --min-samples")
        p = rng.permutation(idx)
        n_tr = int(round(train_fraction * len(idx)))
        n_tr = min(max(n_tr, 1), len(idx) - 1)
        train.append(np.sort(p[:n_tr]))
        test.append(np.sort(p[n_tr:]))
    return train, test
