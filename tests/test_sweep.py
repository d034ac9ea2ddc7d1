"""Sweeps: one vmapped program equals the same configurations run one by one."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from fedjax_appeal.algorithms import build
from fedjax_appeal.appeal import with_appeal
from fedjax_appeal.cli import main
from fedjax_appeal.config import ConfigError, HParams, RunConfig
from fedjax_appeal.data import load_federated
from fedjax_appeal.models import model_for
from fedjax_appeal.simulate import simulate
from fedjax_appeal.sweep import check_grid, summarize_sweep, sweep

CFG = RunConfig(algorithm="fedprox", dataset="synthetic", partition="natural", clients=6,
                unseen_clients=2, cohort=3, rounds=4, local_steps=2, batch_size=4,
                eval_every=2, min_samples=4)
TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort", "3",
        "--rounds", "2", "--local-steps", "2", "--batch-size", "4", "--eval-every", "1",
        "--min-samples", "4", "--partition", "natural"]


def test_sweep_equals_runs_one_by_one():
    data, ds = load_federated(CFG)
    grid = {"client_lr": [0.2, 0.05], "prox_mu": [0.0, 0.5]}
    res = sweep(CFG, grid, [0, 3], data=data, dataset=ds, max_parallel=3)  # 8 runs, 3 batches
    assert len(res.rows) == 8
    model = model_for(CFG.model, data, ds)
    alg = with_appeal(build("fedprox", model, CFG), model, CFG)  # as `run` applies it
    for row in (res.rows[1], res.rows[7]):  # a full batch and the padded last batch
        hp = HParams(**row["hparams"])
        ref = simulate(alg, data, hp, jax.random.key(row["seed"]), rounds=4, eval_every=2)
        assert [h["round"] for h in row["history"]] == [0, 2, 4]
        for a, b in zip(row["history"], ref.history, strict=True):
            for k in ("train_loss", "test_acc_seen", "test_loss_unseen", "gm_appeal_seen",
                      "preferred_acc_unseen", "solo_acc_seen"):
                np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5)
    # the best configuration is the argmax of the mean over seeds
    means = {}
    for r in res.rows:
        means.setdefault(r["label"], []).append(r["final"]["test_acc_seen"])
    best = max(means, key=lambda k: np.mean(means[k]))
    assert res.best["label"] == best
    assert res.best["test_acc_seen_mean"] == pytest.approx(np.mean(means[best]))


def test_maxfl_sweep_equals_runs_one_by_one_with_appeal_metrics():
    cfg = CFG.replace(algorithm="maxfl", rho_steps=3, opt_out_after=2)
    data, ds = load_federated(cfg)
    res = sweep(cfg, {"client_lr": [0.2, 0.05]}, [1], data=data, dataset=ds,
                metric="gm_appeal_seen")
    model = model_for(cfg.model, data, ds)
    alg = with_appeal(build("maxfl", model, cfg), model, cfg)
    for row in res.rows:  # the solo models (rho_k) depend on the client lr of each row
        ref = simulate(alg, data, HParams(**row["hparams"]), jax.random.key(1), rounds=4,
                       eval_every=2)
        for a, b in zip(row["history"], ref.history, strict=True):
            for k in ("train_loss", "gm_appeal_seen", "gm_appeal_unseen", "preferred_acc_seen"):
                np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5)
    assert res.rows[0]["history"][0]["solo_acc_seen"] != res.rows[1]["history"][0][
        "solo_acc_seen"]


def test_summary_ranks_losses_low_and_nan_last():
    rows = [{"label": lab, "static": {}, "hparams": {}, "seed": 0, "final": {"test_loss_seen": v}}
            for lab, v in (("a", 0.5), ("b", float("nan")), ("c", 0.2))]
    assert [e["label"] for e in summarize_sweep(rows, "test_loss_seen")] == ["c", "a", "b"]
    assert [e["label"] for e in summarize_sweep(rows, "test_loss_seen", "max")] == ["a", "c", "b"]


@pytest.mark.parametrize("grid,msg", [
    ({"client_lrr": [0.1]}, "unknown grid key 'client_lrr' (did you mean client_lr"),
    ({"client_lr": ["abc"]}, "grid client_lr: 'abc' is not a valid float"),
    ({"local_steps": [1.5]}, "is not a valid int"),
    ({"seed": [1, 2]}, "--seeds"),
    ({"client_lr": []}, "non-empty list"),
])
def test_bad_grids(grid, msg):
    with pytest.raises(ConfigError, match=None) as e:
        check_grid(grid)
    assert msg in str(e.value)


def test_cli_sweep_writes_files_and_rejects_bad_input(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", *TINY, "--grid", "client_lr=0.1,0.05", "--grid", "local_steps=1,2",
                 "--seeds", "0", "--out", str(out)]) == 0
    res = json.loads((out / "sweep.json").read_text())
    assert len(res["rows"]) == 4 and len(res["summary"]) == 4
    assert {r["static"]["local_steps"] for r in res["rows"]} == {1, 2}
    assert len((out / "sweep.csv").read_text().splitlines()) == 5
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 1 |" in (out / "summary.md").read_text()
    assert "best (test_acc_seen" in capsys.readouterr().out
    for bad, msg in ((["--grid", "client_lr"], "KEY=V1,V2"),
                     (["--grid", "nope=1"], "unknown grid key 'nope'"),
                     (["--grid", "client_lr=-1"], "--client-lr must be > 0"),
                     (["--grid", "cohort=20"], "larger than --clients"),
                     (["--seeds", "a"], "--seeds")):
        assert main(["sweep", *TINY, *bad, "--out", str(tmp_path / "bad")]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
