"""A sweep interrupted at any point and resumed gives the rows of the uninterrupted sweep,
bit for bit: batches of runs sharded over the split host CPU (each command in a fresh
process, as a user runs it), the appeal protocol with its solo models, a selector with
state (UnionFL's window), a chunked cohort, checkpoints between evaluations.

The interruptions are raised at chosen points of the code (a `KeyboardInterrupt`, what
Ctrl-C raises; SIGTERM and SIGHUP raise the same), so the test is deterministic:

* inside the chunk of rounds 3 -> 4 of the first batch, before it trains;
* between batches: right after the first batch's rows are saved;
* in the window between a chunk's bookkeeping (its per-round metrics and history entries)
  and the loop's step to its round, at round 3 of the second batch.

Each resume is interrupted again at the next point, so the last process resumes a sweep
that was resumed twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import XLA_CACHE_ENV

from fedjax_appeal.cli.commands import make_parser
from fedjax_appeal.cli.process import cpu_devices_for

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["--dataset", "synthetic", "--partition", "natural", "--clients", "8",
         "--unseen-clients", "2", "--cohort", "4", "--client-chunk", "2", "--rounds", "6",
         "--local-steps", "2", "--batch-size", "4", "--eval-every", "3", "--min-samples", "4",
         "--algorithm", "maxfl", "--rho-steps", "2", "--selector", "unionfl",
         "--checkpoint-every", "2", "--grid", "client_lr=0.1,0.05", "--seeds", "0,1",
         "--max-parallel", "2"]

# A fresh process running the CLI with a Ctrl-C raised at `point` (argv[1]); the other
# arguments are the command line.
INTERRUPT = r"""
import sys

from fedjax_appeal.cli.commands import main
from fedjax_appeal.run import checkpoint, driver

point, argv = sys.argv[1], sys.argv[2:]


def once(fn):  # raise at the first call that matches, then behave
    done = []

    def wrapped(*a, **k):
        out = fn(*a, **k)
        if out and not done:
            done.append(1)
            raise KeyboardInterrupt
        return None

    return wrapped


if point == "inside-chunk":
    real = driver.Driver.advance
    hit = once(lambda self, state, r, stop: r == 3)
    driver.Driver.advance = lambda self, state, r, stop: (
        hit(self, state, r, stop), real(self, state, r, stop))[1]
elif point == "between-batches":
    real_rows = checkpoint.SweepCheckpoint.save_rows
    hit = once(lambda self, done: True)

    def save_rows(self, done):
        real_rows(self, done)
        hit(self, done)

    checkpoint.SweepCheckpoint.save_rows = save_rows
elif point == "after-bookkeeping":
    real_record = driver.Driver.record
    hit = once(lambda r: r == 3)

    def record(self, r, evals):
        entries = real_record(self, r, evals)
        hit(r)
        return entries

    driver.Driver.record = record
sys.exit(main(argv))
"""


def _sweep(point: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **XLA_CACHE_ENV, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", INTERRUPT, point, "sweep", *argv], env=env,
                          capture_output=True, text=True, timeout=600)


def _batch_meta(ck: Path) -> dict:
    with np.load(ck / "batch.npz") as z:
        return json.loads(z["meta"].tobytes().decode())


@pytest.mark.slow
def test_a_sweep_interrupted_three_times_ends_with_the_uninterrupted_rows(tmp_path):
    ref, out = tmp_path / "ref", tmp_path / "s"
    r = _sweep("none", *SWEEP, "--out", str(ref))
    assert r.returncode == 0, r.stderr
    ck = out / "sweep-checkpoint"

    r = _sweep("inside-chunk", *SWEEP, "--out", str(out))
    assert r.returncode == 130, r.stderr
    assert f"sweep --resume {out}" in r.stderr.strip().splitlines()[-1]
    meta = _batch_meta(ck)  # the last finished chunk (round 3, an evaluation) is kept
    assert (meta["batch"], meta["round"]) == ("0/0", 3)
    assert [[e["round"] for e in h] for h in meta["histories"]] == [[0, 3], [0, 3]]

    r = _sweep("between-batches", "--resume", str(out))
    assert r.returncode == 130, r.stderr
    assert list(json.loads((ck / "rows.json").read_text())) == ["0/0"]

    r = _sweep("after-bookkeeping", "--resume", str(out))
    assert r.returncode == 130, r.stderr
    meta = _batch_meta(ck)  # round 3's entries were recorded, its round not reached
    assert (meta["batch"], meta["round"]) == ("0/1", 2)
    assert [[e["round"] for e in h] for h in meta["histories"]] == [[0], [0]]
    assert meta["chunks"] == 1  # the per-round metrics of rounds 1-2 only

    r = _sweep("none", "--resume", str(out))
    assert r.returncode == 0, r.stderr
    assert not ck.exists()
    a = json.loads((out / "sweep.json").read_text())
    b = json.loads((ref / "sweep.json").read_text())
    assert len(a["rows"]) == 4 and [h["round"] for h in a["rows"][0]["history"]] == [0, 3, 6]
    assert a["rows"] == b["rows"]  # every history value, per-round loss and label: equal
    assert a["summary"] == b["summary"] and a["best"] == b["best"]
    same = {k: v for k, v in a["config"].items() if k not in ("out", "resume")}
    assert same == {k: v for k, v in b["config"].items() if k not in ("out", "resume")}


def test_a_resumed_sweep_splits_the_cpu_as_it_did(tmp_path):
    """The CPU split of `sweep --resume` is the one the sweep recorded (a host split
    differently runs other programs, whose results differ in the last bits), unless a
    layout flag is given; a folder without a sweep checkpoint leaves the split alone (the
    command then refuses it in one line)."""
    ck = tmp_path / "s" / "sweep-checkpoint"
    ck.mkdir(parents=True)
    (ck / "spec.json").write_text(json.dumps({"config": {"cohort": 3}, "cpu_devices": 5}))
    parse = make_parser().parse_args
    assert cpu_devices_for(parse(["sweep", "--resume", str(tmp_path / "s")])) == 5
    assert cpu_devices_for(parse(["sweep", "--resume", str(tmp_path / "s"),
                                  "--cpu-devices", "3"])) == 3
    assert cpu_devices_for(parse(["sweep", "--resume", str(tmp_path / "s"),
                                  "--devices", "1"])) == 0
    assert (cpu_devices_for(parse(["sweep", "--resume", str(tmp_path / "none")]))
            == cpu_devices_for(parse(["sweep"])))
