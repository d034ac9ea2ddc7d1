"""`--data-seed`: the data (partition, split, generated clients) follow it and only it; the
training seed no longer moves the partition; a sweep can grid it; the sweep title names every
gridded algorithm."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedjax_appeal.cli.commands import main
from fedjax_appeal.cli.sweep import sweep_title
from fedjax_appeal.core.config import RunConfig
from fedjax_appeal.data import load_federated

BASE = RunConfig(dataset="synthetic", clients=6, unseen_clients=2, partition="natural",
                 min_samples=4)


def arrays(cfg):
    d, _ = load_federated(cfg)
    return [np.asarray(a) for s in (d.train, d.test, d.unseen_train)
            for a in (s.x, s.y, s.count)]


def same(a, b):
    return all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_data_follow_the_data_seed_not_the_training_seed():
    ref = arrays(BASE.replace(seed=0))
    assert same(arrays(BASE.replace(seed=0, data_seed=0)), ref)  # -1 means --seed
    assert same(arrays(BASE.replace(seed=5, data_seed=0)), ref)  # training seed moves nothing
    assert not same(arrays(BASE.replace(seed=0, data_seed=1)), ref)
    assert same(arrays(BASE.replace(seed=1)), arrays(BASE.replace(seed=7, data_seed=1)))


TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "0", "--cohort", "3",
        "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every", "1",
        "--min-samples", "4", "--partition", "natural", "--no-appeal"]


def test_sweep_over_data_seed_equals_runs_one_by_one(tmp_path):
    sw = tmp_path / "sw"
    assert main(["sweep", *TINY, "--grid", "data_seed=0,1", "--seeds", "3",
                 "--out", str(sw)]) == 0
    rows = {r["static"]["data_seed"]: r for r in json.loads((sw / "sweep.json")
                                                            .read_text())["rows"]}
    assert set(rows) == {0, 1}
    for ds, row in rows.items():
        out = tmp_path / f"r{ds}"
        assert main(["run", *TINY, "--seed", "3", "--data-seed", str(ds), "--out",
                     str(out)]) == 0
        hist = json.loads((out / "results.json").read_text())["history"]
        for a, b in zip(row["history"], hist, strict=True):
            assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    assert rows[0]["history"][0]["train_loss"] != rows[1]["history"][0]["train_loss"]


def test_sweep_title_names_gridded_values():
    cfg = RunConfig(algorithm="fedavg", dataset="fmnist", partition="dirichlet")
    assert sweep_title(cfg, {}) == "sweep: fedavg on fmnist (dirichlet)"
    assert sweep_title(cfg, {"algorithm": ["fedavg", "maxfl"]}) == \
        "sweep: fedavg/maxfl on fmnist (dirichlet)"
