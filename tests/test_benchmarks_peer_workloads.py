"""benchmarks/peer_workloads.py: the workloads' configuration, the IID equal partition, the
derived time per 100 rounds, and the --quick path of our side."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from fedjax_appeal.data.sources import Dataset

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def pw():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("peer_workloads")
    finally:
        sys.path.remove(str(BENCH))


def test_importable_without_flower(pw):
    assert "flwr" not in sys.modules
    assert "import flwr" in pw.FLOWER_WORKER  # the peer only runs in its own venv


def test_iid_equal_partition_is_disjoint_equal_and_iid(pw):
    ds = Dataset("x", np.zeros((6000, 2), np.float32), np.arange(6000) % 10, 10)
    parts = pw.iid_equal(ds, 100, None, np.random.default_rng(0))
    assert [len(p) for p in parts] == [60] * 100
    rows = np.concatenate(parts)
    assert len(np.unique(rows)) == 6000  # disjoint and covering
    labels = ds.y[parts[0]]
    assert len(np.unique(labels)) > 5  # a random cut, not a class block


def test_cifar_workload_matches_pfl_research(pw):
    cfg, hp, w = pw.configure("cifar10_pfl")
    assert (cfg.clients, cfg.cohort, cfg.batch_size, cfg.eval_every) == (1000, 50, 10, 10)
    assert cfg.model == "simple_cnn" and hp.client_lr == 0.1 and hp.server_lr == 1.0
    # 60,000 pool rows / 1000 clients = 60 rows, of which round(60 * 50/60) = 50 train
    assert int(round(cfg.train_fraction * 60)) == 50
    assert pw.epoch_steps(np.array([50]), cfg.batch_size).tolist() == [5]  # one epoch
    assert pw.epoch_steps(np.array([1, 10, 11, 99]), 10).tolist() == [1, 1, 2, 10]


def test_derived_time_per_100_rounds(pw):
    # 100 x median(1, 2, 9) + 10 evaluations x median(0.5, 0.7)
    assert pw.derived_100([1.0, 2.0, 9.0], [0.5, 0.7], 10) == pytest.approx(200 + 6)


@pytest.mark.slow
@pytest.mark.data
def test_quick_path_of_our_side(pw, tmp_path):
    res = pw.main(["--quick", "--peer", "none", "--workloads", "femnist_fedjax",
                   "--out", str(tmp_path / "quick.json")])
    (row,) = res["rows"]
    o = row["ours"]
    assert o["rounds"] == 2 and len(o["sec_per_round"]) == 2 and len(o["eval_s"]) == 2
    assert all(t > 0 for t in o["sec_per_round"] + o["eval_s"])
    assert all(0.0 <= a <= 1.0 for a in o["test_acc"])
    assert o["clients"] == 10 and o["cohort"] == 2 and o["batch_size"] == 10
    # one epoch (the mean of ceil(n_k / 10) over the clients), capped at 2 steps by --quick
    assert o["local_steps"] == min(2, int(round(o["mean_epoch_steps"])))
    assert o["derived_100_s"] == pytest.approx(pw.derived_100(o["sec_per_round"], o["eval_s"], 1))
    assert (tmp_path / "quick.json").exists() and "flower" not in row
