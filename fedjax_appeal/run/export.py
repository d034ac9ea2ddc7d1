"""Model export: the final global model with named parameters, and one function to load it.

`save_model(folder, model, params, state)` writes two files:

  * `model.msgpack`: `{"params": ..., "state": ...}` in flax's msgpack serialization
    (`flax.serialization.to_bytes`): the nested parameter names of the flax module
    (`Dense_0/kernel`, `Conv_1/bias`, BatchNorm `batch_stats`, ...) with their arrays.
  * `model.json`: what rebuilds the module: the registered model name, number of classes,
    input shape and dtype, the input normalisation (scale, mean, std), the objective, and the
    parameter names with their shapes.

`load_model(folder)` returns `(model, params, state)`, ready for
`model.apply(params, state, x, train=False)`; it needs no run folder, config or data.
Models built outside the registry (`models.MODELS`) load by passing their flax `module=`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from ..core.config import ConfigError
from ..core.conv import resolve_conv_impl
from ..core.models import MODELS, Model, Normalize
from ..core.sequence import is_sequence

MODEL_FILE = "model.msgpack"
META_FILE = "model.json"
FORMAT = "fedjax_appeal.model/1"


def _norm_of(model: Model) -> Normalize:
    norm = getattr(model.module, "norm", None)
    return norm if isinstance(norm, Normalize) else Normalize()


def model_meta(model: Model, params: Any, state: Any) -> dict[str, Any]:
    """The description `load_model` rebuilds the model from (JSON-able)."""
    norm = _norm_of(model)
    names = {"/".join(str(getattr(k, "key", k)) for k in path): list(np.shape(leaf))
             for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
    return {"format": FORMAT, "model": model.name,
            "num_classes": int(getattr(model.module, "num_classes", 0)),
            "input_shape": list(model.input_shape),
            "input_dtype": jnp.dtype(model.input_dtype).name,
            "scale": float(norm.scale), "mean": list(norm.mean), "std": list(norm.std),
            "objective": model.objective, "params": names,
            "state_collections": sorted(state) if isinstance(state, dict) else [],
            "conv_impl": getattr(model.module, "conv_impl", None),
            **({"sequence": {"vocab_size": int(model.module.vocab_size),
                             "per_position": bool(model.module.per_position)}}
               if is_sequence(model.module) else {})}


def save_model(folder: str | Path, model: Model, params: Any, state: Any = None) -> Path:
    """Write `model.msgpack` and `model.json` into `folder` (created if needed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {} if state is None else state
    payload = {"params": jax.device_get(params), "state": jax.device_get(state)}
    (folder / MODEL_FILE).write_bytes(flax.serialization.to_bytes(payload))
    (folder / META_FILE).write_text(json.dumps(model_meta(model, params, state), indent=1))
    return folder


def model_writers(model: Model, params: Any, state: Any) -> dict[str, Any]:
    """`report.write_outputs` writers for the two files (all-or-nothing with a run's others)."""
    payload = {"params": jax.device_get(params), "state": jax.device_get(state or {})}
    meta = model_meta(model, params, state or {})
    return {MODEL_FILE: lambda p: p.write_bytes(flax.serialization.to_bytes(payload)),
            META_FILE: lambda p: p.write_text(json.dumps(meta, indent=1))}


def load_model(folder: str | Path, module=None, conv_impl: str | None = None
               ) -> tuple[Model, Any, Any]:
    """(model, params, state) of a model written by `save_model` or `fedjax-appeal run`.

    The model takes what the run's data hold, unnormalised: `x` of shape
    [N, *model.input_shape] and dtype `model.input_dtype` (raw uint8 pixels 0-255 for image
    datasets, e.g. Fashion-MNIST [N, 28, 28] uint8; float features for `sent140`,
    `synthetic` and float npz data; int32 token ids for the token tasks, whose tokenizer is
    the run's `tokenizer.json`, `data.text.Tokenizer.load`); the model scales and
    standardises its input itself.
    `model.apply(params, state, x, train=False)` returns (logits [N, classes], state), and
    `logits.argmax(-1)` the predicted classes.

    Args:
      folder: the folder holding `model.msgpack` and `model.json` (a run's `--out`).
      module: the flax module, for models not in the registry (default: rebuilt by name).
      conv_impl: how a convolutional model convolves ("xla", "patches", "auto"; see
        `core/conv.py`); default: as when it was saved, so predictions are bit-identical.
    """
    folder = Path(folder)
    if not (folder / MODEL_FILE).exists() or not (folder / META_FILE).exists():
        raise ConfigError(f"{folder} holds no exported model ({MODEL_FILE} and {META_FILE}); "
                          "pass a folder written by `fedjax-appeal run`")
    meta = json.loads((folder / META_FILE).read_text())
    if meta.get("format") != FORMAT:
        raise ConfigError(f"{folder / META_FILE}: unknown format {meta.get('format')!r} "
                          f"(expected {FORMAT!r})")
    if module is None:
        if meta["model"] not in MODELS:
            raise ConfigError(f"model {meta['model']!r} is not registered: pass its flax "
                              "module as load_model(folder, module=...)")
        norm = Normalize(meta["scale"], tuple(meta["mean"]), tuple(meta["std"]))
        module = MODELS[meta["model"]](meta["num_classes"], norm)
        if meta.get("sequence"):  # token ids: the vocabulary and the head of the run
            module = module.clone(**meta["sequence"])
        impl = conv_impl or meta.get("conv_impl")
        if impl and "conv_impl" in getattr(module, "__dataclass_fields__", {}):
            try:
                module = module.clone(conv_impl=resolve_conv_impl(impl))
            except ValueError as e:
                raise ConfigError(str(e)) from None
    model = Model(module, tuple(meta["input_shape"]), jnp.dtype(meta["input_dtype"]),
                  meta["model"], meta.get("objective", "xent"))
    params, state = model.init(jax.random.key(0))
    template = {"params": params, "state": state}
    restored = flax.serialization.from_bytes(template, (folder / MODEL_FILE).read_bytes())
    return model, restored["params"], restored["state"]
