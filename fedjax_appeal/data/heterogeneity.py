"""Heterogeneity generators on the client partition (numpy, seeded).

* Label flipping (MaxFL/IncFL): a fraction of clients get their labels remapped by a fixed
  random permutation without fixed points on a chosen share of the classes (`flip_ratio`
  = 1.0 deranges all classes: every label of a flipped client is wrong).
* Client tags: an exact fraction of clients is chosen (flipped, Byzantine, ...).

Each function takes its own `numpy.random.Generator`, so turning a generator on does not
change the partition drawn before it.
"""

from __future__ import annotations

import numpy as np

from ..core.fields import option, when

# The generated class-imbalanced pool (`--imbalance-ratios`, data/generated.py): the options
# that configure it apply only with it.
IMBALANCED = when(lambda cfg: bool(cfg.imbalance_ratios),
                  "it configures the generated imbalanced pool (--imbalance-ratios)")
# label flipping: on with flipped clients; its own option applies only then
LABEL_FLIP_FRACTION = option(
    "label_flip_fraction", 0.0, "fraction of clients flipped", group="data", ge=0,
    le=1, data=True)
FLIP_PROTOCOL = option(
    "flip_protocol", "static", "label flipping of the generated pool: static = a fixed "
    "fraction of clients always flipped; bernoulli = every sampled client flipped with "
    "probability --label-flip-fraction each round; fixed = round(fraction x cohort) sampled "
    "clients flipped each round", ("static", "bernoulli", "fixed"), applies=IMBALANCED,
    group="data", data=True)  # (an algorithm that draws its own cohort refuses it: --selector)
FLIPPING = when(lambda cfg: cfg.label_flip_fraction != 0,
                "it configures label flipping (--label-flip-fraction > 0)")
FLIP_RATIO = option("flip_ratio", 1.0, "share of the classes a flipped client has wrong (1.0 = "
                    "all)", applies=FLIPPING, group="data", ge=0, le=1, data=True)


def choose_fraction(num_clients: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A [num_clients] bool mask with exactly round(fraction * num_clients) True entries."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1] (got {fraction})")
    k = int(round(fraction * num_clients))
    mask = np.zeros(num_clients, bool)
    mask[rng.choice(num_clients, k, replace=False)] = True
    return mask


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of range(n) with no fixed point (n >= 2)."""
    if n < 2:
        raise ValueError("a derangement needs at least 2 elements")
    while True:  # acceptance probability ~ 1/e
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return p


def flip_map(num_classes: int, flip_ratio: float, rng: np.random.Generator) -> np.ndarray:
    """Label map [C]: round(flip_ratio * C) classes (at least 2 if > 0) deranged among
    themselves, every other class kept."""
    if not 0.0 <= flip_ratio <= 1.0:
        raise ValueError(f"flip ratio must be in [0, 1] (got {flip_ratio})")
    m = np.arange(num_classes)
    k = int(round(flip_ratio * num_classes))
    if k == 0:
        return m
    k = max(k, 2)
    chosen = rng.choice(num_classes, k, replace=False)
    m[chosen] = chosen[derangement(k, rng)]
    return m


def flip_labels(labels: np.ndarray, clients: list[np.ndarray], flipped: np.ndarray,
                num_classes: int, flip_ratio: float, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    """Labels with every flipped client's rows remapped by its own `flip_map`.

    Returns (new labels [N], maps [M, C] with the identity for clean clients).
    """
    out = np.array(labels, copy=True)
    maps = np.tile(np.arange(num_classes), (len(clients), 1))
    for k in np.flatnonzero(flipped):
        maps[k] = flip_map(num_classes, flip_ratio, rng)
        out[clients[k]] = maps[k][labels[clients[k]]]
    return out, maps


# --- exponential class imbalance (Exp-alpha; LDAM recipe) -------------------------

IMBALANCE_RATIOS = (1.0, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001)


def imbalance_counts(n_max: int, ratio: float, num_classes: int) -> np.ndarray:
    """Per-class counts n_c = floor(n_max * ratio^(c / (C - 1))), c = 0..C-1.

    The long-tailed recipe of LDAM (Cao et al. 2019, "Learning Imbalanced Datasets with
    Label-Distribution-Aware Margin Loss"): class 0 keeps n_max rows, the last class
    n_max * ratio. ratio = 1 is balanced.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"imbalance ratio must be in (0, 1] (got {ratio})")
    c = np.arange(num_classes, dtype=np.float64)
    expo = c / max(num_classes - 1, 1)
    # a tiny relative slack so that exact products (5000 * 1.0) are not floored to 4999
    return np.floor(n_max * ratio ** expo * (1 + 1e-12)).astype(np.int64)


def equal_size_counts(size: int, ratio: float, num_classes: int,
                      order: np.ndarray | None = None) -> np.ndarray:
    """Per-class counts of an equal-size imbalanced client: `size` rows in all, shares
    ∝ ratio^(r / (C - 1)) by rank r = 0..C-1 (largest-remainder rounding).

    The Exp-alpha paper's clients all hold the same amount of data (s_i = 1 in its
    analysis, so proportional weights are uniform) and differ only in their class mix,
    the Imbalanced-CIFAR shape of Cao et al. 2019 with imbalance ratio `ratio` (smallest /
    largest class). `order[r]` is the class of rank r (default: class r), so `order[0]`
    is the client's largest class.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"imbalance ratio must be in (0, 1] (got {ratio})")
    if size < 1:
        raise ValueError(f"client size must be >= 1 (got {size})")
    shares = ratio ** (np.arange(num_classes, dtype=np.float64) / max(num_classes - 1, 1))
    by_rank = proportional_counts(shares, size)
    order = np.arange(num_classes) if order is None else np.asarray(order)
    out = np.zeros(num_classes, np.int64)
    out[order] = by_rank
    return out


def class_orders(num_clients: int, num_classes: int, major: str, rng: np.random.Generator
                 ) -> np.ndarray:
    """[M, C] class order per client: 'shared' = 0..C-1 for every client (class 0 is
    everyone's largest class), 'random' = an independent random permutation per client
    (a random largest class, and a random order of the others)."""
    if major == "shared":
        return np.tile(np.arange(num_classes), (num_clients, 1))
    if major == "random":
        return np.stack([rng.permutation(num_classes) for _ in range(num_clients)])
    raise ValueError(f"imbalance major must be shared or random (got {major!r})")


def parse_ratio_spec(spec: str) -> list[tuple[float, int]]:
    """'1.0x4,0.01x3,0.1x3' -> [(1.0, 4), (0.01, 3), (0.1, 3)]; '0.5,0.1' -> counts 1."""
    out = []
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        r, _, n = part.partition("x")
        try:
            ratio, count = float(r), int(n) if n else 1
        except ValueError:
            raise ValueError(f"bad imbalance entry '{part}': use RATIOxCOUNT, e.g. 0.01x3"
                             ) from None
        if not 0.0 < ratio <= 1.0 or count < 1:
            raise ValueError(f"bad imbalance entry '{part}': ratio in (0, 1], count >= 1")
        out.append((ratio, count))
    if not out:
        raise ValueError("empty imbalance specification")
    return out


def client_ratios(num_clients: int, spec: str, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Imbalance ratio and group id of every client of a generated pool.

    `spec` = 'random': each client's ratio drawn uniformly from `IMBALANCE_RATIOS` (group
    = index in that tuple). Otherwise a composition 'r1xk1,r2xk2,...': the pool holds the
    groups in proportions k1 : k2 : ... (largest-remainder rounding), in random order.
    Returns (ratios [M] float, groups [M] int, group ratios [G]).
    """
    if spec == "random":
        g = rng.integers(0, len(IMBALANCE_RATIOS), num_clients)
        return np.asarray(IMBALANCE_RATIOS)[g], g, list(IMBALANCE_RATIOS)
    comp = parse_ratio_spec(spec)
    counts = proportional_counts([k for _, k in comp], num_clients)
    g = rng.permutation(np.repeat(np.arange(len(comp)), counts))
    ratios = np.asarray([r for r, _ in comp])
    return ratios[g], g, [float(r) for r in ratios]


def proportional_counts(weights: list[int] | np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to `weights` summing to `total` (largest remainder)."""
    w = np.asarray(weights, np.float64)
    exact = w / w.sum() * total
    base = np.floor(exact).astype(np.int64)
    rest = total - base.sum()
    order = np.argsort(-(exact - base), kind="stable")
    base[order[:rest]] += 1
    return base


def deal_counts(pools: list[np.ndarray], counts: np.ndarray, rng: np.random.Generator
                ) -> tuple[list[np.ndarray], bool]:
    """Index arrays for clients wanting `counts[k, c]` rows of class c from `pools[c]`.

    Disjoint across clients when every class pool is large enough (dealt from a shuffled
    pool); otherwise each client draws its rows independently without replacement
    (clients may then share rows, as the seed's clients re-sampled from one training set).
    Returns (per-client sorted index arrays, disjoint?).
    """
    need = counts.sum(axis=0)
    disjoint = all(need[c] <= len(pools[c]) for c in range(len(pools)))
    if not disjoint and any(counts[:, c].max() > len(pools[c]) for c in range(len(pools))):
        raise ValueError("a client needs more rows of a class than the dataset holds")
    shuffled = [rng.permutation(p) for p in pools]
    pos = np.zeros(len(pools), np.int64)
    out = []
    for k in range(counts.shape[0]):
        parts = []
        for c, p in enumerate(shuffled):
            n = int(counts[k, c])
            if disjoint:
                parts.append(p[pos[c]:pos[c] + n])
                pos[c] += n
            else:
                parts.append(rng.choice(p, n, replace=False))
        out.append(np.sort(np.concatenate(parts)))
    return out, disjoint


# --- label-flip corruption rate per cohort -----------------------------------------

def cohort_group_counts(group_sizes: list[int] | np.ndarray, cohort: int) -> list[int]:
    """How many cohort slots each group gets so that a cohort mirrors the pool's mix.

    E.g. a pool of 2/3 clean and 1/3 flipped clients with a cohort of 6 gives [4, 2]:
    a deterministic corruption count per cohort (the seed's "1/3 of the sampled clients").
    """
    return [int(c) for c in proportional_counts(group_sizes, cohort)]
