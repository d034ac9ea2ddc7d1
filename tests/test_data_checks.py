"""Every data source is checked before anything trains, and a model that cannot take the
data is refused: one line, exit 2, nothing written. `--num-classes` states a class count
that the labels do not cover."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import assert_refused

from fedjax_appeal.cli.commands import main
from fedjax_appeal.data import sources

SMALL = ["--clients", "2", "--unseen-clients", "0", "--cohort", "1", "--rounds", "1",
         "--min-samples", "2"]


def _npz(tmp_path, y, x=None):
    f = tmp_path / "data" / "d.npz"
    f.parent.mkdir(exist_ok=True)
    x = np.zeros((len(y), 3), np.float32) if x is None else x
    np.savez(f, x=x, y=np.asarray(y))
    return f


def _files(tmp_path):
    (tmp_path / "runs").mkdir()
    return tmp_path / "runs" / "r"


def test_num_classes_states_classes_the_labels_do_not_use(tmp_path):
    f = _npz(tmp_path, np.arange(40) % 3)
    out = tmp_path / "r"
    assert main(["run", "--dataset", f"npz:{f}", *SMALL, "--num-classes", "10", "--out",
                 str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["data"]["num_classes"] == 10 and res["config"]["num_classes"] == 10
    meta = json.loads((out / "model.json").read_text())
    assert meta["num_classes"] == 10
    last = max((k for k in meta["params"] if k.endswith("/kernel")),
               key=lambda k: int(k.split("/")[0].split("_")[-1]))
    assert meta["params"][last][-1] == 10  # the output layer has ten scores


def test_num_classes_lets_sparse_labels_through(tmp_path, capsys):
    f = _npz(tmp_path, np.where(np.arange(40) % 2 == 0, 0, 9))  # labels {0, 9}
    out = _files(tmp_path)
    assert_refused(["run", "--dataset", f"npz:{f}", *SMALL, "--out", str(out)], out, capsys,
                   "would make a 10-class model; relabel them to 0 .. 1, or state the class "
                   "count with --num-classes")
    assert main(["run", "--dataset", f"npz:{f}", *SMALL, "--num-classes", "10", "--out",
                 str(out)]) == 0


@pytest.mark.parametrize("flags, msg", [
    (["--num-classes", "5"], "--num-classes 5 but a label is 1000000; give --num-classes "
                             "1000001 or more, or relabel"),
    (["--num-classes", "-1"], "--num-classes must be >= 0 (got -1)"),
])
def test_num_classes_refusals(tmp_path, capsys, flags, msg):
    f = _npz(tmp_path, np.r_[np.arange(39) % 2, 10 ** 6])
    out = _files(tmp_path)
    assert_refused(["run", "--dataset", f"npz:{f}", *SMALL, *flags, "--out", str(out)], out,
                   capsys, msg)


def test_fewer_classes_than_a_builtin_dataset_has(tmp_path, capsys):
    out = _files(tmp_path)
    assert_refused(["run", "--dataset", "synthetic", *SMALL, "--num-classes", "3", "--out",
                    str(out)], out, capsys, "has 10 classes; --num-classes 3 is fewer")


def test_registered_datasets_are_checked(tmp_path, capsys):
    from fedjax_appeal.extend import register_dataset, registrations

    with registrations():
        @register_dataset("nan_features")
        def nan_features(cfg, rng):
            x = np.ones((40, 3), np.float32)
            x[5, 1] = np.nan
            return sources.Dataset("nan_features", x, np.arange(40) % 2, 2, None, 1.0, 0.0, 1.0)

        out = _files(tmp_path)
        assert_refused(["run", "--dataset", "nan_features", *SMALL, "--out", str(out)], out,
                       capsys, "nan_features: 1 rows of x hold NaN or infinite values "
                               "(first: row 5)")


def test_tfds_labels_are_checked(tmp_path, capsys, monkeypatch):
    import tensorflow_datasets as tfds

    real = sources._read_source

    def stray_label(src):  # the mocked source's images, one label of -3
        x, y = real(src)
        y[2] = -3
        return x, y

    monkeypatch.setattr(sources, "_read_source", stray_label)
    out = _files(tmp_path)
    with tfds.testing.mock_data(num_examples=20):
        assert_refused(["run", "--dataset", "tfds:mnist", "--cache-dir", str(tmp_path / "c"),
                        *SMALL, "--out", str(out)], out, capsys,
                       "tfds:mnist: y must be non-negative integer class labels of shape [N] "
                       "(got int64 of shape (40,), smallest -3)")


def test_generated_pools_are_checked(tmp_path, capsys):
    f = _npz(tmp_path, np.r_[np.arange(39) % 2, 10 ** 6])
    out = _files(tmp_path)
    assert_refused(["run", "--dataset", f"npz:{f}", "--imbalance-ratios", "1.0", *SMALL,
                    "--out", str(out)], out, capsys, "would make a 1000001-class model")


def test_convolutional_model_on_flat_features(tmp_path, capsys):
    f = _npz(tmp_path, np.arange(40) % 2, x=np.zeros((40, 784), np.float32))
    out = _files(tmp_path)
    assert_refused(["run", "--dataset", f"npz:{f}", "--model", "cnn", *SMALL, "--out",
                    str(out)], out, capsys,
                   "--model cnn cannot take inputs of shape (784,) (convolutional models need "
                   "images [H, W] or [H, W, C]): TypeError:")
