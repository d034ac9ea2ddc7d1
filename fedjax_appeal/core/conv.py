"""A 2-D convolution layer with interchangeable implementations.

`Conv` has the parameters of `flax.linen.Conv` (`kernel` [kh, kw, C_in, C_out] and `bias`
[C_out], the same initialisers), so a model gives the same parameter tree, the same
checkpoints and the same function with any implementation:

  * ``"xla"``: `jax.lax.conv_general_dilated` both ways (what `flax.linen.Conv` runs).
  * ``"patches"``: im2col written as kh x kw shifted slices of the (padded) input,
    concatenated on the channel axis, then one matmul with the reshaped kernel, both ways:
    no convolution primitive is left in the program.
  * ``"patches_train"``: ``"patches"`` when the model runs in training mode (the local
    steps, where the gradient is taken), ``"xla"`` in evaluation mode. The GPU default.
  * ``"patches_cf"``: im2col in channels-first form: the input as [C, N, H, W], the patches
    as one [kh*kw*C, N*H_out*W_out] matrix, the output as kernel^T @ patches. The same
    function as ``"patches"``; what changes is the shape of the three products of a training
    step (forward, kernel gradient, patch gradient), which are then all plain matmuls over
    the long pixel axis: in the row form the kernel gradient is a product with a transposed
    [N*H_out*W_out, kh*kw*C] operand, which XLA:CPU ran slowest of the three (`simple_cnn`
    on FEMNIST, one core: 4.3 ms per step against 3.1-3.2; benchmarks/RESULTS.md).
  * ``"patches_cf_train"``: ``"patches_cf"`` in training mode, ``"xla"`` in evaluation
    mode.
  * ``"winograd"``: a 3x3, stride-1 convolution with at least `WINOGRAD_MIN_CHANNELS` input
    channels by Winograd's F(4x4, 3x3) (`core/winograd.py`: 4x fewer multiplies in the
    products of the forward pass and both gradients); any other convolution (other kernel
    sizes, strides, or few input channels, where the products are small and the transforms
    cost more than they save) as ``"patches_cf"``.
  * ``"winograd_train"``: ``"winograd"`` in training mode, ``"xla"`` in evaluation mode.
  * ``"pooled_cf"``: a layer that the model follows by a ReLU and a 2x2 max-pooling
    (`Conv(relu_pool=True)`: LeNet-5's and the CIFAR-10 CNN's two layers) runs the three as
    one channels-first product over the pooling windows, the kernel placed at the window's
    four offsets (`core/conv_pool.py`); every other layer as ``"patches_cf"``.
  * ``"pooled_winograd"``: the same pooled layers; every other layer as ``"winograd"``.
  * ``"pooled_cf_train"``, ``"pooled_winograd_train"``: that form in training mode,
    ``"xla"`` in evaluation mode. The CPU defaults: ``"pooled_winograd_train"`` where a
    device trains one client at a time, ``"pooled_cf_train"`` where it trains several in
    one vmap.

Why: on XLA:CPU a convolution's gradient inside a loop body (the `lax.scan` of local steps,
or the scan over rounds) runs tens of times slower than the same gradient alone (reported
upstream as jax-ml/jax#12868), and a convolution vmapped over per-client kernels becomes a
grouped convolution that XLA:CPU runs slowly too; the im2col form is slices, pads and
(batched) matmuls, which loops and vmap do not slow down (`benchmarks/conv_loop_diagnostic.py`
measures each program shape). In evaluation mode, on large batches of rows under one model,
XLA's forward convolution is several times faster than im2col, whose patches take kh·kw
times the layer's input in memory; hence the ``*_train`` forms. On a 2-core CPU the
channels-first form lowered the FedAvg s/round of `simple_cnn`, `cnn`, `lenet5` and `cnn_bn`
by 11-20% (medians) against the row form in the automatic layout, and `lenet5`'s by 24-29%
with the cohort in one vmap (faster in 23 of 25 interleaved pairs, benchmarks/RESULTS.md);
Winograd's F(2x2, 3x3) lowered a `simple_cnn` SGD step in the local-steps scan from 10.5
to 9.2 ms (`benchmarks/conv_loop_diagnostic.py`) and the peer workloads' median s/round by
6% (FEMNIST) and 12-22% (CIFAR-10) in interleaved pairs; F(4x4, 3x3) took the step in the
scan from 9.9 to 7.8 ms against the channels-first im2col, and folding the pooling into
LeNet-5's layers took its gradient on a 71-row client from 7.1-7.6 to 4.9-5.0 ms and 100 of
its 32-row SGD steps from 0.31 to 0.25 CPU s, so ``"auto"`` is ``"pooled_winograd_train"``
there (F(4x4, 3x3) for the 3x3 layers that are not pooled). Vmapped over clients, F(4x4,
3x3) was the slower one (12.1-13.0 against 9.0-10.3 ms per client step at cohorts 2, 4 and
10), and the pooled layers the faster (a LeNet-5 FedAvg round of 10 clients in one vmap:
0.47-0.48 against 0.23 CPU s), so where a device trains several clients side by side in one
vmap (`execute.layout.vmap_width` > 1: an odd cohort on 2 cores, `--client-lanes 0`, chunks
of clients, a sweep's cohort) ``"auto"`` is ``"pooled_cf_train"`` on the CPU
(`AUTO_VMAPPED`; a run resolves it for its layout with `execute.layout.conv_impl_for`).
The Winograd and the pooled forms' gradients are written out (`jax.custom_vjp`), so
forward-mode differentiation (`jax.jvp` of a training-mode loss) cannot go through them;
choose ``"patches_cf_train"`` for that.

On a GPU the cohort's vmapped convolutions (per-client kernels) are grouped convolutions
too: on an H100 (jax 0.11.2, `benchmarks/gpu_round_throughput.py --conv-impls`) the CIFAR-10
`cnn` FedAvg round at cohort 100 took 569 ms with ``"xla"`` and 272 ms with ``"patches"`` or
``"patches_train"`` (2.1x), so ``"auto"`` is ``"patches_train"`` there (the channels-first
form was not measured on a GPU). Other backends (TPU: not measured) keep ``"xla"``
(`resolve_conv_impl`).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from .conv_pool import conv_relu_pool, foldable
from .winograd import winograd_conv

CONV_IMPLS = ("auto", "xla", "patches", "patches_train", "patches_cf", "patches_cf_train",
              "winograd", "winograd_train", "pooled_cf", "pooled_cf_train", "pooled_winograd",
              "pooled_winograd_train")
# each training-mode form -> what it runs in training mode (evaluation mode runs "xla")
TRAIN_FORMS = {"patches_train": "patches", "patches_cf_train": "patches_cf",
               "winograd_train": "winograd", "pooled_cf_train": "pooled_cf",
               "pooled_winograd_train": "pooled_winograd"}
# the forms that fold a layer followed by ReLU and 2x2 max-pooling (`core/conv_pool.py`)
POOLED = ("pooled_cf", "pooled_winograd")
AUTO = {"cpu": "pooled_winograd_train", "gpu": "patches_train"}
# "auto" where a device trains several clients side by side in one vmap (per backend; the
# others as `AUTO`): on the CPU, F(4x4, 3x3) vmapped over clients ran slower than the
# channels-first im2col (`benchmarks/conv_loop_diagnostic.py`, vmapped scan)
AUTO_VMAPPED = {"cpu": "pooled_cf_train"}
# "winograd" takes 3x3 stride-1 convolutions with at least this many input channels (one
# core, `simple_cnn`'s first layer: with 1 or 3 channels the step ran ~2% slower by
# Winograd F(2x2, 3x3))
WINOGRAD_MIN_CHANNELS = 8
DIMS = ("NHWC", "HWIO", "NHWC")


def resolve_conv_impl(impl: str, backend: str | None = None,
                      clients_vmapped: bool = False) -> str:
    """``"auto"`` -> ``"pooled_winograd_train"`` on the CPU (``"pooled_cf_train"`` where
    `clients_vmapped`: a device trains several clients in one vmap), ``"patches_train"``
    on the GPU, ``"xla"`` elsewhere; any other name is returned as it is."""
    if impl not in CONV_IMPLS:
        raise ValueError(f"unknown conv implementation '{impl}'; choose one of: "
                         f"{', '.join(CONV_IMPLS)}")
    if impl != "auto":
        return impl
    backend = backend or jax.default_backend()
    if clients_vmapped and backend in AUTO_VMAPPED:
        return AUTO_VMAPPED[backend]
    return AUTO.get(backend, "xla")


def _pads(x_shape, window, strides, padding) -> tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(x_shape[1:3], window, strides, padding)
    return tuple((int(lo), int(hi)) for lo, hi in padding)


def im2col(x: jax.Array, window: tuple[int, int], strides: tuple[int, int],
           padding: str | Sequence[tuple[int, int]], channels_first: bool = False
           ) -> jax.Array:
    """[N, H, W, C] -> patches [N, H_out, W_out, kh*kw*C], rows in (i, j, c) order; with
    `channels_first`, the input taken as [C, N, H, W] and patches [kh*kw*C, N, H_out, W_out]."""
    kh, kw = window
    sh, sw = strides
    (plo, phi), (qlo, qhi) = _pads(x.shape, window, strides, padding)
    hi, wi = (2, 3) if channels_first else (1, 2)  # the spatial axes
    if channels_first:
        x = jnp.transpose(x, (3, 0, 1, 2))
    pads = [(0, 0)] * 4
    pads[hi], pads[wi] = (plo, phi), (qlo, qhi)
    x = jnp.pad(x, pads)
    ho = (x.shape[hi] - kh) // sh + 1
    wo = (x.shape[wi] - kw) // sw + 1

    def shifted(i: int, j: int) -> jax.Array:
        index = [slice(None)] * 4
        index[hi] = slice(i, i + (ho - 1) * sh + 1, sh)
        index[wi] = slice(j, j + (wo - 1) * sw + 1, sw)
        return x[tuple(index)]

    cols = [shifted(i, j) for i in range(kh) for j in range(kw)]
    return cols[0] if len(cols) == 1 else jnp.concatenate(cols, axis=0 if channels_first else -1)


def patches_conv(x: jax.Array, kernel: jax.Array, strides: tuple[int, int],
                 padding: str | Sequence[tuple[int, int]]) -> jax.Array:
    """`lax.conv_general_dilated(x, kernel, strides, padding)` in NHWC/HWIO as im2col + matmul.

    Args:
      x: [N, H, W, C] inputs.
      kernel: [kh, kw, C, O] weights.
      strides: (sh, sw).
      padding: "SAME", "VALID" or ((lo, hi), (lo, hi)), as `lax.conv_general_dilated` takes.

    Returns:
      [N, H_out, W_out, O].
    """
    kh, kw, c, o = kernel.shape
    patches = im2col(x, (kh, kw), strides, padding)
    n, ho, wo, k = patches.shape
    # one 2-D matmul over all output pixels: its gradient's kernel term is then a single
    # contraction over rows, without the transposed copy of the output gradient that the
    # 4-D form costs on XLA:CPU (about 20% of a conv layer's forward + backward)
    out = patches.reshape(n * ho * wo, k) @ kernel.reshape(k, o)  # rows (i, j, c): HWIO
    return out.reshape(n, ho, wo, o)


def patches_cf_conv(x: jax.Array, kernel: jax.Array, strides: tuple[int, int],
                    padding: str | Sequence[tuple[int, int]]) -> jax.Array:
    """`patches_conv` in channels-first form: the same function and arguments, other products.

    The input is transposed to [C, N, H, W]; its kh x kw shifted slices, concatenated on the
    channel axis, are the patch matrix [kh*kw*C, N*H_out*W_out] (rows in (i, j, c) order, as
    the HWIO kernel reshapes), and the output is kernel^T @ patches, transposed back to NHWC.
    Its gradient's products are then d_out @ patches^T for the kernel and kernel @ d_out for
    the patches: matmuls whose long axis (the N*H_out*W_out pixels) is the contiguous one.
    """
    kh, kw, c, o = kernel.shape
    patches = im2col(x, (kh, kw), strides, padding, channels_first=True)
    k, n, ho, wo = patches.shape
    patches = patches.reshape(k, n * ho * wo)
    # kernel^T @ patches, contracting the kernel's rows: [O, N*H_out*W_out]
    out = jax.lax.dot_general(kernel.reshape(k, o), patches, (((0,), (0,)), ((), ())))
    return jnp.transpose(out.reshape(o, n, ho, wo), (1, 2, 3, 0))


def winograd_cf_conv(x: jax.Array, kernel: jax.Array, strides: tuple[int, int],
                     padding: str | Sequence[tuple[int, int]]) -> jax.Array:
    """`patches_cf_conv`'s function and arguments: a 3x3, stride-1 convolution with at least
    `WINOGRAD_MIN_CHANNELS` input channels by Winograd F(4x4, 3x3) (`core/winograd.py`), any
    other by `patches_cf_conv`."""
    kh, kw, c, _ = kernel.shape
    if (kh, kw) != (3, 3) or tuple(strides) != (1, 1) or c < WINOGRAD_MIN_CHANNELS:
        return patches_cf_conv(x, kernel, strides, padding)
    return winograd_conv(x, kernel, _pads(x.shape, (3, 3), strides, padding))


def max_pool_2x2(x: jax.Array) -> jax.Array:
    """`flax.linen.max_pool(x, (2, 2), (2, 2))` (VALID) as a reshape and a max over the
    window axes.

    The same forward values; the gradient is the window's max mask instead of XLA's
    select-and-scatter, which runs about ten times slower on XLA:CPU (a 2x2 pool's gradient
    on a [10, 24, 24, 64] batch: 3.7 ms against 0.3 ms, `benchmarks/conv_loop_diagnostic.py`).
    A window with several equal maxima shares the gradient among them where
    select-and-scatter gives it to the first; after a ReLU such ties are zeros, whose
    gradient is zero either way.

    Args:
      x: [N, H, W, C]; an odd last row or column is dropped, as VALID pooling does.

    Returns:
      [N, H // 2, W // 2, C].
    """
    n, h, w, c = x.shape
    x = x[:, :h - h % 2, :w - w % 2, :]
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def xla_conv(x, kernel, strides, padding):
    return jax.lax.conv_general_dilated(x, kernel, strides, padding, dimension_numbers=DIMS)


CONVS = {"xla": xla_conv, "patches": patches_conv, "patches_cf": patches_cf_conv,
         "winograd": winograd_cf_conv, "pooled_cf": patches_cf_conv,
         "pooled_winograd": winograd_cf_conv}


def conv_for(impl: str, train: bool) -> str:
    """The implementation a layer runs: a training-mode form ("patches_train",
    "patches_cf_train", "winograd_train", "pooled_cf_train", "pooled_winograd_train") ->
    its form in training mode, "xla" in evaluation mode; the other forms as they are."""
    if impl in TRAIN_FORMS:
        return TRAIN_FORMS[impl] if train else "xla"
    if impl not in CONVS:
        raise ValueError(f"Conv.impl must be one of {', '.join(CONV_IMPLS[1:])}; got '{impl}'")
    return impl


class Conv(nn.Module):
    """2-D convolution on NHWC inputs, parameter-compatible with `flax.linen.Conv`.

    Attributes:
      features: output channels.
      kernel_size: (kh, kw).
      strides: (sh, sw).
      padding: "SAME", "VALID" or explicit ((lo, hi), (lo, hi)).
      use_bias: add a learned bias.
      impl: "xla", "patches", "patches_cf", "winograd", "pooled_cf", "pooled_winograd" or a
        training-mode form "patches_train", "patches_cf_train", "winograd_train",
        "pooled_cf_train", "pooled_winograd_train" (module docstring; the call's `train`
        flag picks for those); resolve "auto" with `resolve_conv_impl`.
      kernel_init: as `flax.linen.Conv` (LeCun normal).
      relu_pool: follow the convolution by a ReLU and `max_pool_2x2`; the pooled forms run
        the three as one folded product (`core/conv_pool.py`) where the layer folds (odd kernel
        sizes, stride 1).
    """

    features: int
    kernel_size: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: str | Sequence[tuple[int, int]] = "SAME"
    use_bias: bool = True
    impl: str = "xla"
    kernel_init: nn.initializers.Initializer = nn.linear.default_kernel_init
    relu_pool: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        kh, kw = self.kernel_size
        kernel = self.param("kernel", self.kernel_init, (kh, kw, x.shape[-1], self.features))
        bias = (self.param("bias", nn.initializers.zeros_init(), (self.features,))
                if self.use_bias else None)
        padding = self.padding if isinstance(self.padding, str) else tuple(
            tuple(p) for p in self.padding)
        impl = conv_for(self.impl, train)
        if self.relu_pool and impl in POOLED and foldable((kh, kw), self.strides):
            if bias is None:
                bias = jnp.zeros((self.features,), kernel.dtype)
            return conv_relu_pool(x, kernel, bias, _pads(x.shape, (kh, kw), (1, 1), padding))
        y = CONVS[impl](x, kernel, tuple(self.strides), padding)
        if bias is not None:
            y = y + bias
        return max_pool_2x2(nn.relu(y)) if self.relu_pool else y
