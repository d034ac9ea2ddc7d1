"""`--dataset npz:PATH`: your own arrays through run (appeal protocol on), sweep and the
loader, with explicit input scaling; malformed files refused in one line before anything runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedjax_appeal.cli.commands import main
from fedjax_appeal.data.sources import load_npz


def image_npz(path, n=240, clients=12, split=False):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (n, 6, 6)).astype(np.uint8)
    y = rng.integers(0, 3, n)
    x[y == 1, :3] = 250  # learnable signal
    ids = np.arange(n) % clients
    if split:
        h = n // 2
        np.savez(path, x_train=x[:h], y_train=y[:h], x_test=x[h:], y_test=y[h:],
                 client_ids_train=ids[:h], client_ids_test=ids[h:])
    else:
        np.savez(path, x=x, y=y, client_ids=ids)
    return x, y, ids


RUN = ["--clients", "8", "--unseen-clients", "4", "--cohort", "3", "--rounds", "2",
       "--local-steps", "2", "--batch-size", "8", "--eval-every", "1", "--min-samples", "4",
       "--partition", "natural"]


def test_run_with_appeal_and_sweep_under_its_own_name(tmp_path):
    f = tmp_path / "mine.npz"
    image_npz(f)
    out = tmp_path / "r"
    assert main(["run", "--dataset", f"npz:{f}", *RUN, "--appeal", "on", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["model"] == "mlp"
    assert res["data"]["clients"] == 8 and res["data"]["unseen_clients"] == 4
    assert res["data"]["train_samples"] + res["data"]["test_samples"] == 8 * 20
    assert res["data"]["input_shape"] == [6, 6] and res["data"]["num_classes"] == 3
    last = res["history"][-1]  # the appeal protocol ran: GM-Appeal of seen and unseen
    assert 0.0 <= last["gm_appeal_seen"] <= 1.0 and 0.0 <= last["gm_appeal_unseen"] <= 1.0
    sw = tmp_path / "sw"
    assert main(["sweep", "--dataset", f"npz:{f}", *RUN, "--grid", "client_lr=0.1,0.01",
                 "--out", str(sw)]) == 0
    assert len(json.loads((sw / "sweep.json").read_text())["rows"]) == 2


def test_loader_pools_splits_and_scales(tmp_path):
    f = tmp_path / "split.npz"
    x, y, ids = image_npz(f, split=True)
    ds = load_npz(f)
    np.testing.assert_array_equal(ds.x, x)
    np.testing.assert_array_equal(ds.y, y)
    np.testing.assert_array_equal(ds.groups, ids)
    assert ds.name == "npz:split" and ds.num_classes == 3 and ds.scale == pytest.approx(1 / 255)
    assert float(ds.mean) == pytest.approx(x.mean() / 255, rel=1e-5)
    g = tmp_path / "feat.npz"
    feats = np.random.default_rng(1).normal(3.0, 2.0, (50, 4)).astype(np.float64)
    np.savez(g, x=feats, y=np.arange(50) % 2)
    assert load_npz(g).scale == 1.0  # floats are not divided by 255
    ds = load_npz(g, input_scale=0.5)
    assert ds.x.dtype == np.float32 and ds.scale == 0.5
    assert float(ds.mean) == pytest.approx(0.5 * feats.mean(), rel=1e-5)
    assert float(ds.std) == pytest.approx(0.5 * feats.std(), rel=1e-5)


@pytest.mark.parametrize("arrays, extra, msg", [
    (None, [], "does not exist"),
    ({"a": np.zeros(3)}, [], "a dataset npz needs x and y"),
    ({"x": np.zeros((4, 2), np.uint8), "y": np.zeros(4)}, [], "non-negative integer class"),
    ({"x": np.zeros((4, 2), np.uint8), "y": np.zeros(5, int)}, [], "same number of rows"),
    ({"x": np.zeros((40, 2), np.uint8), "y": np.zeros(40, int)}, ["--input-scale", "-1"],
     "--input-scale must be >= 0 (got -1.0)"),
    ({"x": np.where(np.arange(80).reshape(40, 2) == 7, np.nan, 1.0), "y": np.arange(40) % 2},
     [], "1 rows of x hold NaN or infinite values (first: row 3)"),
    ({"x": np.full((40, 2), np.inf), "y": np.arange(40) % 2}, [], "NaN or infinite"),
    ({"x": np.zeros((40, 2), np.uint8), "y": np.r_[np.arange(39) % 2, 10 ** 6]}, [],
     "would make a 1000001-class model; relabel them to 0 .. 2"),
    ({"x_train": np.zeros((20, 2), np.uint8), "y_train": np.zeros(20, int),
      "x_test": np.zeros((20, 3), np.uint8), "y_test": np.zeros(20, int)}, [],
     "different shapes"),
])
def test_bad_files_are_one_line_and_nothing_written(tmp_path, capsys, arrays, extra, msg):
    f = tmp_path / "bad.npz"
    if arrays is not None:
        np.savez(f, **arrays)
    out = tmp_path / "r"
    assert main(["run", "--dataset", f"npz:{f}", "--clients", "2", "--unseen-clients", "0",
                 "--cohort", "1", "--rounds", "1", "--min-samples", "2", *extra,
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not out.exists()


def test_input_scale_is_refused_for_registered_datasets(tmp_path, capsys):
    assert main(["run", "--dataset", "synthetic", "--input-scale", "0.5", "--out",
                 str(tmp_path / "r")]) == 2
    assert "--input-scale applies to --dataset npz:PATH only" in capsys.readouterr().err


def _corrupt(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:  # one byte flipped inside the largest member's data: the zip's directory is
        # valid, that member's CRC is not
        import struct
        import zipfile

        with zipfile.ZipFile(path) as zf:
            info = max(zf.infolist(), key=lambda i: i.file_size)
        h = info.header_offset
        name_len, extra_len = struct.unpack("<HH", bytes(data[h + 26:h + 30]))
        i = h + 30 + name_len + extra_len + info.file_size - 4  # inside the array's values
        data[i] ^= 0xFF
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_corrupt_data_file_is_one_line(tmp_path, capsys, how):
    f = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(f, x=rng.integers(0, 255, (400, 16), dtype=np.uint8), y=np.arange(400) % 4)
    _corrupt(f, how)
    out = tmp_path / "r"
    assert main(["run", "--dataset", f"npz:{f}", "--clients", "4", "--unseen-clients", "0",
                 "--cohort", "2", "--rounds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(f) in err and "Traceback" not in err
    assert not out.exists()


def test_a_file_that_is_not_an_npz_is_named_so(tmp_path, capsys):
    f = tmp_path / "data.npz"
    f.write_text("garbage\n")
    out = tmp_path / "r"
    assert main(["run", "--dataset", f"npz:{f}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot read {f}: it is not an npz file" in err
    assert "pickle" not in err and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_corrupt_checkpoint_is_one_line(tmp_path, capsys, how):
    out = tmp_path / "r"
    args = ["run", "--dataset", "synthetic", "--clients", "6", "--unseen-clients", "0",
            "--cohort", "2", "--rounds", "2", "--local-steps", "2", "--batch-size", "4",
            "--checkpoint-every", "1", "--out", str(out)]
    assert main(args) == 0
    ck = out / "checkpoint.npz"
    assert ck.exists()
    _corrupt(ck, how)
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--rounds", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint" in err and "Traceback" not in err
