"""Model export: a saved model reloads with identical predictions (MLP with dropout, a
BatchNorm model with state, the model a CLI run wrote), its names are flax's, and a run's
final accuracy is recomputed from the exported file alone."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.cli.commands import main
from fedjax_appeal.core.config import ConfigError, RunConfig, field_names
from fedjax_appeal.core.models import make_model
from fedjax_appeal.data import load_federated
from fedjax_appeal.run.export import load_model, save_model


def perturbed(model, seed):
    params, state = model.init(jax.random.key(seed))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    leaves = [a + 0.1 * jax.random.normal(k, a.shape) for a, k in zip(leaves, keys, strict=True)]
    state = jax.tree.map(lambda a: a + 0.5, state)  # non-default BatchNorm statistics
    return jax.tree.unflatten(tree, leaves), state


@pytest.mark.parametrize("name, shape", [("mlp", (28, 28)), ("cnn_bn", (28, 28, 1))])
def test_reload_gives_identical_predictions(tmp_path, name, shape):
    model = make_model(name, "mnist", 10, shape, jnp.uint8, scale=1 / 255, mean=0.13,
                       std=0.31)
    params, state = perturbed(model, 3)
    save_model(tmp_path, model, params, state)
    m2, p2, s2 = load_model(tmp_path)
    x = np.random.default_rng(0).integers(0, 256, (7, *shape)).astype(np.uint8)
    want, _ = model.apply(params, state, x, train=False)
    got, _ = m2.apply(p2, s2, x, train=False)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    meta = json.loads((tmp_path / "model.json").read_text())
    assert meta["model"] == name and meta["input_shape"] == list(shape)
    assert meta["mean"] == [0.13] and meta["scale"] == pytest.approx(1 / 255)
    first = "Dense_0/kernel" if name == "mlp" else "Conv_0/kernel"
    assert first in meta["params"]
    assert meta["state_collections"] == ([] if name == "mlp" else ["batch_stats"])
    assert meta["conv_impl"] == getattr(model.module, "conv_impl", None)
    if name != "mlp":  # the other convolution gives the same function up to rounding
        other = "xla" if meta["conv_impl"] == "patches" else "patches"
        m3, p3, s3 = load_model(tmp_path, conv_impl=other)
        assert m3.module.conv_impl == other
        np.testing.assert_allclose(np.asarray(m3.apply(p3, s3, x, train=False)[0]),
                                   np.asarray(want), rtol=1e-4, atol=1e-4)


def test_cli_run_exports_the_final_model_and_its_accuracy_recomputes(tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--dataset", "synthetic", "--clients", "6", "--unseen-clients", "0",
                 "--cohort", "3", "--rounds", "3", "--local-steps", "3", "--batch-size", "8",
                 "--eval-every", "3", "--min-samples", "4", "--partition", "natural",
                 "--no-appeal", "--client-lr", "0.3", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    model, params, state = load_model(out)
    fields = set(field_names(RunConfig))
    cfg = RunConfig(**{k: v for k, v in res["config"].items() if k in fields})
    data, _ = load_federated(cfg)
    te = data.test
    x, y = np.asarray(te.x), np.asarray(te.y)
    logits, _ = model.apply(params, state, x, train=False)
    correct = np.asarray(jnp.argmax(logits, -1)) == y
    per_client = [correct[o:o + c].mean() for o, c in zip(np.asarray(te.offset),
                                                           np.asarray(te.count), strict=True)]
    assert float(np.mean(per_client)) == pytest.approx(res["history"][-1]["test_acc_seen"],
                                                       abs=1e-6)


def test_missing_or_unregistered_model_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="holds no exported model"):
        load_model(tmp_path)
    model = make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)
    save_model(tmp_path, model, *model.init(jax.random.key(0)))
    meta = json.loads((tmp_path / "model.json").read_text())
    meta["model"] = "my_net"
    (tmp_path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="pass its flax module"):
        load_model(tmp_path)
    m2, p2, _ = load_model(tmp_path, module=model.module)
    assert m2.name == "my_net" and p2["Dense_0"]["kernel"].shape == (5, 3)
