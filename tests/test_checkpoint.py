"""Checkpoint / resume: SIGKILL mid-run then --resume equals an uninterrupted run;
Ctrl-C saves a checkpoint; the NaN guard names the round and keeps the last good state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import XLA_CACHE_ENV, make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.cli.commands import main
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.run.checkpoint import Checkpointer, Interrupted, NonFiniteError, read_meta
from fedjax_appeal.run.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort", "3",
        "--rounds", "20", "--local-steps", "2", "--batch-size", "4", "--eval-every", "5",
        "--min-samples", "4", "--partition", "natural", "--checkpoint-every", "2"]


def _alg():
    data = make_tiny_data(num_clients=6, unseen=2)
    model = make_model("mlp", "tiny", 3, (5,), np.float32, scale=1.0)
    cfg = RunConfig(clients=6, unseen_clients=2, cohort=3, local_steps=2, batch_size=4)
    return data, build("fedavg", model, cfg)


def _start_slow_run(out, min_round, stderr=subprocess.DEVNULL):
    """(process, env) of a TINY run into `out`, slowed after each checkpoint, once its
    checkpoint has reached `min_round` (or the process ended)."""
    env = {**os.environ, **XLA_CACHE_ENV, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
           "FEDJAX_APPEAL_TEST_SLEEP_AFTER_CHECKPOINT": "0.4"}
    proc = subprocess.Popen([sys.executable, "-m", "fedjax_appeal", "run", *TINY, "--out",
                             str(out)], env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                            text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (out / "checkpoint.npz").exists() and read_meta(out)["round"] >= min_round:
            break
        time.sleep(0.05)
    return proc, env


def _resume_and_reference(out, env, tmp_path):
    """(resumed results, uninterrupted results): `run --resume OUT` at full speed in a
    subprocess, and the same TINY run without interruption."""
    env = {k: v for k, v in env.items() if k != "FEDJAX_APPEAL_TEST_SLEEP_AFTER_CHECKPOINT"}
    r = subprocess.run([sys.executable, "-m", "fedjax_appeal", "run", "--resume", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ref = tmp_path / "ref"
    assert main(["run", *TINY, "--out", str(ref)]) == 0
    return (json.loads((out / "results.json").read_text()),
            json.loads((ref / "results.json").read_text()))


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    out = tmp_path / "killed"
    proc, env = _start_slow_run(out, 6)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    killed_at = read_meta(out)["round"]
    assert 6 <= killed_at < 20 and not (out / "results.json").exists()
    a, b = _resume_and_reference(out, env, tmp_path)
    assert [h["round"] for h in a["history"]] == [0, 5, 10, 15, 20]
    assert a["history"] == b["history"]  # exactly, not approximately
    assert a["round_metrics"] == b["round_metrics"]
    assert a["participation"] == b["participation"]
    # a resume with a changed hyperparameter is refused in one line
    assert main(["run", "--resume", str(out), "--client-lr", "0.3"]) == 2


@pytest.mark.slow
def test_interrupt_saves_checkpoint_and_resume_matches(tmp_path):
    data, alg = _alg()
    key = jax.random.key(1)
    full = simulate(alg, data, HParams(), key, rounds=6, eval_every=2,
                    checkpoint=Checkpointer(tmp_path / "full", every=1))

    def ctrl_c(entry):
        if entry["round"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted, match="checkpoint of round 4 saved"):
        simulate(alg, data, HParams(), key, rounds=6, eval_every=2, on_eval=ctrl_c,
                 checkpoint=Checkpointer(tmp_path / "c", every=0))
    assert read_meta(tmp_path / "c")["round"] == 4
    rest = simulate(alg, data, HParams(), key, rounds=6, eval_every=2, resume=True,
                    checkpoint=Checkpointer(tmp_path / "c", every=0))
    assert rest.history == full.history
    for k in full.round_metrics:
        np.testing.assert_array_equal(rest.round_metrics[k], full.round_metrics[k])


@pytest.mark.slow
def test_nan_guard_names_round_and_keeps_last_good_checkpoint(tmp_path):
    data, alg = _alg()

    def poisoned(state, d, key, hp):  # test-only hook: round 5 produces NaN parameters
        new, m = alg.round(state, d, key, hp)
        bad = state.round == 4
        return new.replace(params=jax.tree.map(lambda p: jnp.where(bad, jnp.nan, p),
                                               new.params)), m

    ck = Checkpointer(tmp_path, every=2)
    with pytest.raises(NonFiniteError, match=r"NaN/Inf in round 5; the last good checkpoint "
                                             r"\(round 4\)"):
        simulate(alg._replace(round=poisoned), data, HParams(), jax.random.key(0), rounds=9,
                 eval_every=3, checkpoint=ck)
    meta = read_meta(tmp_path)
    assert meta["round"] == 4
    assert [h["round"] for h in meta["history"]] == [0, 3]
    # every stored leaf is finite
    with np.load(tmp_path / "checkpoint.npz") as z:
        assert all(np.isfinite(z[k]).all() for k in z.files if k.startswith("state/")
                   and z[k].dtype.kind == "f")


@pytest.mark.slow
def test_last_round_is_checkpointed_and_a_finished_run_extends(tmp_path, capsys):
    short = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort",
             "3", "--local-steps", "2", "--batch-size", "4", "--eval-every", "2",
             "--min-samples", "4", "--partition", "natural", "--checkpoint-every", "3"]
    out = tmp_path / "r"
    assert main(["run", *short, "--rounds", "4", "--out", str(out)]) == 0
    assert read_meta(out)["round"] == 4  # 3 is due, and the last round always is
    assert Checkpointer(tmp_path, every=3).due(0, 7) == [3, 6, 7]
    assert Checkpointer(tmp_path, every=3).due(6, 7) == [7]
    assert Checkpointer(tmp_path, every=0).due(0, 7) == []
    # the checkpoint belongs to its configuration: another one is refused in one line
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--algorithm", "fedprox"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made with --algorithm 'fedavg', not 'fedprox'" in err[0]
    # extending the finished 4-round run to 6 continues from round 4
    assert main(["run", "--resume", str(out), "--rounds", "6"]) == 0
    assert "round    2/6" not in capsys.readouterr().err  # rounds 1-4 were not rerun
    ref = tmp_path / "ref"
    assert main(["run", *short, "--rounds", "6", "--out", str(ref)]) == 0
    a = json.loads((out / "results.json").read_text())
    b = json.loads((ref / "results.json").read_text())
    assert [h["round"] for h in a["history"]] == [0, 2, 4, 6]
    assert a["history"] == b["history"] and a["round_metrics"] == b["round_metrics"]
    assert read_meta(out)["round"] == 6


# --- named arrays: leaves under their pytree paths; format-1 files still load ----------------
def _write_format1(src: Path, dst: Path) -> None:
    """A format-1 checkpoint (leaf_00000, ... in flattening order, as the first release wrote
    it) holding the state of the named checkpoint in `src`, made by hand."""
    meta = read_meta(src)
    with np.load(src / "checkpoint.npz") as z:
        named = {k: z[k] for k in z.files}
    arrays = {f"leaf_{i:05d}": named[f"state/{n}"] for i, n in enumerate(meta["leaf_names"])}
    arrays.update({k: v for k, v in named.items() if k.startswith("rm_")})
    old = {k: v for k, v in meta.items() if k not in ("leaf_names", "key_impls")}
    old.update(format=1, key_impls={f"leaf_{i:05d}": meta["key_impls"][n]
                                    for i, n in enumerate(meta["leaf_names"])
                                    if n in meta["key_impls"]})
    arrays["meta"] = np.frombuffer(json.dumps(old).encode(), np.uint8)
    dst.mkdir()
    np.savez(dst / "checkpoint.npz", **arrays)


@pytest.mark.slow
def test_leaves_are_named_by_pytree_path_and_old_files_resume(tmp_path):
    data, alg = _alg()
    key = jax.random.key(2)
    full = simulate(alg, data, HParams(), key, rounds=4, eval_every=2)
    half = simulate(alg, data, HParams(), key, rounds=2, eval_every=2,
                    checkpoint=Checkpointer(tmp_path / "new", every=2))
    with np.load(tmp_path / "new" / "checkpoint.npz") as z:
        files = set(z.files)
        np.testing.assert_array_equal(z["state/params/Dense_0/kernel"],
                                      half.final_state.params["Dense_0"]["kernel"])
        assert int(z["state/round"]) == 2
    assert not any(f.startswith("leaf_") for f in files)
    names = read_meta(tmp_path / "new")["leaf_names"]
    assert {"params/Dense_2/bias", "round", "participation"} <= set(names)
    assert {f"state/{n}" for n in names} <= files
    _write_format1(tmp_path / "new", tmp_path / "old")
    for d in ("new", "old"):  # both formats continue to the uninterrupted run
        rest = simulate(alg, data, HParams(), key, rounds=4, eval_every=2, resume=True,
                        checkpoint=Checkpointer(tmp_path / d, every=0))
        assert rest.history == full.history, d
        for k in full.round_metrics:
            np.testing.assert_array_equal(rest.round_metrics[k], full.round_metrics[k])
        same = jax.tree.map(np.array_equal, rest.final_state.params, full.final_state.params)
        assert all(jax.tree.leaves(same)), d


def test_named_checkpoint_of_any_pytree_and_structure_errors(tmp_path):
    from fedjax_appeal.core.config import ConfigError
    from fedjax_appeal.run.checkpoint import leaf_names, load

    state = {"params": {"dense": {"kernel": jnp.ones((2, 3)), "bias": jnp.zeros(3)}},
             "opt": (jnp.array(1, jnp.int32), {"mu": jnp.full(3, 0.5)}),
             "key": jax.random.key(7)}
    names, _, _ = leaf_names(state)
    assert names == ["key", "opt/0", "opt/1/mu", "params/dense/bias", "params/dense/kernel"]
    Checkpointer(tmp_path, every=1).save(state, 3, [{"round": 0}], {})
    back = load(tmp_path, jax.tree.map(jnp.zeros_like, state))
    assert back.round == 3
    np.testing.assert_array_equal(back.state["params"]["dense"]["kernel"], np.ones((2, 3)))
    np.testing.assert_array_equal(jax.random.key_data(back.state["key"]),
                                  jax.random.key_data(state["key"]))
    other = {**state, "params": {"dense": {"kernel": jnp.ones((2, 3)), "b": jnp.zeros(3)}}}
    with pytest.raises(ConfigError, match="lacks params/dense/b;"):
        load(tmp_path, other)
    wrong = {**state, "params": {"dense": {"kernel": jnp.ones((3, 3)), "bias": jnp.zeros(3)}}}
    with pytest.raises(ConfigError, match=r"params/dense/kernel has shape \(2, 3\)"):
        load(tmp_path, wrong)


def test_a_checkpoint_of_the_untyped_state_is_refused_in_one_line(tmp_path):
    """A checkpoint whose stages' state sits under `extra/` (format 2) cannot fill the typed
    fields: it is refused saying why, not as an unrelated structure mismatch."""
    from fedjax_appeal.core.config import ConfigError
    from fedjax_appeal.run.checkpoint import load

    rho = jnp.arange(3.0)
    Checkpointer(tmp_path, every=1).save({"params": jnp.ones(2), "extra": {"rho": rho}}, 2,
                                         [{"round": 0}], {})
    with pytest.raises(ConfigError, match=r"earlier version .* \(format 2\); start a new run$"):
        load(tmp_path, {"params": jnp.ones(2), "rho": rho})


def test_sweep_batch_named_and_old_format(tmp_path):
    from fedjax_appeal.run.checkpoint import SweepCheckpoint

    state = {"params": {"w": jnp.arange(6.0).reshape(2, 3)}, "round": jnp.array([3, 3])}
    ck = SweepCheckpoint(tmp_path, every=1)
    ck.save_batch("0/1", state, 3, [[{"round": 0}]], [{"loss": np.ones((2, 3))}])
    with np.load(tmp_path / "batch.npz") as z:
        assert {"state/params/w", "state/round"} <= set(z.files)
    got, rnd, hist, per_round = ck.load_batch("0/1", state)
    np.testing.assert_array_equal(got["params"]["w"], state["params"]["w"])
    assert rnd == 3 and hist == [[{"round": 0}]]
    np.testing.assert_array_equal(per_round[0]["loss"], np.ones((2, 3)))
    assert ck.load_batch("0/2", state) is None  # another batch's file
    # a batch file of the first format: leaf_NNNNN in flattening order (params/w, round)
    meta = {"batch": "0/1", "round": 2, "histories": [], "num_leaves": 2, "key_impls": {},
            "chunks": 0}
    np.savez(tmp_path / "batch.npz", leaf_00000=np.full((2, 3), 7.0),
             leaf_00001=np.array([2, 2], np.int32),
             meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    got, rnd, _, _ = ck.load_batch("0/1", state)
    assert rnd == 2 and float(got["params"]["w"][1, 2]) == 7.0
    np.testing.assert_array_equal(got["round"], [2, 2])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_checkpoint_like_ctrl_c(name, tmp_path, capsys):
    """What `timeout`, `kill` and batch schedulers send: the run writes a checkpoint, says in
    one line how to resume, exits 128 + signal, and leaves no temporary file; the resumed
    run equals the uninterrupted one."""
    sig = getattr(signal, name)
    out = tmp_path / "stopped"
    proc, env = _start_slow_run(out, 4, stderr=subprocess.PIPE)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err
    last = err.strip().splitlines()[-1]
    assert f"interrupted by {name}" in last and f"--resume {out}" in last, last
    stopped_at = read_meta(out)["round"]
    assert 4 <= stopped_at < 20 and not (out / "results.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stopped"]  # no temporary folder
    assert not [p for p in out.iterdir() if ".tmp" in p.name]
    if name != "SIGTERM":
        return
    # a --rounds below the checkpoint's round is refused; the checkpoint stays
    assert main(["run", "--resume", str(out), "--rounds", "2"]) == 2
    assert "is below round" in capsys.readouterr().err
    a, b = _resume_and_reference(out, env, tmp_path)
    assert a["history"] == b["history"] and a["round_metrics"] == b["round_metrics"]
