"""A user's `flax.linen` module as the package's `Model` (`as_model`).

The conventions a module must follow (docs/library.md, "Your own model"):

  * it is called as `module(x)` on a batch `x` [B, *input_shape] and returns [B, C] scores
    (logits) for C classes; flatten inside the module where needed
    (`x.reshape(len(x), -1)`);
  * inputs arrive normalised: uint8 data as float32 in [0, 1] (x / 255), and uint8 images
    stored [N, H, W] (one channel) with a channel axis, [B, H, W, 1]; float data arrive as
    given (as float32);
  * a module with dropout or batch norm takes its mode by keyword: `train: bool` (True
    while clients train), `training: bool`, or `deterministic: bool` (False while clients
    train); the dropout key comes from the "dropout" stream; a batch norm's statistics
    are its "batch_stats" collection, averaged over the cohort like the weights. A module
    whose `__call__` names none of these keywords is called without one.

The parameters are the module's own (no wrapping scope): `module.apply({"params": p}, x)`
works on what training returns, with the inputs normalised as above.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from .errors import ConfigError
from .models import Model, abstract_key
from .precision import apply_in

# the keyword a module takes its mode by, in the order they are looked for
MODE_KEYWORDS = ("train", "training", "deterministic")


def mode_keyword(module: nn.Module) -> str:
    """The keyword among `MODE_KEYWORDS` that `module.__call__` names ("" for none)."""
    try:
        params = inspect.signature(type(module).__call__).parameters
    except (TypeError, ValueError):
        return ""
    return next((k for k in MODE_KEYWORDS if k in params), "")


@dataclasses.dataclass(frozen=True)
class FlaxModel(Model):
    """`Model` of a user's module (see the module docstring for its conventions).

    scale: what the inputs are multiplied by first (1/255 for uint8 data, else 1).
    channel: add a trailing channel axis (uint8 images stored [N, H, W]).
    mode: the keyword the module takes its mode by ("" = none; see `MODE_KEYWORDS`).
    loss: per-example loss `loss(scores [B, C], labels [B]) -> [B]` (None = softmax
      cross-entropy with integer labels, the package's default).
    """

    scale: float = 1.0
    channel: bool = False
    mode: str = ""
    loss_fn: Callable[[jax.Array, jax.Array], jax.Array] | None = None

    def _inputs(self, x):
        x = x.astype(jnp.float32)
        if self.scale != 1.0:
            x = x * self.scale
        return x[..., None] if self.channel else x

    def _mode(self, train: bool) -> dict:
        if not self.mode:
            return {}
        return {self.mode: (not train) if self.mode == "deterministic" else train}

    def init(self, key: jax.Array) -> tuple[Any, Any]:
        x = self._inputs(jnp.zeros((1, *self.input_shape), self.input_dtype))
        variables = dict(self.module.init({"params": key, "dropout": key}, x,
                                          **self._mode(False)))
        return variables.pop("params"), variables

    def apply(self, params, state, x, *, train: bool, key: jax.Array | None = None):
        rngs = {"dropout": key} if key is not None else {}
        variables = {"params": params, **state}
        x = self._inputs(x)
        if train and state:
            out, new_state = apply_in(self.precision, self.module, variables, x, rngs=rngs,
                                      mutable=list(state.keys()), **self._mode(True))
            return out, dict(new_state)
        return apply_in(self.precision, self.module, variables, x, rngs=rngs,
                        **self._mode(train)), state

    def _losses(self, out, y):
        return super()._losses(out, y) if self.loss_fn is None else self.loss_fn(out, y)


def as_model(module: nn.Module | Model, input_shape: tuple[int, ...], input_dtype,
             num_classes: int, *, loss: Callable | None = None,
             precision: str = "default") -> Model:
    """The `Model` of a flax module for inputs of `input_shape` (one example) and dtype, and
    `num_classes` classes; a `Model` is returned as it is (with `loss`, as a `FlaxModel`
    that computes it).

    The module is traced once (shapes only, nothing computed): one that cannot take the
    inputs, or whose output is not [B, num_classes], is refused in one line that says which
    convention it misses.
    """
    if isinstance(module, Model):
        if loss is None:
            return module
        return FlaxModel(**{f.name: getattr(module, f.name) for f in dataclasses.fields(Model)},
                         mode=mode_keyword(module.module), loss_fn=loss)
    if not isinstance(module, nn.Module):
        raise ConfigError(f"the model must be a flax.linen Module or a fedjax_appeal Model, "
                          f"not {type(module).__name__}")
    input_shape = tuple(int(d) for d in input_shape)
    uint8 = jnp.dtype(input_dtype) == jnp.uint8
    model = FlaxModel(module, input_shape, input_dtype, type(module).__name__,
                      precision=precision, scale=1 / 255 if uint8 else 1.0,
                      channel=uint8 and len(input_shape) == 2, mode=mode_keyword(module),
                      loss_fn=loss)
    check_module(model, num_classes)
    return model


def check_module(model: FlaxModel, num_classes: int) -> None:
    """Refuse, in one line, a module that cannot take the data's inputs or whose output is
    not one score per class (shapes only: `jax.eval_shape`)."""
    name = type(model.module).__name__
    seen = (*model.input_shape, 1) if model.channel else model.input_shape
    try:
        params, state = jax.eval_shape(model.init, abstract_key())
        out = jax.eval_shape(lambda p, s: model.apply(p, s, jnp.zeros(
            (2, *model.input_shape), model.input_dtype), train=False)[0], params, state)
        jax.eval_shape(lambda p, s, k: model.apply(p, s, jnp.zeros(
            (2, *model.input_shape), model.input_dtype), train=True, key=k)[0],
            params, state, abstract_key())
    except Exception as e:  # noqa: BLE001 - flax and lax raise many kinds for a bad fit
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(
            f"the flax module {name} cannot be called on a batch of inputs [B, "
            f"{', '.join(map(str, seen))}] float32 as module(x"
            + (f", {model.mode}=...)" if model.mode else ")")
            + f": {type(e).__name__}: {first} (docs/library.md, 'Your own model')") from None
    want = 1 if model.objective == "mse" else num_classes
    if out.ndim != 2 or out.shape[-1] != want:
        hint = ("; flatten before the last Dense layer: x.reshape(len(x), -1)"
                if out.ndim > 2 else "")
        raise ConfigError(f"the flax module {name} returns scores of shape "
                          f"[B, {', '.join(map(str, out.shape[1:]))}]; the data need [B, "
                          f"{want}] ({num_classes} classes){hint}")
