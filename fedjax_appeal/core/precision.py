"""The arithmetic a model trains and evaluates in: `RunConfig.precision` (`--precision`).

  * ``default``: JAX's default for float32 matmuls and convolutions: float32 on the CPU,
    TensorFloat-32 tensor cores on an Ampere or newer GPU (inputs rounded to 10 mantissa
    bits, float32 accumulation). Every earlier result of the project was made with it.
  * ``fp32``: float32 matmuls and convolutions on every backend
    (`jax.default_matmul_precision("float32")` around the model's forward pass; its
    gradient follows). On the CPU the same numbers as ``default``.
  * ``tf32``: TensorFloat-32 matmuls and convolutions asked for explicitly; only a GPU has
    them, so a CPU run refuses it (`check_precision`).
  * ``bf16``: the forward and backward pass in bfloat16 with float32 master weights: the
    float parameters are cast to bfloat16 on their way into the model (the gradient is cast
    back through the cast, so the SGD update and the server's average stay float32), every
    submodule's float inputs are cast to bfloat16 (`flax.linen.intercept_methods`), inputs
    are normalised in float32 before the cast, and the logits return to float32 for the
    loss. BatchNorm statistics stay float32. Half the bytes per activation and weight read,
    which is what a bandwidth-bound local step on a GPU pays for; on the CPU it is emulated
    and slower, so it is there to measure the accuracy effect.
"""

from __future__ import annotations

import contextlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from .errors import ConfigError
from .fields import option

PRECISIONS = ("default", "fp32", "tf32", "bf16")
# bf16: bfloat16 compute, float32 weights
option("precision", "default", "arithmetic of the model's passes", PRECISIONS, group="algorithm")

_MATMUL = {"fp32": "float32", "tf32": "tensorfloat32"}


def cast_floats(tree, dtype):
    """Every floating leaf of `tree` as `dtype`; integer and other leaves unchanged."""
    return jax.tree.map(lambda a: a.astype(dtype) if hasattr(a, "dtype") and jnp.issubdtype(
        a.dtype, jnp.floating) else a, tree)


def matmul_scope(precision: str):
    """The context a forward pass of `precision` is traced in (JAX's matmul precision for
    ``fp32`` and ``tf32``; nothing to change for ``default`` and ``bf16``)."""
    name = _MATMUL.get(precision)
    return jax.default_matmul_precision(name) if name else contextlib.nullcontext()


def _bf16_inputs(next_fun, args, kwargs, context):
    if context.method_name == "__call__":
        args = cast_floats(args, jnp.bfloat16)
    return next_fun(*args, **kwargs)


def apply_in(precision: str, module: nn.Module, variables: dict, *args, **kwargs):
    """`module.apply(variables, *args, **kwargs)` in `precision`; outputs in float32.

    For ``bf16`` the ``params`` collection is cast to bfloat16 and every submodule call
    gets bfloat16 float inputs; other collections (BatchNorm's statistics) keep their
    dtype, and a mutated collection comes back in the dtype it went in with.
    """
    if precision != "bf16":
        with matmul_scope(precision):
            return module.apply(variables, *args, **kwargs)
    low = {**variables, "params": cast_floats(variables["params"], jnp.bfloat16)}
    with nn.intercept_methods(_bf16_inputs):
        out = module.apply(low, *args, **kwargs)
    if kwargs.get("mutable"):
        logits, new = out
        dtypes = {k: jax.tree.map(lambda a: a.dtype, variables[k]) for k in new}
        new = {k: jax.tree.map(lambda a, d: a.astype(d), v, dtypes[k]) for k, v in new.items()}
        return logits.astype(jnp.float32), new
    return out.astype(jnp.float32)


def check_precision(precision: str, backend: str | None = None) -> None:
    """Refuse a precision the backend cannot honour (``tf32`` without a GPU), in one line."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose one of: "
                          f"{', '.join(PRECISIONS)}")
    if precision != "tf32":
        return
    backend = backend or jax.default_backend()
    if backend != "gpu":
        raise ConfigError(f"--precision tf32 needs a GPU with TensorFloat-32 (this run is on "
                          f"{backend}, whose float32 matmuls are exact float32); use "
                          "--precision default, fp32 or bf16")
