"""User-supplied values refused in one line before any work, nothing written: seeds outside
int64, a config file that is not UTF-8, an output name longer than a file system allows,
and a sweep's bad seeds (which once left a half-written sweep checkpoint)."""

from __future__ import annotations

import pytest
from conftest import XLA_CACHE_ENV, assert_refused

RUN = ["run", "--dataset", "synthetic", "--clients", "4", "--unseen-clients", "0",
       "--cohort", "2", "--rounds", "1"]


@pytest.mark.parametrize("flags, msg", [
    (["--seed", "-1"], "--seed must be in [0, 2^63) (got -1)"),
    (["--seed", str(2 ** 63)], "--seed must be in [0, 2^63)"),
    (["--data-seed", "-2"], "--data-seed must be in [-1, 2^63)"),
])
def test_seeds_outside_int64_are_refused(tmp_path, capsys, flags, msg):
    out = tmp_path / "r"
    assert_refused([*RUN, *flags, "--out", str(out)], out, capsys, msg)


def test_config_file_that_is_not_utf8(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b"rounds = 2\n# caf\xe9\n")  # Latin-1
    (tmp_path / "o").mkdir()
    out = tmp_path / "o" / "r"
    assert_refused([*RUN, "--config", str(cfg), "--out", str(out)], out, capsys,
                   "is not UTF-8 text (byte 0xe9")


def test_out_name_longer_than_the_file_system_allows(tmp_path, capsys):
    from fedjax_appeal.cli.commands import main

    assert main([*RUN, "--out", str(tmp_path / ("a" * 300))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "longer than a file system allows (255)" in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seeds", ["-1", "0,9223372036854775808"])
def test_sweep_bad_seeds_write_nothing(tmp_path, capsys, seeds):
    out = tmp_path / "s"
    assert_refused(["sweep", *RUN[1:], "--grid", "client_lr=0.1", "--seeds", seeds,
                    "--out", str(out)], out, capsys, "is not a seed")


@pytest.mark.slow
def test_two_runs_on_one_folder(tmp_path, capsys):
    """The second run on a folder in use exits 2 before loading data and leaves the first
    run's files alone; the first run ends normally and releases the lock."""
    import json
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from fedjax_appeal.cli.commands import main
    from fedjax_appeal.run.outlock import LOCK_FILE

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "r"
    env = {**os.environ, **XLA_CACHE_ENV, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu",
           "FEDJAX_APPEAL_TEST_SLEEP_AFTER_CHECKPOINT": "0.3"}
    first = subprocess.Popen([sys.executable, "-m", "fedjax_appeal", *RUN[:-1], "8",
                              "--checkpoint-every", "1", "--out", str(out)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (out / LOCK_FILE).exists():
        time.sleep(0.05)
    owner = json.loads((out / LOCK_FILE).read_text())
    assert owner["pid"] == first.pid
    assert main([*RUN, "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is in use by process {first.pid}" in err[0], err
    _, ferr = first.communicate(timeout=300)
    assert first.returncode == 0, ferr
    assert (out / "results.json").exists() and not (out / LOCK_FILE).exists()


def test_stale_lock_is_reported_and_taken_over(tmp_path, capsys):
    import json
    import socket
    import subprocess
    import sys

    from fedjax_appeal.cli.commands import main
    from fedjax_appeal.run.outlock import LOCK_FILE

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    out = tmp_path / "r"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": int(dead), "host": socket.gethostname(),
                                             "started": "earlier"}))
    assert main([*RUN, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"was left by process {dead}" in err and "taking it over" in err
    assert (out / "results.json").exists() and not (out / LOCK_FILE).exists()
    # a live owner on another host is never taken over
    (out / LOCK_FILE).write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": "now"}))
    assert main([*RUN, "--out", str(out), "--overwrite"]) == 2
    assert "is in use by process 1 on elsewhere" in capsys.readouterr().err


def test_sweep_on_a_folder_in_use(tmp_path, capsys):
    """A sweep takes the same lock as a run: a folder in use is refused before any data is
    loaded, and the owner's lock stays."""
    import json

    from fedjax_appeal.cli.commands import main
    from fedjax_appeal.run.outlock import LOCK_FILE

    out = tmp_path / "s"
    out.mkdir()
    owner = json.dumps({"pid": 1, "host": "elsewhere", "started": "now"})
    (out / LOCK_FILE).write_text(owner)
    assert main(["sweep", *RUN[1:], "--grid", "client_lr=0.1,0.2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is in use by process 1 on elsewhere" in err[0], err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    assert (out / LOCK_FILE).read_text() == owner
