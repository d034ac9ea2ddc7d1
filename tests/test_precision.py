"""`--precision`: the arithmetic of a model's forward and backward pass (core/precision.py)."""

from __future__ import annotations

import json

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_refused

from fedjax_appeal.core.config import ConfigError
from fedjax_appeal.core.models import make_model
from fedjax_appeal.core.precision import check_precision


def _model(name: str, precision: str, shape=(8, 8)):
    return make_model(name, "tiny", 4, shape, jnp.uint8, precision=precision)


def _batch(shape=(8, 8), n=6):
    rng = np.random.default_rng(0)
    return (jnp.asarray(rng.integers(0, 256, (n, *shape)), jnp.uint8),
            jnp.asarray(rng.integers(0, 4, n)))


def _dots(model, params, state, x, y):
    """The dtypes of every dot_general's operands and its precision, in the gradient's
    jaxpr (forward and backward)."""
    jaxpr = jax.make_jaxpr(jax.grad(lambda p: model.loss(p, state, x, y, train=False)[0]))(
        params)
    out = []

    def walk(j):
        for e in j.eqns:
            if e.primitive.name == "dot_general":
                out.append((tuple(str(v.aval.dtype) for v in e.invars),
                            str(e.params.get("precision"))))
            for sub in jax.extend.core.jaxprs_in_params(e.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    return out


@pytest.mark.parametrize("name", ["mlp", "lenet5"])
def test_bf16_computes_in_bfloat16_with_float32_master_weights(name):
    shape = (28, 28) if name == "lenet5" else (8, 8)
    x, y = _batch(shape)
    ref, low = _model(name, "default", shape), _model(name, "bf16", shape)
    params, state = ref.init(jax.random.key(0))
    dots = _dots(low, params, state, x, y)
    assert dots and all(d == ("bfloat16", "bfloat16") for d, _ in dots)
    assert all(d == ("float32", "float32") for d, _ in _dots(ref, params, state, x, y))
    (l_ref, _), g_ref = jax.value_and_grad(
        lambda p: ref.loss(p, state, x, y, train=False), has_aux=True)(params)
    (l_low, _), g_low = jax.value_and_grad(
        lambda p: low.loss(p, state, x, y, train=False), has_aux=True)(params)
    assert l_low.dtype == jnp.float32
    for a, b in zip(jax.tree.leaves(g_ref), jax.tree.leaves(g_low), strict=True):
        assert b.dtype == jnp.float32 == a.dtype  # the update stays float32
    # bfloat16 keeps 8 mantissa bits: close to the float32 loss, and not equal to it
    assert abs(float(l_low) - float(l_ref)) < 0.02 * abs(float(l_ref)) + 1e-3
    assert float(l_low) != float(l_ref)
    logits, _ = low.apply(params, state, x, train=False)
    assert logits.dtype == jnp.float32


def test_fp32_asks_for_exact_float32_matmuls_and_default_leaves_them_to_jax():
    x, y = _batch()
    params, state = _model("mlp", "default").init(jax.random.key(1))
    fp32 = _dots(_model("mlp", "fp32"), params, state, x, y)
    default = _dots(_model("mlp", "default"), params, state, x, y)
    assert fp32 and all("HIGHEST" in p for _, p in fp32)
    assert default and all("HIGHEST" not in p for _, p in default)
    # on the CPU both are float32 arithmetic: the same loss
    l32 = _model("mlp", "fp32").loss(params, state, x, y, train=False)[0]
    ld = _model("mlp", "default").loss(params, state, x, y, train=False)[0]
    assert float(l32) == float(ld)


def test_batchnorm_statistics_stay_float32_under_bf16():
    x, y = _batch((32, 32, 3))
    x = x.reshape(6, 32, 32, 3)
    model = make_model("cnn_bn", "tiny", 4, (32, 32, 3), jnp.uint8, precision="bf16")
    params, state = model.init(jax.random.key(2))
    assert state
    _, new = model.loss(params, state, x, y, train=True, key=jax.random.key(3))
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(new), strict=True):
        assert a.dtype == b.dtype == jnp.float32
    assert any(not np.array_equal(a, b) for a, b in
               zip(jax.tree.leaves(state), jax.tree.leaves(new), strict=True))


def test_tf32_is_refused_without_a_gpu_and_unknown_names_are_refused():
    with pytest.raises(ConfigError, match="needs a GPU"):
        check_precision("tf32", "cpu")
    check_precision("tf32", "gpu")
    with pytest.raises(ConfigError, match="choose one of: default, fp32, tf32, bf16"):
        check_precision("fp16", "cpu")


def test_the_command_refuses_tf32_on_the_cpu_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert_refused(["run", "--dataset", "synthetic", "--rounds", "1", "--precision", "tf32",
                    "--out", str(out)], out, capsys, "--precision tf32 needs a GPU")


@pytest.mark.slow
def test_a_bf16_run_records_its_precision_and_trains(tmp_path):
    from fedjax_appeal.cli.commands import main

    out = tmp_path / "bf16"
    main(["run", "--dataset", "synthetic", "--model", "logistic", "--clients", "6",
          "--unseen-clients", "0", "--cohort", "3", "--rounds", "3", "--local-steps", "2",
          "--precision", "bf16", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["precision"] == "bf16"
    assert res["history"][-1]["test_acc_seen"] > res["history"][0]["test_acc_seen"]
