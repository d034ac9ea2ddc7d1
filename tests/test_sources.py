"""Data sources: IDX reader, npz loaders (fake files and the shared data when present),
CIFAR JPEG decode + cache, Sent140 features, Synthetic(alpha, beta), tfds under mock_data."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data_dir

from fedjax_appeal.core.config import ConfigError, RunConfig
from fedjax_appeal.data import load_federated, sources


def _idx_bytes(arr: np.ndarray, code: int) -> bytes:
    head = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    dt = {0x08: ">u1", 0x0C: ">i4", 0x0D: ">f4"}[code]
    return head + arr.astype(dt).tobytes()


@pytest.mark.parametrize("code,dtype", [(0x08, np.uint8), (0x0C, np.int32), (0x0D, np.float32)])
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx(tmp_path, code, dtype, gz):
    arr = (np.arange(2 * 3 * 4).reshape(2, 3, 4) * 7 % 251).astype(dtype)
    raw = _idx_bytes(arr, code)
    p = tmp_path / ("a.idx.gz" if gz else "a.idx")
    p.write_bytes(gzip.compress(raw) if gz else raw)
    out = sources.read_idx(p)
    assert out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, arr)


def test_read_idx_rejects_bad_files(tmp_path):
    p = tmp_path / "bad"
    p.write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x05abc")
    with pytest.raises(ValueError, match="magic"):
        sources.read_idx(p)
    p.write_bytes(_idx_bytes(np.zeros(5, np.uint8), 0x08)[:-2])
    with pytest.raises(ValueError, match="header"):
        sources.read_idx(p)


def _fake_fmnist(d: Path, n_train=120, n_test=30):
    rng = np.random.default_rng(0)
    for pre, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
        y = (np.arange(n) % 10).astype(np.uint8)
        (d / f"{pre}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(x, 0x08)))
        (d / f"{pre}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(y, 0x08)))


def test_fmnist_loader_on_fake_files(tmp_path):
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    _fake_fmnist(src)
    ds = sources.load_fmnist(src, cache)
    assert ds.x.shape == (150, 28, 28) and ds.x.dtype == np.uint8
    assert ds.y.tolist()[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert abs(float(ds.mean) - ds.x.mean() / 255) < 1e-5
    # decoded once: the second load reads the cached arrays, equal to the decoded ones
    (kept,) = cache.glob("fmnist_decoded_*.npz")
    again = sources.load_fmnist(src, cache)
    np.testing.assert_array_equal(again.x, ds.x)
    assert again.y.dtype == ds.y.dtype and again.mean == ds.mean and again.std == ds.std
    with np.load(kept) as z:
        np.testing.assert_array_equal(z["x"], ds.x)
    # a changed source is decoded again (another cache file)
    _fake_fmnist(src, n_train=100)
    assert sources.load_fmnist(src, cache).x.shape == (130, 28, 28)
    (new,) = set(cache.glob("fmnist_decoded_*.npz")) - {kept}
    # a torn cache file is decoded again and replaced
    new.write_bytes(new.read_bytes()[:100])
    assert sources.load_fmnist(src, cache).x.shape == (130, 28, 28)
    with np.load(new) as z:
        assert z["x"].shape == (130, 28, 28)


def test_fmnist_missing_says_how_to_install(tmp_path):
    with pytest.raises(ConfigError, match="apt-get install dataset-fashion-mnist"):
        sources.load_fmnist(tmp_path)


def _jpeg(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=100)
    return buf.getvalue()


def _fake_npz_dir(d: Path):
    rng = np.random.default_rng(1)
    np.savez(d / "mnist.npz", x_train=rng.integers(0, 256, (20, 28, 28)).astype(np.uint8),
             y_train=np.arange(20) % 10, x_test=rng.integers(0, 256, (5, 28, 28)).astype(np.uint8),
             y_test=np.arange(5))
    imgs = [np.full((32, 32, 3), v, np.uint8) for v in (0, 128, 255, 64)]
    blobs = [_jpeg(i) for i in imgs]
    off = np.concatenate([[0], np.cumsum([len(b) for b in blobs])])
    np.savez(d / "cifar10_jpeg.npz", classes=np.array(["a"] * 10),
             jpeg_train=np.frombuffer(b"".join(blobs[:3]), np.uint8), offsets_train=off[:4],
             y_train=np.array([0, 1, 2]), jpeg_test=np.frombuffer(blobs[3], np.uint8),
             offsets_test=np.array([0, len(blobs[3])]), y_test=np.array([3]))
    np.savez(d / "femnist_partial.npz", x=np.zeros((6, 28, 28), np.uint8),
             y=np.array([0, 61, 5, 5, 9, 1]), writer=np.array([0, 0, 1, 1, 1, 2]),
             split=np.array([0, 1, 0, 0, 1, 1]), writer_ids=np.array(["a", "b", "c"]))
    np.savez(d / "sent140_subset.npz", text=np.array(["Good day!", "bad BAD x", "zzz"]),
             label=np.array([1, 0, 1]), user=np.array([0, 0, 1]), user_ids=np.array(["u", "v"]))
    np.savez(d / "glove50_sent140.npz", words=np.array(["good", "day", "bad"]),
             vectors=np.arange(150, dtype=np.float32).reshape(3, 50))
    return imgs


def test_npz_loaders_on_fake_files(tmp_path):
    imgs = _fake_npz_dir(tmp_path)
    m = sources.load_mnist(tmp_path)
    assert m.x.shape == (25, 28, 28) and m.num_classes == 10
    cache = tmp_path / "cache"
    c = sources.load_cifar10(tmp_path, cache)
    assert c.x.shape == (4, 32, 32, 3) and c.y.tolist() == [0, 1, 2, 3]
    for got, want in zip(c.x, imgs, strict=True):
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 2  # JPEG round trip
    assert len(list(cache.glob("cifar10_decoded_*.npz"))) == 1
    c2 = sources.load_cifar10(tmp_path, cache)  # from the cache
    np.testing.assert_array_equal(c.x, c2.x)
    assert c.mean.shape == (3,)
    f = sources.load_femnist(tmp_path)
    assert f.num_classes == 62 and f.groups.tolist() == [0, 0, 1, 1, 1, 2]
    s = sources.load_sent140(tmp_path)
    v = np.arange(150, dtype=np.float32).reshape(3, 50)
    np.testing.assert_allclose(s.x[0], (v[0] + v[1]) / 2)  # "good", "day"
    np.testing.assert_allclose(s.x[1], v[2])  # "bad", "bad" ("x" unknown)
    np.testing.assert_allclose(s.x[2], 0.0)  # no known token
    assert s.groups.tolist() == [0, 0, 1] and s.num_classes == 2


def test_tokenizer():
    assert sources.tokenize("I'm SO happy!! :) #2day") == ["i'm", "so", "happy", "2day"]


def test_missing_data_dir_and_file(tmp_path, monkeypatch):
    monkeypatch.delenv(sources.DATA_ENV, raising=False)
    with pytest.raises(ConfigError, match="--data-dir"):
        sources.load_mnist()
    with pytest.raises(ConfigError, match="missing data file"):
        sources.load_mnist(tmp_path)


def test_synthetic_shapes_and_statistics():
    rng = np.random.default_rng(0)
    ds = sources.synthetic(1.0, 1.0, 30, rng)
    assert ds.x.shape[1] == 60 and ds.x.dtype == np.float32 and ds.num_classes == 10
    sizes = np.bincount(ds.groups)
    assert len(sizes) == 30 and sizes.min() >= 50
    assert np.median(np.log(sizes - 50 + 1e-9)) < 6  # lognormal(4, 2) median e^4 ~ 55
    # within a client, feature j has variance j^-1.2
    big = int(np.argmax(sizes))
    xc = ds.x[ds.groups == big]
    var = xc.var(axis=0)
    want = np.arange(1, 61) ** -1.2
    assert np.corrcoef(np.log(var), np.log(want))[0, 1] > 0.9
    # heterogeneity: label distributions differ more than in the IID variant
    def spread(d):
        h = np.stack([np.bincount(d.y[d.groups == k], minlength=10) / np.sum(d.groups == k)
                      for k in range(30)])
        return h.std(axis=0).mean()
    iid = sources.synthetic(0.0, 0.0, 30, np.random.default_rng(0), iid=True)
    assert spread(ds) > spread(iid)


def test_tfds_under_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=9):
        ds = sources.load_tfds("fashion_mnist", use_cache=False)
        assert ds.x.shape == (18, 28, 28) and ds.x.dtype == np.uint8  # train + test
        assert ds.y.min() >= 0 and ds.y.max() < 10
        c = sources.load_tfds("cifar10", use_cache=False)
        assert c.x.shape == (18, 32, 32, 3)
        e = sources.load_tfds("emnist/byclass", use_cache=False)
        assert e.num_classes == 62
    with pytest.raises(ConfigError, match="not supported"):
        sources.load_tfds("imagenet2012")


def test_load_federated_from_fake_fmnist(tmp_path):
    _fake_fmnist(tmp_path, 400, 100)
    cfg = RunConfig(fmnist_dir=str(tmp_path), clients=6, unseen_clients=4, partition="dirichlet",
                    alpha=1.0, min_samples=10)
    data, ds = load_federated(cfg)
    assert data.num_clients == 6 and data.num_unseen == 4
    assert data.train.x.dtype == np.uint8
    total = sum(a.num_samples for a in data.splits().values())
    assert total == 500  # every sample in exactly one split of one client
    ratio = data.train.num_samples / (data.train.num_samples + data.test.num_samples)
    assert abs(ratio - 0.6) < 0.03
    again, _ = load_federated(cfg)
    np.testing.assert_array_equal(np.asarray(data.train.y), np.asarray(again.train.y))


@pytest.mark.data
def test_shared_data_files_load():
    d = shared_data_dir()
    m = sources.load_mnist(d)
    assert m.x.shape == (70000, 28, 28)
    f = sources.load_femnist(d)
    assert f.x.shape == (18796, 28, 28) and len(np.unique(f.groups)) == 184
    s = sources.load_sent140(d)
    assert s.x.shape == (16025, 50) and (np.abs(s.x).sum(1) > 0).mean() > 0.95
    u = sources.load_usps(d)
    assert u.x.shape == (9298, 16, 16)
    cfg = RunConfig(dataset="femnist", data_dir=d, partition="natural", clients=50,
                    unseen_clients=20, min_samples=20)
    data, _ = load_federated(cfg)
    assert data.num_clients == 50 and data.num_classes == 62


@pytest.mark.data
def test_debian_fmnist_files():
    if not Path(sources.FMNIST_DEFAULT_DIR).is_dir():
        pytest.fail(f"no Fashion-MNIST files in {sources.FMNIST_DEFAULT_DIR}: install the "
                    "Debian package dataset-fashion-mnist, or leave the data tests out with "
                    "-m 'not data'", pytrace=False)
    ds = sources.load_fmnist()
    assert ds.x.shape == (70000, 28, 28) and np.bincount(ds.y).tolist() == [7000] * 10


def _stats_by_float64_copy(x: np.ndarray, scale: float):
    """The reference: mean and std over a float64 copy of every pixel."""
    mean = np.asarray(x.mean(dtype=np.float64) * scale, np.float32)
    std = np.asarray(x.std(dtype=np.float64) * scale, np.float32)
    return mean, np.maximum(std, 1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_image_stats_from_value_counts_equal_the_float64_reference(seed):
    rng = np.random.default_rng(seed)
    shape = [(50, 28, 28), (7, 16, 16), (3, 5, 5), (1000, 8, 8), (2, 2, 2), (40, 32, 32)][seed]
    x = rng.integers(0, 256 if seed % 2 else 40, size=shape).astype(np.uint8)
    got, want = sources._image_stats(x, 1 / 255), _stats_by_float64_copy(x, 1 / 255)
    assert got[0].dtype == want[0].dtype == np.float32
    assert got[0] == want[0] and got[1] == want[1]
    flat = np.full((4, 3, 3), 7, np.uint8)  # a constant image: std floored at 1e-6
    assert sources._image_stats(flat, 1 / 255)[1] == np.float32(1e-6)


@pytest.mark.data
def test_image_stats_of_the_shipped_datasets_equal_the_float64_reference():
    d = shared_data_dir()
    for z in (np.load(Path(d) / "mnist.npz"), np.load(Path(d) / "usps.npz")):
        x = np.concatenate([z["x_train"], z["x_test"]])
        got, want = sources._image_stats(x, 1 / 255), _stats_by_float64_copy(x, 1 / 255)
        assert got[0] == want[0] and got[1] == want[1]
    ds = sources.load_fmnist()
    want = _stats_by_float64_copy(ds.x, 1 / 255)
    assert ds.mean == want[0] and ds.std == want[1]
