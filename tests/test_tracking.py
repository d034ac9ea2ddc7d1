"""Experiment tracking: TensorBoard event files read back by TensorBoard's own reader, a W&B
offline run read back from its record log, one tracked run per sweep row, bad --log refused."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from fedjax_appeal.cli.commands import main

TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "0", "--cohort", "3",
        "--rounds", "3", "--local-steps", "2", "--batch-size", "8", "--eval-every", "1",
        "--min-samples", "4", "--partition", "natural", "--no-appeal"]


def read_tb(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_run_tensorboard_scalars_equal_the_history(tmp_path):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--log", "tensorboard", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    tb = read_tb(out / "tensorboard")
    hist = res["history"]
    for key in ("train_loss", "test_acc_seen"):
        steps, vals = zip(*tb[f"eval/{key}"], strict=True)
        assert list(steps) == [h["round"] for h in hist]
        np.testing.assert_allclose(vals, [h[key] for h in hist], rtol=1e-6)
    steps, vals = zip(*tb["round/cohort_loss"], strict=True)
    assert list(steps) == [1, 2, 3]
    np.testing.assert_allclose(vals, res["round_metrics"]["cohort_loss"], rtol=1e-6)
    assert list((out / "tensorboard" / "hparams").glob("events.out.tfevents.*"))


def test_sweep_logs_one_tensorboard_run_per_row(tmp_path):
    out = tmp_path / "sw"
    assert main(["sweep", *TINY, "--grid", "client_lr=0.1,0.01", "--seeds", "0,1", "--log",
                 "tensorboard", "--out", str(out)]) == 0
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert len(rows) == 4
    for row in rows:
        tb = read_tb(out / "tensorboard" / row["label"] / f"seed-{row['seed']}")
        _, vals = zip(*tb["eval/train_loss"], strict=True)
        np.testing.assert_allclose(vals, [h["train_loss"] for h in row["history"]], rtol=1e-6)


def wandb_records(path):
    """Records of a W&B offline run file (LevelDB-style log of 32 KiB blocks, 7-byte chunk
    headers, after a 7-byte file header), parsed with wandb's own protobuf."""
    from wandb.proto import wandb_internal_pb2 as pb

    b = path.read_bytes()
    off, cur, out = 7, b"", []
    while off + 7 <= len(b):
        if 32768 - off % 32768 < 7:
            off += 32768 - off % 32768
            continue
        _, n, kind = struct.unpack("<IHB", b[off:off + 7])
        if n == 0 and kind == 0:
            break
        cur += b[off + 7:off + 7 + n]
        off += 7 + n
        if kind in (1, 4):  # full or last chunk
            rec = pb.Record()
            rec.ParseFromString(cur)
            out.append(rec)
            cur = b""
    return out


def test_run_wandb_offline_history_equals_the_history(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "r"
    assert main(["run", *TINY, "--log", "wandb", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    (log,) = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    logged = {}
    for rec in wandb_records(log):
        if rec.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in rec.history.item}
            if "eval/test_acc_seen" in items:
                logged[items["_step"]] = items["eval/test_acc_seen"]
    assert logged == pytest.approx({h["round"]: h["test_acc_seen"] for h in res["history"]})


def test_unknown_tracker_is_refused_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--log", "tensorboard,mlflow", "--out", str(out)]) == 2
    assert "unknown tracker mlflow" in capsys.readouterr().err
    assert not out.exists()


def test_wandb_without_a_login_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from conftest import assert_refused

    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # no login entry
    (tmp_path / "runs").mkdir()
    out = tmp_path / "runs" / "r"
    assert_refused(["run", *TINY, "--log", "wandb", "--out", str(out)], out, capsys,
                   "--log wandb: no Weights & Biases login here (no WANDB_API_KEY, no `wandb "
                   "login` entry for api.wandb.ai in ~/.netrc); run `wandb login`, or set "
                   "WANDB_MODE=offline")
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password KEY\n")
    from fedjax_appeal.run.tracking import check_wandb_login

    check_wandb_login()  # a login entry is enough
