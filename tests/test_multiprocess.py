"""Several processes, one simulation (JAX's multi-process runtime on localhost, gloo).

Two processes with one CPU device each run `fedjax-appeal run --devices 0`: the cohort is
sharded over both, only process 0 writes, and the history equals a one-process run. Killing
one of the two mid-run stops the other in bounded time with one line; the checkpoint on
disk is readable and `--resume` (two processes again) ends at the uninterrupted history.
Every subprocess has a timeout; ports are picked free on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import with_test_xla_flags

from fedjax_appeal.cli.commands import main
from fedjax_appeal.run.checkpoint import read_meta

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 300  # seconds any one process may take on a busy 2-core machine
TINY = ["--dataset", "synthetic", "--clients", "8", "--unseen-clients", "2", "--cohort", "4",
        "--local-steps", "2", "--batch-size", "8", "--min-samples", "4", "--partition",
        "natural", "--rho-steps", "2", "--finetune-steps", "2"]
CLOSE = dict(rtol=1e-4, atol=1e-5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR")) and k != "XLA_FLAGS"}
    return {**e, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": with_test_xla_flags(), **extra}


def launch(args: list[str], n: int = 2, **extra) -> list[subprocess.Popen]:
    port = free_port()
    return [subprocess.Popen([sys.executable, "-m", "fedjax_appeal", *args, "--devices", "0",
                              "--coordinator-address", f"127.0.0.1:{port}", "--num-processes",
                              str(n), "--process-id", str(i), "--heartbeat-timeout", "5"],
                             env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for i in range(n)]


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, err))
    return out


def same_history(a: list[dict], b: list[dict]) -> None:
    assert [h["round"] for h in a] == [h["round"] for h in b]
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_allclose(x[k], y[k], err_msg=k, **CLOSE)


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    args = ["run", *TINY, "--rounds", "6", "--eval-every", "2"]
    res = finish(launch([*args, "--out", str(tmp_path / "two")]))
    assert [r for r, _ in res] == [0, 0], res
    assert "final round 6" not in res[1][1] and "round    2/6" not in res[1][1]  # 1 is silent
    assert "round    2/6" in res[0][1]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    two = json.loads((tmp_path / "two" / "results.json").read_text())
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]  # only process 0 wrote
    same_history(two["history"], one["history"])
    assert two["round_metrics"]["cohort_idx"] == one["round_metrics"]["cohort_idx"]
    assert two["participation"] == one["participation"]
    assert two["config"]["devices"] == 0 and one["config"]["devices"] == 1


def _kill_mid_run(tmp_path, victim: int, rounds: int):
    out = tmp_path / "k"
    args = ["run", *TINY, "--rounds", str(rounds), "--eval-every", "4", "--checkpoint-every",
            "2", "--out", str(out)]
    procs = launch(args, FEDJAX_APPEAL_TEST_SLEEP_AFTER_CHECKPOINT="0.4")
    deadline = time.time() + LIMIT
    while time.time() < deadline and all(p.poll() is None for p in procs):
        if (out / "checkpoint.npz").exists() and read_meta(out)["round"] >= 4:
            break
        time.sleep(0.05)
    procs[victim].send_signal(signal.SIGKILL)
    t0 = time.time()
    survivor = procs[1 - victim]
    try:
        _, err = survivor.communicate(timeout=120)
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    return out, args, survivor.returncode, err, time.time() - t0


@pytest.mark.slow
@pytest.mark.parametrize("victim", [0, 1])
def test_killed_process_stops_the_other_with_one_line_and_resume_matches(tmp_path, victim):
    rounds = 16
    out, args, code, err, waited = _kill_mid_run(tmp_path, victim, rounds)
    assert waited < 60  # bounded: the heartbeat timeout is 5 s
    assert code != 0
    errors = [ln for ln in err.splitlines() if "error" in ln.lower() or "Check failure" in ln]
    assert len(errors) == 1, err[-3000:]
    assert errors[0].startswith("fedjax-appeal: error:") and "another process" in errors[0]
    assert f"--resume {out}" in errors[0]
    assert "Traceback" not in err and "@ " not in err
    others = [ln for ln in err.splitlines() if ln not in errors]
    assert all(ln.startswith(("[", "fedjax-appeal: ")) for ln in others), others
    meta = read_meta(out)  # the last checkpoint is readable
    assert 4 <= meta["round"] < rounds and not (out / "results.json").exists()
    if victim == 1:
        assert code == 3  # the survivor (process 0) stopped itself
        return
    res = finish(launch(["run", "--resume", str(out)]))
    assert [r for r, _ in res] == [0, 0], res
    ref = tmp_path / "ref"
    assert main([*args[:-1], str(ref)]) == 0
    a = json.loads((out / "results.json").read_text())
    b = json.loads((ref / "results.json").read_text())
    same_history(a["history"], b["history"])
    assert a["round_metrics"]["cohort_idx"] == b["round_metrics"]["cohort_idx"]


@pytest.mark.slow
def test_two_process_sweep_equals_one_process(tmp_path):
    args = ["sweep", *TINY, "--rounds", "2", "--eval-every", "1", "--grid",
            "client_lr=0.1,0.05", "--seeds", "0,1", "--max-parallel", "4"]
    res = finish(launch([*args, "--out", str(tmp_path / "two")]))
    assert [r for r, _ in res] == [0, 0], res
    assert res[1][1].strip() == ""  # process 1 prints nothing of its own
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    two = json.loads((tmp_path / "two" / "sweep.json").read_text())
    one = json.loads((tmp_path / "one" / "sweep.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]
    assert two["timing"]["groups"][0]["parallel"] == 4  # one batch, 2 rows per process
    for a, b in zip(two["rows"], one["rows"], strict=True):
        assert (a["label"], a["seed"]) == (b["label"], b["seed"])
        same_history(a["history"], b["history"])
