"""What runs and sweeps record: the resolved configuration and the hyperparameters it uses,
read back alike by `compare` (older files included); one std over seeds for the sweep
summary and `compare`; duplicated seeds and missing metrics in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedjax_appeal.cli.commands import main
from fedjax_appeal.core.config import HParams, RunConfig, field_names
from fedjax_appeal.core.fields import OPTIONS
from fedjax_appeal.run.compare import band, summarise
from fedjax_appeal.run.records import (
    NOT_A_SETTING,
    recorded_hparams,
    resolve_settings,
    runs_of,
    sample_std,
)
from fedjax_appeal.run.sweep import summarize_sweep
from fedjax_appeal.run.validate import used_hparams

TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "0", "--cohort", "3",
        "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every", "1",
        "--min-samples", "4", "--partition", "natural"]


def _setting_part(block: dict) -> dict:
    return {k: v for k, v in block.items() if k not in NOT_A_SETTING}


def test_run_and_sweep_of_one_configuration_record_the_same_and_compare_as_one(tmp_path,
                                                                                capsys):
    run, sw, cmp = tmp_path / "run", tmp_path / "sw", tmp_path / "cmp"
    assert main(["run", *TINY, "--seed", "0", "--out", str(run)]) == 0
    assert main(["sweep", *TINY, "--seeds", "0,1", "--out", str(sw)]) == 0
    capsys.readouterr()
    res = json.loads((run / "results.json").read_text())
    swp = json.loads((sw / "sweep.json").read_text())
    # resolved values, not "auto": the model built for synthetic data, appeal off
    assert res["config"]["model"] == swp["config"]["model"] == "logistic"
    assert res["config"]["appeal"] == swp["config"]["appeal"] == "off"
    for row in swp["rows"]:
        assert row["static"] == {"model": "logistic", "appeal": "off"}
    assert _setting_part(res["config"]) == _setting_part(swp["config"])
    assert res["hparams"] == swp["hparams"]
    assert main(["compare", str(run), str(sw), "--out", str(cmp)]) == 0
    err = capsys.readouterr().err
    out = json.loads((cmp / "compare.json").read_text())
    (group,) = out["groups"]
    assert group["n"] == 3 and sorted(group["seeds"]) == [0, 0, 1]
    # the run and row 0 are one configuration with one seed: one warning line naming both
    warn = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warn) == 1 and warn[0].startswith("fedjax-appeal: warning: seed 0 appears 2")
    assert str(run / "results.json") in warn[0] and "sweep.json#0" in warn[0]


def test_files_that_hold_auto_are_resolved_when_read(tmp_path):
    """Older files: `model = auto` / `appeal = auto` in config and sweep rows and every
    hyperparameter in `hparams` read back as a run of today."""
    full = HParams().to_dict()
    old_cfg = {"algorithm": "fedavg", "dataset": "fmnist", "model": "auto", "appeal": "auto",
               "seed": 0, "out": "a"}
    hist = [{"round": 0, "test_acc_seen": 0.1}]
    old_run = {"config": {**old_cfg, "model": "mlp"}, "hparams": full, "history": hist,
               "appeal_protocol": {"on": False}}
    old_sweep = {"config": {**old_cfg, "out": "b"}, "hparams": full,
                 "rows": [{"id": 0, "static": {}, "hparams": {"client_lr": 0.05}, "seed": 1,
                           "history": hist},
                          {"id": 1, "static": {"algorithm": "maxfl"}, "hparams": {},
                           "seed": 1, "history": hist}]}
    (r,) = runs_of(old_run, "run")
    row0, row1 = runs_of(old_sweep, "sweep")
    assert _setting_part(r["settings"]) == _setting_part(row0["settings"])
    assert r["settings"]["model"] == "mlp" and r["settings"]["appeal"] == "off"
    assert set(r["settings"]) & set(full) == {"client_lr", "server_lr"}
    # maxfl turns the appeal protocol on (`auto`) and uses its own hyperparameters
    assert row1["settings"]["appeal"] == "on" and row1["settings"]["model"] == "mlp"
    assert {"maxfl_eps", "solo_lr"} <= set(row1["settings"])
    # a dataset with another default model
    assert resolve_settings({"dataset": "cifar10", "model": "auto"})["model"] == "cnn"


def test_results_hparams_of_fedavg_and_maxfl_differ(tmp_path):
    from fedjax_appeal.run.experiment import run_config

    got = {}
    for alg in ("fedavg", "maxfl"):
        cfg = RunConfig(dataset="synthetic", clients=6, unseen_clients=0, cohort=3, rounds=1,
                        local_steps=1, batch_size=8, min_samples=4, partition="natural",
                        rho_steps=2, algorithm=alg)
        res, _ = run_config(cfg, HParams())
        got[alg] = res["hparams"]
        assert list(res["hparams"]) == used_hparams(cfg)
        assert res["hparams"] == recorded_hparams(cfg, HParams())
        own = {k for k in field_names(HParams)
               if ("algorithm", alg) in OPTIONS[k].applies.mentions}  # declared for it
        assert own <= set(res["hparams"])
    assert set(got["maxfl"]) - set(got["fedavg"]) == {"solo_lr", "maxfl_eps"}
    assert got["maxfl"]["maxfl_eps"] == pytest.approx(HParams().maxfl_eps)


def test_checkpoint_meta_keeps_every_hyperparameter(tmp_path):
    from fedjax_appeal.run.checkpoint import read_meta

    out = tmp_path / "run"
    assert main(["run", *TINY, "--rounds", "2", "--checkpoint-every", "1", "--out",
                 str(out)]) == 0
    meta = read_meta(out)
    assert set(meta["hparams"]) == set(HParams().to_dict())
    assert set(json.loads((out / "results.json").read_text())["hparams"]) == {
        "client_lr", "server_lr"}


def test_sample_std_by_hand():
    v = [0.4, 0.5, 0.9]
    assert sample_std(v) == pytest.approx(math.sqrt((0.2 ** 2 + 0.1 ** 2 + 0.3 ** 2) / 2))
    assert sample_std(v) == pytest.approx(np.std(v, ddof=1))
    assert math.isnan(sample_std([0.7]))
    m = np.array([[1.0, 2.0], [3.0, 6.0]])
    assert np.allclose(sample_std(m, axis=0), [math.sqrt(2.0), math.sqrt(8.0)])


def test_sweep_summary_and_compare_report_the_same_std():
    finals = [0.4, 0.5, 0.9]
    rows = [{"label": "a", "static": {}, "hparams": {}, "seed": s,
             "final": {"test_acc_seen": v}} for s, v in enumerate(finals)]
    (summary,) = summarize_sweep(rows, "test_acc_seen")
    group = [{"seed": s, "source": str(s),
              "history": [{"round": 0, "test_acc_seen": 0.0}, {"round": 1, "test_acc_seen": v}]}
             for s, v in enumerate(finals)]
    (cmp,) = summarise({"a": group}, "test_acc_seen", "std")
    want = np.std(finals, ddof=1)
    assert summary["test_acc_seen_std"] == pytest.approx(want) == cmp["final_std"]
    assert cmp["high"][-1] - cmp["final_mean"] == pytest.approx(want)
    # one seed: no std, no band
    (one,) = summarize_sweep(rows[:1], "test_acc_seen")
    assert math.isnan(one["test_acc_seen_std"])
    mean, lo, hi = band(np.array([[0.3, 0.5]]), "ci95")
    assert np.array_equal(lo, mean) and np.array_equal(hi, mean)


def _write_run(path, seed, metrics=("test_acc_seen",)):
    path.mkdir(parents=True)
    hist = [{"round": r, **{m: 0.1 * r for m in metrics}} for r in (0, 1)]
    path.joinpath("results.json").write_text(json.dumps(
        {"config": {"algorithm": "fedavg", "seed": seed, "out": str(path)},
         "hparams": {"client_lr": 0.1}, "history": hist}))


def test_compare_warns_about_a_duplicated_seed(tmp_path, capsys):
    _write_run(tmp_path / "a", 0)
    _write_run(tmp_path / "b", 0)  # same configuration, same seed
    _write_run(tmp_path / "c", 1)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c"),
                 "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("fedjax-appeal: warning: seed 0 appears 2 times")
    assert str(tmp_path / "a") in err[0] and str(tmp_path / "b") in err[0]


def test_compare_names_a_metric_a_run_lacks(tmp_path, capsys):
    _write_run(tmp_path / "a", 0, ("test_acc_seen", "gm_appeal_seen"))
    _write_run(tmp_path / "b", 1)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric",
                 "gm_appeal_seen", "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gm_appeal_seen" in err
    assert str(tmp_path / "b" / "results.json") in err
    assert not (tmp_path / "cmp").exists()


def test_sweep_warns_when_grid_values_resolve_to_one_configuration(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", *TINY, "--rounds", "1", "--grid", "model=auto,logistic",
                 "--out", str(out)]) == 0
    warn = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert len(warn) == 1 and "seed 0 appears 2 times" in warn[0]
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["static"]["model"] for r in rows] == ["logistic", "logistic"]
