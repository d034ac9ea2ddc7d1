"""Flax models used by the seed papers, and a small functional wrapper around them.

Inputs arrive as stored (uint8 images or float features); every model's first step
normalises them (`x * scale - mean) / std`), so client data stays compact on device.

Models:
  * `mlp`: MLP [64, 30] with dropout after the first hidden layer (FMNIST/EMNIST/MNIST;
    MaxFL, Cho et al.).
  * `sent_mlp`: MLP [128, 86, 30] on 50-d average GloVe features (Sent140; MaxFL).
  * `cnn`: 2 conv (5x5, 6 and 16 channels) + max-pool, FC [120, 100, 84, 50] (CIFAR-10;
    MaxFL).
  * `lenet5`: LeNet-5 (LeCun et al. 1998) for 28x28 or 32x32 inputs (SubTrunc/UnionFL).
  * `logistic`: multinomial logistic regression (Synthetic(alpha, beta); FedProx).
  * `lstm`, `char_lstm`, `transformer`: sequence models over token ids (`core/sequence.py`),
    classifiers for one label per sequence, language models for one target per position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .config import ConfigError
from .conv import TRAIN_FORMS, Conv, max_pool_2x2, resolve_conv_impl
from .fields import option
from .precision import apply_in, check_precision
from .registry import Registry
from .sequence import SEQUENCE_MODELS, is_sequence, token_loss, token_sums


class Normalize(nn.Module):
    """x -> (x * scale - mean) / std, in float32; flattens nothing."""

    scale: float = 1.0
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)

    def __call__(self, x):
        x = x.astype(jnp.float32) * self.scale
        return (x - jnp.asarray(self.mean, jnp.float32)) / jnp.asarray(self.std, jnp.float32)


class MLP(nn.Module):
    num_classes: int
    hidden: Sequence[int] = (64, 30)
    dropout: float = 0.2  # after the first hidden layer only
    norm: Normalize = dataclasses.field(default_factory=Normalize)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = self.norm(x).reshape((x.shape[0], -1))
        for i, h in enumerate(self.hidden):
            x = nn.relu(nn.Dense(h)(x))
            if i == 0 and self.dropout > 0:
                x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return nn.Dense(self.num_classes)(x)


def _as_image(x):
    return x[..., None] if x.ndim == 3 else x  # [N, H, W] -> [N, H, W, 1]


class CNN(nn.Module):
    """2 conv + max-pool, FC [120, 100, 84, 50] (the MaxFL CIFAR-10 model)."""

    num_classes: int
    fc: Sequence[int] = (120, 100, 84, 50)
    norm: Normalize = dataclasses.field(default_factory=Normalize)
    conv_impl: str = "xla"  # core/conv.py: CONV_IMPLS (after resolve_conv_impl)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = _as_image(self.norm(x))
        for ch in (6, 16):  # conv, ReLU and 2x2 max-pooling (Conv's relu_pool)
            x = Conv(ch, (5, 5), padding="VALID", impl=self.conv_impl, relu_pool=True)(x, train)
        x = x.reshape((x.shape[0], -1))
        for h in self.fc:
            x = nn.relu(nn.Dense(h)(x))
        return nn.Dense(self.num_classes)(x)


class LeNet5(nn.Module):
    """LeNet-5: conv6-pool-conv16-pool-FC120-FC84; 28x28 inputs are padded to 32x32."""

    num_classes: int
    norm: Normalize = dataclasses.field(default_factory=Normalize)
    conv_impl: str = "xla"  # core/conv.py: CONV_IMPLS (after resolve_conv_impl)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = _as_image(self.norm(x))
        pad = "SAME" if x.shape[1] < 32 else "VALID"
        # each: conv, ReLU and 2x2 max-pooling (Conv's relu_pool)
        x = Conv(6, (5, 5), padding=pad, impl=self.conv_impl, relu_pool=True)(x, train)
        x = Conv(16, (5, 5), padding="VALID", impl=self.conv_impl, relu_pool=True)(x, train)
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.num_classes)(x)


class Logistic(nn.Module):
    num_classes: int
    norm: Normalize = dataclasses.field(default_factory=Normalize)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = self.norm(x).reshape((x.shape[0], -1))
        return nn.Dense(self.num_classes)(x)


@dataclasses.dataclass(frozen=True)
class Model:
    """A flax module seen as pure functions of (params, state).

    `params` are the trained weights; `state` holds the module's other collections
    (e.g. BatchNorm `batch_stats`), `{}` for stateless models.
    """

    module: nn.Module
    input_shape: tuple[int, ...]
    input_dtype: Any = jnp.uint8
    name: str = ""
    objective: str = "xent"  # "xent": softmax cross-entropy; "mse": 0.5 (out - y)^2, 1 output;
    # "tokens": next-token cross-entropy over y [B, T] (core/sequence.py)
    precision: str = "default"  # the forward pass's arithmetic (core/precision.py)

    def for_grad(self) -> Model:
        """This model for code that differentiates it in evaluation mode (DivFL's gradient
        features): training-mode convolutions ("patches_train", "patches_cf_train") run as
        their patches form there too (`core/conv.py`); the same function, and every other
        model unchanged."""
        impl = getattr(self.module, "conv_impl", None)
        if impl in TRAIN_FORMS:
            return dataclasses.replace(self, module=self.module.clone(
                conv_impl=TRAIN_FORMS[impl]))
        return self

    def init(self, key: jax.Array) -> tuple[Any, Any]:
        x = jnp.zeros((1, *self.input_shape), self.input_dtype)
        variables = self.module.init({"params": key, "dropout": key}, x, train=False)
        variables = dict(variables)
        params = variables.pop("params")
        return params, variables

    def apply(self, params, state, x, *, train: bool, key: jax.Array | None = None):
        """Logits and the new state (unchanged state for stateless models or train=False)."""
        rngs = {"dropout": key} if key is not None else {}
        variables = {"params": params, **state}
        if train and state:
            logits, new_state = apply_in(self.precision, self.module, variables, x,
                                         train=True, rngs=rngs, mutable=list(state.keys()))
            return logits, dict(new_state)
        logits = apply_in(self.precision, self.module, variables, x, train=train, rngs=rngs)
        return logits, state

    def _losses(self, out, y):
        if self.objective == "mse":
            return 0.5 * (out[:, 0] - y) ** 2
        return optax.softmax_cross_entropy_with_integer_labels(out, y)

    def loss(self, params, state, x, y, *, train: bool, key: jax.Array | None = None):
        """Mean loss over the batch (over its counted target tokens for "tokens") and the
        new state."""
        out, new_state = self.apply(params, state, x, train=train, key=key)
        if self.objective == "tokens":
            return token_loss(out, y), new_state
        return self._losses(out, y).mean(), new_state

    def per_sample(self, params, state, x, y):
        """Per-sample (loss, correct) in evaluation mode (correct = 0 for "mse"); for
        "tokens", per row the summed loss and correct count of its counted targets
        (`core.sequence.token_sums`; a client's divisors: `core.arrays.client_norms`)."""
        out, _ = self.apply(params, state, x, train=False)
        if self.objective == "tokens":
            return token_sums(out, y)
        if self.objective == "mse":
            return self._losses(out, y), jnp.zeros(y.shape, jnp.float32)
        return self._losses(out, y), (jnp.argmax(out, -1) == y).astype(jnp.float32)


def _tuple(v) -> tuple[float, ...]:
    return tuple(float(a) for a in np.atleast_1d(np.asarray(v, np.float64)))


# `--model` name -> module(num_classes, normalize); "auto" takes the dataset's default
MODELS = Registry("model", {
    "mlp": lambda c, n: MLP(c, (64, 30), 0.2, norm=n),
    "sent_mlp": lambda c, n: MLP(c, (128, 86, 30), 0.0, norm=n),
    "cnn": lambda c, n: CNN(c, norm=n),
    "lenet5": lambda c, n: LeNet5(c, norm=n),
    "logistic": lambda c, n: Logistic(c, norm=n),
    **SEQUENCE_MODELS,  # over token ids: lstm, char_lstm, transformer (core/sequence.py)
}, extra=("auto",))
option("model", "auto", "model name, or 'auto' for the dataset's default", registry="model",
       group="algorithm")


def convolutional(name: str) -> bool:
    """Whether the registered model `name` convolves (its module has a `conv_impl`; an
    unknown or unbuildable name counts as one)."""
    try:
        module = MODELS[name](2, Normalize())
    except Exception:  # noqa: BLE001 - a plugin's model: nothing known about it
        return True
    return "conv_impl" in getattr(module, "__dataclass_fields__", {})


def make_model(name: str, dataset_name: str, num_classes: int, input_shape: tuple[int, ...],
               input_dtype=jnp.uint8, scale: float = 1 / 255, mean=0.0, std=1.0,
               conv_impl: str = "auto", precision: str = "default", vocab_size: int = 0,
               per_position: bool = False) -> Model:
    """Build the registered model `name` (`model_for` resolves `auto`).

    `conv_impl` picks how the built-in convolutional models convolve (`core/conv.py`):
    "auto" = "pooled_winograd_train" on the CPU, "patches_train" on the GPU, "xla" elsewhere
    (`core.conv.resolve_conv_impl`; a run resolves "auto" for its layout before it builds
    the model, `execute.layout.conv_impl_for`).
    Models without a `conv_impl` field (the MLPs, user-registered modules) ignore it.
    `precision` is the arithmetic of the forward and backward pass (`core/precision.py`:
    default, fp32, tf32 or bf16 with float32 master weights), for every model.
    `vocab_size` > 0 says the inputs are token ids of that many ids (a token task), which
    only the sequence models (`core/sequence.py`) read, and they read nothing else;
    `per_position` makes them language models (one target per position).
    """
    if name not in MODELS:
        raise ConfigError(f"unknown model '{name}'; choose one of: {', '.join(MODELS)}")
    try:
        impl = resolve_conv_impl(conv_impl)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    norm = Normalize(float(scale), _tuple(mean), _tuple(std))
    module = MODELS[name](num_classes, norm)
    if "conv_impl" in getattr(module, "__dataclass_fields__", {}):
        module = module.clone(conv_impl=impl)
    check_precision(precision)
    check_tokens(name, module, vocab_size, dataset_name)
    objective = "tokens" if vocab_size and per_position else "xent"
    if vocab_size:  # the sequence model's vocabulary and head, from the data
        module = module.clone(vocab_size=vocab_size, per_position=per_position)
    return Model(module, tuple(input_shape), input_dtype, name, objective, precision)


def check_tokens(name: str, module, vocab_size: int, dataset_name: str) -> None:
    """Refuse a sequence model on data that are not token ids and any other model on token
    ids, in one line."""
    seq = ", ".join(SEQUENCE_MODELS)
    if is_sequence(module) and not vocab_size:
        raise ConfigError(f"--model {name} reads token ids; {dataset_name or 'these data'} "
                          "holds images or features: choose a token dataset (sent140_words, "
                          "sent140_chars) or another --model")
    if vocab_size and not is_sequence(module):
        raise ConfigError(f"--model {name} takes images or features; {dataset_name} holds "
                          f"token ids: choose --model {seq} (or auto)")


def model_for(cfg_model: str, data, dataset, conv_impl: str = "auto",
              precision: str = "default") -> Model:
    """The model of a run, from its `FederatedData` and the pooled `Dataset`'s constants
    (`auto`: the dataset's own model, `Dataset.model`); a model that cannot take the
    data's inputs, or a precision the backend lacks, is refused in one line (`check_fits`,
    `precision.check_precision`)."""
    if cfg_model == "auto":
        cfg_model = getattr(dataset, "model", "") or "mlp"
    model = make_model(cfg_model, data.name, data.num_classes, data.input_shape,
                       data.train.x.dtype, dataset.scale, dataset.mean, dataset.std, conv_impl,
                       precision, data.vocab_size, data.train.y.ndim == 2)
    check_fits(model, data.num_classes)
    return model


def abstract_key() -> jax.ShapeDtypeStruct:
    """The shape and dtype of a PRNG key, for `jax.eval_shape` (making a real key compiles
    two small programs)."""
    return jax.eval_shape(jax.random.key, 0)


def check_fits(model: Model, num_classes: int) -> None:
    """Trace (no compute) the model on one input of the data's shape; a model that cannot
    take it, or whose output is not one score per class, is a `ConfigError` naming both."""
    flag = f"--model {model.name}" if model.name else "the model"
    try:
        params, state = jax.eval_shape(model.init, abstract_key())
        out = jax.eval_shape(lambda p, s: model.apply(p, s, jnp.zeros(
            (1, *model.input_shape), model.input_dtype), train=False)[0], params, state)
    except Exception as e:  # noqa: BLE001 - flax/lax raise many kinds for a shape mismatch
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        conv = " (convolutional models need images [H, W] or [H, W, C])" if len(
            model.input_shape) < 2 else ""
        raise ConfigError(f"{flag} cannot take inputs of shape {tuple(model.input_shape)}"
                          f"{conv}: {type(e).__name__}: {first}; choose another --model "
                          "(mlp takes any shape)") from None
    want = 1 if model.objective == "mse" else num_classes
    if out.shape[-1] != want:
        raise ConfigError(f"{flag} outputs {out.shape[-1]} values per example, the data need "
                          f"{want} ({num_classes} classes); build it with num_classes")


# --- BatchNorm models (FedBN, Exp-alpha's ResNet20) -------------------------------

class CNNBN(nn.Module):
    """The `cnn` of MaxFL with BatchNorm after every conv and the first FC layer.

    conv5x5(6)-BN-relu-pool, conv5x5(16)-BN-relu-pool, FC 120-BN-relu, FC 84-relu, FC C.
    A small stand-in for FedBN's Digits CNN (Li et al. 2021) on a 2-core CPU.
    """

    num_classes: int
    norm: Normalize = dataclasses.field(default_factory=Normalize)
    conv_impl: str = "xla"  # core/conv.py: CONV_IMPLS (after resolve_conv_impl)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = _as_image(self.norm(x))
        for ch in (6, 16):
            x = Conv(ch, (5, 5), padding="VALID", impl=self.conv_impl)(x, train)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
            x = max_pool_2x2(x)
        x = x.reshape((x.shape[0], -1))
        x = nn.Dense(120)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.num_classes)(x)


class _BasicBlock(nn.Module):
    channels: int
    stride: int
    conv_impl: str = "xla"

    @nn.compact
    def __call__(self, x, train: bool):
        bn = lambda: nn.BatchNorm(use_running_average=not train, momentum=0.9)
        conv = lambda k, s=1: Conv(self.channels, (k, k), (s, s), use_bias=False,
                                   impl=self.conv_impl)
        y = conv(3, self.stride)(x, train)
        y = nn.relu(bn()(y))
        y = conv(3)(y, train)
        y = bn()(y)
        if self.stride != 1 or x.shape[-1] != self.channels:
            x = conv(1, self.stride)(x, train)
            x = bn()(x)
        return nn.relu(x + y)


class ResNet20(nn.Module):
    """ResNet-20 for 32x32 inputs (He et al. 2016, Sec. 4.2): conv3x3(16), 3 stages of 3
    basic blocks with 16/32/64 channels (stride 2 at stages 2 and 3; 1x1 conv projection
    shortcuts), global average pooling, FC. The Exp-alpha seed's CIFAR-10 model (for GPU
    runs; `--model resnet20`)."""

    num_classes: int
    norm: Normalize = dataclasses.field(default_factory=Normalize)
    conv_impl: str = "xla"  # core/conv.py: CONV_IMPLS (after resolve_conv_impl)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = _as_image(self.norm(x))
        x = Conv(16, (3, 3), use_bias=False, impl=self.conv_impl)(x, train)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
        for stage, ch in enumerate((16, 32, 64)):
            for b in range(3):
                x = _BasicBlock(ch, 2 if stage > 0 and b == 0 else 1, self.conv_impl)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes)(x)


MODELS["cnn_bn"] = lambda c, n: CNNBN(c, norm=n)
MODELS["resnet20"] = lambda c, n: ResNet20(c, norm=n)


class SimpleCNN(nn.Module):
    """conv3x3(32)-relu, conv3x3(64)-relu, max-pool 2x2, dropout 0.25, FC 128-relu, dropout
    0.5, FC C (valid padding, Glorot-uniform kernels).

    The small CNN of the peers' benchmark workloads: pfl-research's CIFAR-10 benchmark
    (`simple_cnn`, Granqvist et al. 2024) and FedJAX's EMNIST convolutional model (Ro et al.
    2021) share this architecture (the Keras MNIST example CNN); on 32x32x3 inputs it has
    1.63M parameters, on 28x28 inputs with 62 classes 1.21M.
    """

    num_classes: int
    norm: Normalize = dataclasses.field(default_factory=Normalize)
    conv_impl: str = "xla"  # core/conv.py: CONV_IMPLS (after resolve_conv_impl)

    @nn.compact
    def __call__(self, x, train: bool = False):
        init = nn.initializers.glorot_uniform()
        x = _as_image(self.norm(x))
        x = nn.relu(Conv(32, (3, 3), padding="VALID", impl=self.conv_impl,
                         kernel_init=init)(x, train))
        x = nn.relu(Conv(64, (3, 3), padding="VALID", impl=self.conv_impl,
                         kernel_init=init)(x, train))
        x = max_pool_2x2(x)
        x = nn.Dropout(0.25, deterministic=not train)(x)
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(128, kernel_init=init)(x))
        x = nn.Dropout(0.5, deterministic=not train)(x)
        return nn.Dense(self.num_classes, kernel_init=init)(x)


MODELS["simple_cnn"] = lambda c, n: SimpleCNN(c, norm=n)
