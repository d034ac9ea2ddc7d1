"""`from_arrays`: a federation from in-memory arrays in one call, the same as the file of
the same arrays gives through `load_federated` (`--dataset npz:PATH`), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import fedjax_appeal as fa
from fedjax_appeal.core.config import ConfigError, RunConfig
from fedjax_appeal.data import load_federated


def arrays(n=600, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(0, 256, (n, 4, 4)).astype(np.uint8)
    x[:, 0, 0] = y  # each row carries its label
    return x, y


def splits(data):
    return {k: (np.asarray(v.x), np.asarray(v.y), np.asarray(v.offset), np.asarray(v.count))
            for k, v in data.splits().items()}


@pytest.mark.parametrize("part,cfg", [
    (fa.Dirichlet(0.3), dict(partition="dirichlet", alpha=0.3)),
    (fa.Clusters(2, 2, "pairs"), dict(partition="clusters", num_clusters=2,
                                      labels_per_cluster=2, cluster_labels="pairs")),
    (fa.ClassesPerClient(2), dict(partition="classes", classes_per_client=2)),
])
def test_the_same_federation_as_the_npz_file_of_the_same_arrays(tmp_path, part, cfg):
    x, y = arrays()
    np.savez(tmp_path / "mine.npz", x=x, y=y)
    ref, _ = load_federated(RunConfig(dataset=f"npz:{tmp_path / 'mine.npz'}", clients=8,
                                      unseen_clients=4, min_samples=5, seed=3, **cfg))
    data = fa.from_arrays(x, y, partition=part, clients=8, unseen_clients=4, min_samples=5,
                          seed=3)
    assert data.num_clients == 8 and data.num_unseen == 4 and data.num_classes == 5
    a, b = splits(data), splits(ref)
    assert a.keys() == b.keys() == {"train", "test", "unseen_train", "unseen_test"}
    for k in a:
        for u, v in zip(a[k], b[k], strict=True):
            np.testing.assert_array_equal(u, v)
    other = fa.from_arrays(x, y, partition=part, clients=8, unseen_clients=4, min_samples=5,
                           seed=4)
    assert not np.array_equal(np.asarray(other.train.count), np.asarray(data.train.count))


def test_client_ids_make_one_client_per_id():
    rng = np.random.default_rng(1)
    ids = np.repeat(np.arange(12), rng.integers(10, 30, 12))
    x = np.stack([ids, np.arange(len(ids))], axis=1).astype(np.float32)  # the id, the row
    y = rng.integers(0, 3, len(ids))
    data = fa.from_arrays(x, y, client_ids=ids, unseen_clients=3, train_fraction=0.5)
    assert data.num_clients == 9 and data.num_unseen == 3
    seen_ids = []
    for tr, te in ((data.train, data.test), (data.unseen_train, data.unseen_test)):
        for k in range(tr.num_clients):
            xa, _ = tr.client_numpy(k)
            xb, _ = te.client_numpy(k)
            rows = np.concatenate([xa, xb])
            assert len(set(rows[:, 0])) == 1  # one id per client, train and test alike
            cid = int(rows[0, 0])
            assert sorted(rows[:, 1].astype(int)) == list(np.flatnonzero(ids == cid))
            seen_ids.append(cid)
    assert sorted(seen_ids) == list(range(12))  # every id once, seen or unseen


@pytest.mark.parametrize("kw,msg", [
    (dict(), "give either partition=Dirichlet"),
    (dict(partition=fa.Dirichlet(0.5), client_ids=np.zeros(600)), "give either"),
    (dict(partition=fa.Dirichlet(0.5)), "give the number of clients: clients=N"),
    (dict(partition="dirichlet", clients=5), "partition must be Dirichlet"),
    (dict(client_ids=np.zeros(599)), "must have the same number of rows"),
    (dict(partition=fa.Dirichlet(0.5), clients=5, train_fraction=1.0), "train_fraction"),
    (dict(partition=fa.Dirichlet(0.5), clients=500), "cannot give 500 clients"),
])
def test_bad_input_is_refused_in_one_line(kw, msg):
    x, y = arrays()
    with pytest.raises(ConfigError, match=msg) as e:
        fa.from_arrays(x, y, **kw)
    assert "\n" not in str(e.value)


def test_labels_and_features_are_checked_like_a_file():
    x, y = arrays()
    with pytest.raises(ConfigError, match="non-negative integer class labels"):
        fa.from_arrays(x, y - 1, partition=fa.Dirichlet(0.5), clients=5)
    xf = x.astype(np.float64)
    xf[3, 1, 1] = np.nan
    with pytest.raises(ConfigError, match="NaN or infinite"):
        fa.from_arrays(xf, y, partition=fa.Dirichlet(0.5), clients=5)
    data = fa.from_arrays(x.astype(np.float64), y, partition=fa.Dirichlet(0.5), clients=5,
                          num_classes=7)
    assert data.train.x.dtype == np.float32 and data.num_classes == 7


@pytest.mark.data
def test_fashion_mnist_arrays_give_the_clients_of_a_default_run():
    """`from_arrays(*fashion_mnist(), Dirichlet(0.5), 100 + 100 clients)` is the federation
    of `fedjax-appeal run`'s defaults (the library's day-one data)."""
    data = fa.from_arrays(*fa.fashion_mnist(), partition=fa.Dirichlet(0.5), clients=100,
                          unseen_clients=100)
    ref, _ = load_federated(RunConfig())
    a, b = splits(data), splits(ref)
    assert a.keys() == b.keys()
    for k in a:
        for u, v in zip(a[k], b[k], strict=True):
            np.testing.assert_array_equal(u, v)
