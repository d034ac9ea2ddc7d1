"""Sweeps: one vmapped program equals the same configurations run one by one."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from fedjax_appeal.algorithms import build
from fedjax_appeal.cli.commands import main
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import model_for
from fedjax_appeal.data import load_federated
from fedjax_appeal.protocols.appeal.appeal import with_appeal
from fedjax_appeal.run.simulate import simulate
from fedjax_appeal.run.sweep import check_grid, summarize_sweep, sweep

CFG = RunConfig(algorithm="fedprox", dataset="synthetic", partition="natural", clients=6,
                unseen_clients=2, cohort=3, rounds=4, local_steps=2, batch_size=4,
                eval_every=2, min_samples=4, appeal="on")
TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort", "3",
        "--rounds", "2", "--local-steps", "2", "--batch-size", "4", "--eval-every", "1",
        "--min-samples", "4", "--partition", "natural"]


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
                     (["--grid", "client_lr=0.1,,0.2"], "between two commas (or after the "
                      "last) is empty"),
                     (["--grid", "cohort=20"], "larger than --clients"),
                     (["--seeds", "a"], "--seeds")):
        assert main(["sweep", *TINY, *bad, "--out", str(tmp_path / "bad")]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


# --- reliability: metric checked first, checkpoints, resume after Ctrl-C ---------------
import fedjax_appeal.run.sweep as sweep_mod  # noqa: E402

RES = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort", "3",
       "--rounds", "6", "--local-steps", "2", "--batch-size", "4", "--eval-every", "2",
       "--min-samples", "4", "--partition", "natural", "--grid",
       "client_lr=0.1,0.05", "--seeds", "0,1", "--max-parallel", "2", "--checkpoint-every",
       "2"]


def test_sweep_metric_typo_refused_before_training(tmp_path, capsys, monkeypatch):
    """The metric is checked on the first batch's traced shapes, before any program of the
    sweep is compiled or runs (its init, the solo models, a chunk of rounds)."""
    from fedjax_appeal.run.driver import Driver

    def no_training(*a, **k):
        raise AssertionError("compiled or trained before the metric was checked")

    monkeypatch.setattr(Driver, "_init_program", no_training)
    monkeypatch.setattr(Driver, "advance", no_training)
    for extra in ([], ["--algorithm", "maxfl", "--rho-steps", "2"]):
        assert main(["sweep", *TINY, *extra, "--grid", "client_lr=0.1,0.05", "--metric",
                     "test_ac_seen", "--out", str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--metric 'test_ac_seen' is not in the history" in err[0]
        assert "did you mean test_acc_seen" in err[0]
    monkeypatch.undo()
    for bad, msg in ((["--algorithm", "maxfl", "--grid", "aggregation=uniform,proportional"],
                      "--aggregation has no effect here: maxfl"),
                     (["--grid", "alpha=0.1,0.5"], "--alpha has no effect here"),
                     (["--grid", "client_lr=0.1", "--rounds", "0"], "--rounds must be >= 1"),
                     (["--grid", "client_lr=0.1", "--eval-every", "0"], "--eval-every must be")):
        assert main(["sweep", *TINY, *bad, "--out", str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_sweep_ctrl_c_keeps_finished_and_resume_equals_uninterrupted(tmp_path, capsys,
                                                                     monkeypatch):
    ref = tmp_path / "ref"
    assert main(["sweep", *RES, "--out", str(ref)]) == 0
    real = sweep_mod.run_batch
    calls = []

    def interrupt_second_batch(*a, **k):
        calls.append(k.get("label"))
        if len(calls) == 2:  # Ctrl-C after round 4 of the second batch
            say = k["progress"]

            def progress(msg):
                say(msg)
                if "round 4/6" in msg:
                    raise KeyboardInterrupt

            k = {**k, "progress": progress}
        return real(*a, **k)

    monkeypatch.setattr(sweep_mod, "run_batch", interrupt_second_batch)
    out = tmp_path / "s"
    capsys.readouterr()
    assert main(["sweep", *RES, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert f"sweep --resume {out}" in err and not (out / "sweep.json").exists()
    ck = out / "sweep-checkpoint"
    assert list(json.loads((ck / "rows.json").read_text())) == ["0/0"]  # batch 1 kept
    with np.load(ck / "batch.npz") as z:
        meta = json.loads(z["meta"].tobytes().decode())
    assert meta["batch"] == "0/1" and meta["round"] == 4
    # a changed grid or configuration is refused
    assert main(["sweep", "--resume", str(out), "--grid", "client_lr=0.3,0.05"]) == 2
    assert "was made with grid" in capsys.readouterr().err
    assert main(["sweep", "--resume", str(out), "--local-steps", "3"]) == 2
    assert "--local-steps 2, not 3" in capsys.readouterr().err
    # resume: batch 1 is not run again, batch 2 continues at round 4
    calls.clear()
    monkeypatch.setattr(sweep_mod, "run_batch", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert main(["sweep", "--resume", str(out)]) == 0
    assert len(calls) == 1
    assert not ck.exists()  # a finished sweep leaves no checkpoint behind
    a = json.loads((out / "sweep.json").read_text())
    b = json.loads((ref / "sweep.json").read_text())
    assert [(r["label"], r["seed"]) for r in a["rows"]] == [(r["label"], r["seed"])
                                                            for r in b["rows"]]
    for ra, rb in zip(a["rows"], b["rows"], strict=True):
        assert [h["round"] for h in ra["history"]] == [0, 2, 4, 6]
        for x, y in zip(ra["history"], rb["history"], strict=True):
            for key in x:
                np.testing.assert_allclose(x[key], y[key], rtol=1e-6, atol=1e-7, err_msg=key)
        np.testing.assert_allclose(ra["cohort_loss"], rb["cohort_loss"], rtol=1e-6)
    # the finished sweep's folder is not reused silently
    assert main(["sweep", *RES, "--out", str(out)]) == 2
    assert "already holds another run" in capsys.readouterr().err


def test_negative_lanes_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"--lanes must be >= 0 \(got -1"):
        sweep(CFG, {"client_lr": [0.1]}, [0], lanes=-1)


@pytest.mark.parametrize("algorithm", ["fedavg", "maxfl"])
def test_sweep_of_one_configuration_equals_run_bit_for_bit(tmp_path, algorithm):
    """Runs and sweeps share one driver: a sweep of one combination is the run's program
    (no runs axis), so every history value is equal, not merely close."""
    flags = [*TINY, "--rounds", "4", "--algorithm", algorithm, "--seed", "3", "--appeal", "on"]
    assert main(["run", *flags, "--out", str(tmp_path / "r")]) == 0
    assert main(["sweep", *flags, "--grid", "client_lr=0.05", "--seeds", "3",
                 "--out", str(tmp_path / "s")]) == 0
    run = json.loads((tmp_path / "r" / "results.json").read_text())
    (row,) = json.loads((tmp_path / "s" / "sweep.json").read_text())["rows"]
    assert run["hparams"]["client_lr"] == 0.05 and len(row["history"]) == 5
    for a, b in zip(run["history"], row["history"], strict=True):
        assert {k: a[k] for k in b} == b
    assert run["round_metrics"]["cohort_loss"] == row["cohort_loss"]


def test_progress_reports_the_best_mean_over_seeds_as_the_summary_ranks():
    from fedjax_appeal.run.sweep import best_mean

    h = [[{"acc": v}] for v in (0.9, 0.1, 0.6, 0.5, float("nan"))]
    # configurations a (0.9, 0.1: mean 0.5) and b (0.6, 0.5: mean 0.55); the last run pads
    assert best_mean(h, ["a", "a", "b", "b"], "acc", lower=False) == (pytest.approx(0.55), 2)
    assert best_mean(h, ["a", "a", "b", "b"], "acc", lower=True) == (pytest.approx(0.5), 2)
    best, n = best_mean(h[4:], ["c"], "acc", lower=False)
    assert best != best and n == 1  # only NaN: NaN
