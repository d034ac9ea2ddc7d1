"""benchmarks/peer_workloads.py: the workloads' configuration, the IID equal partition, the
derived time per 100 rounds, and the --quick path of our side."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.arrays import ClientArrays
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.data.sources import Dataset
from fedjax_appeal.local.client import local_sgd
from fedjax_appeal.run.validate import validate

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


def test_report_ratios_by_hand(pw):
    ours = {"workload": "femnist_fedjax", "program": "round", "local_unroll": 0, "rounds": 3,
            "sec_per_round": [2.0, 4.0, 3.0], "eval_s": [1.0], "local_steps": 8, "cohort": 10,
            "derived_100_s": 310.0, "clients": 10, "train_rows": 800, "test_rows": 90,
            "batch_size": 10, "client_lr": 0.03, "n_params": 5, "mean_epoch_steps": 8.0,
            "compile_s": 1.0, "test_acc": [0.5]}
    flower = {"steady_round_s": [1.0, 1.5, 2.0], "derived_100_s": 155.0, "eval_s": [0.5],
              "mean_steps_per_round": 40.0, "round_s": [9.0, 1.0, 1.5, 2.0], "wall_s": 20.0,
              "steps_per_round": [40, 40, 40, 40], "test_acc": [0.4], "flwr": "1", "torch": "2",
              "rounds_done": 4}
    lines, _ = pw.report([{"ours": ours, "flower": flower}])
    # per 100 rounds 310 / 155; per round median 3.0 / 1.5; Flower did 40 of our 80 steps
    assert "2×; 2×; 1×" in lines[2]
    assert lines[3].startswith("| femnist_fedjax | Flower 1 simulation")


def test_unrolled_local_steps_equal_the_rolled_scan():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4)).astype(np.float32)
    y = (np.arange(30) % 3).astype(np.int32)
    arrays = ClientArrays.from_indices(x, y, [np.arange(30)])
    m = make_model("logistic", "x", 3, (4,), jnp.float32, scale=1.0)
    p, s = m.init(jax.random.key(0))
    args = (m, p, s, arrays, jnp.int32(0), jax.random.key(3), jnp.float32(0.5))
    rolled = local_sgd(*args, steps=6, batch_size=5)
    unrolled = local_sgd(*args, steps=6, batch_size=5, unroll=True)
    for a, b, c in zip(jax.tree.leaves(rolled.params), jax.tree.leaves(unrolled.params),
                       jax.tree.leaves(p), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert not np.allclose(a, c)  # the steps moved the parameters
    assert float(rolled.loss) == pytest.approx(float(unrolled.loss), rel=1e-5)


def test_local_unroll_is_validated():
    with pytest.raises(ConfigError, match="local-unroll"):
        validate(RunConfig(local_unroll=-1), HParams())


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


def test_client_gpus_defaults_and_errors(pw, monkeypatch):
    monkeypatch.setattr(pw.os, "cpu_count", lambda: 16)
    assert pw.client_gpus("", "cpu") == [0.0]
    # a whole GPU per client (one at a time), and one actor per CPU sharing it
    assert pw.client_gpus("", "cuda") == [1.0, 1 / 16]
    assert pw.client_gpus("", "cuda", client_cpus=4) == [1.0, 0.25]
    assert pw.client_gpus("0.5,0.25", "cuda") == [0.5, 0.25]
    with pytest.raises(ValueError, match="comma list"):
        pw.client_gpus("half", "cuda")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pw.client_gpus("2", "cuda")
    with pytest.raises(ValueError, match="--peer-device cuda"):
        pw.client_gpus("0.5", "cpu")
    monkeypatch.setattr(pw.os, "cpu_count", lambda: 1)
    assert pw.client_gpus("", "cuda") == [1.0]


def test_peer_device(pw, monkeypatch):
    assert pw.peer_device("cuda") == "cuda" and pw.peer_device("cpu") == "cpu"
    monkeypatch.setattr(pw.jax, "default_backend", lambda: "gpu")
    assert pw.peer_device("auto") == "cuda"
    monkeypatch.setattr(pw.jax, "default_backend", lambda: "cpu")
    assert pw.peer_device("auto") == "cpu"


def test_missing_flower_interpreter_is_one_line(pw, tmp_path):
    with pytest.raises(pw.PeerError, match="--flower-python"):
        pw.flower_python(tmp_path / "no_venv")
    with pytest.raises(pw.PeerError, match="no Flower interpreter at"):
        pw.flower_python(tmp_path, python=str(tmp_path / "python9"))
    # an interpreter without flwr: the import check fails with its last error line
    with pytest.raises(pw.PeerError, match="does not import in"):
        pw.flower_python(tmp_path, python=sys.executable, path=str(tmp_path))


def test_report_names_the_gpu_setting_and_the_slower_one(pw):
    ours = {"workload": "cifar10_pfl", "rounds": 2, "sec_per_round": [0.01, 0.01],
            "eval_s": [0.005], "local_steps": 5, "cohort": 50, "derived_100_s": 1.05,
            "clients": 1000, "train_rows": 50000, "test_rows": 10000, "batch_size": 10,
            "client_lr": 0.1, "n_params": 5, "mean_epoch_steps": 5.0, "compile_s": 1.0,
            "test_acc": [0.3]}

    def flower(gpus, per_round, derived):
        return {"steady_round_s": [per_round], "derived_100_s": derived, "eval_s": [0.02],
                "mean_steps_per_round": 250.0, "round_s": [30.0, per_round], "wall_s": 60.0,
                "steps_per_round": [250, 250], "test_acc": [0.3], "flwr": "1", "torch": "2",
                "rounds_done": 2, "device": "cuda", "client_gpus": gpus}

    fast, slow = flower(0.0625, 1.5, 150.2), flower(1.0, 5.5, 550.2)
    lines, notes = pw.report([{"ours": ours, "flower": fast, "flower_runs": [slow, fast]}])
    # 1.05 / 150.2 per 100 rounds; 0.01 / 1.5 per round; equal client steps
    assert "0.00699×; 0.00667×; 0.00667×" in lines[2]
    assert "cuda, num_gpus 0.0625 per client" in lines[3]
    assert "num_gpus 1 per client 5.500 / 5.500 s/round" in notes
    assert "derived 550.2 s per 100 rounds" in notes


def test_flower_site_requirements_pin_each_package_once():
    # pack_flower_site.sh downloads these with --no-deps: every line must pin one version,
    # and two versions of one package would stop the install
    lines = [ln.strip() for ln in (BENCH / "flower_site_requirements.txt").read_text()
             .splitlines() if ln.strip() and not ln.startswith("#")]
    names = []
    for ln in lines:
        name, sep, version = ln.partition("==")
        assert sep and name and version[0].isdigit(), ln
        names.append(name.lower().replace("_", "-"))
    assert len(names) == len(set(names))
    assert {"flwr", "ray"} <= set(names)


@pytest.mark.parametrize("flag", [["--client-gpus", "0.5"], ["--peer-device", "cuda"],
                                  ["--flower-python", "python3"], ["--flower-path", "/x"]])
def test_flower_options_refused_without_flower(pw, flag):
    with pytest.raises(SystemExit, match=f"{flag[0]} configures Flower's side"):
        pw.main(["--quick", "--peer", "none", *flag])


def _row(repeat, ours_100, flower_100, workload="femnist_fedjax"):
    ours = {"workload": workload, "rounds": 2, "sec_per_round": [ours_100 / 100] * 2,
            "eval_s": [0.0], "local_steps": 10, "cohort": 10, "derived_100_s": ours_100,
            "clients": 10, "train_rows": 800, "test_rows": 90, "batch_size": 10,
            "client_lr": 0.03, "n_params": 5, "mean_epoch_steps": 10.0, "compile_s": 1.0,
            "test_acc": [0.5]}
    flower = {"steady_round_s": [flower_100 / 100], "derived_100_s": flower_100,
              "eval_s": [0.0], "mean_steps_per_round": 100.0, "round_s": [9.0, flower_100 / 100],
              "wall_s": 20.0, "steps_per_round": [100, 100], "test_acc": [0.4], "flwr": "1",
              "torch": "2", "rounds_done": 2}
    return {"ours": ours, "flower": flower, "repeat": repeat}


def test_repeats_pair_each_run_with_its_own_flower(pw):
    rows = [_row(0, 100.0, 250.0), _row(1, 120.0, 180.0), _row(2, 200.0, 150.0)]
    lines, notes = pw.report(rows)
    # each ours row against the Flower run of its own repeat: 100/250, 120/180, 200/150
    assert "0.4×; 0.4×; 0.4×" in lines[2] and "repeat 1" in lines[2]
    assert "0.667×; 0.667×; 0.667×" in lines[3] and "repeat 2" in lines[3]
    assert "1.33×; 1.33×; 1.33×" in lines[4] and "repeat 3" in lines[4]
    assert sum("| femnist_fedjax | Flower 1 simulation" in x for x in lines) == 3
    # paired table: Flower / ours 2.5, 1.5, 0.75 -> median 1.5, min 0.75, faster in 2 of 3
    assert lines[-1] == ("| femnist_fedjax | 3 | 2.50, 1.50, 0.75 | 1.50 | 0.75 | 2 of 3 |")
    assert "the repeats interleaved" in notes


def test_one_repeat_has_no_paired_table(pw):
    lines, notes = pw.report([_row(0, 100.0, 250.0)])
    assert "repeat" not in "\n".join(lines) and pw.paired([_row(0, 100.0, 250.0)]) == []
    assert "the repeats interleaved" not in notes


def test_repeats_below_one_refused(pw):
    with pytest.raises(SystemExit, match="--repeats 0 must be at least 1"):
        pw.main(["--quick", "--peer", "none", "--repeats", "0"])


def test_repeats_refused_with_combine(pw, tmp_path):
    with pytest.raises(SystemExit, match="--combine only renders the given JSONs"):
        pw.main(["--combine", str(tmp_path / "a.json"), "--repeats", "3", "--no-append"])
