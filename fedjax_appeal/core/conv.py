"""A 2-D convolution layer with two interchangeable implementations.

`Conv` has the parameters of `flax.linen.Conv` (`kernel` [kh, kw, C_in, C_out] and `bias`
[C_out], the same initialisers), so a model gives the same parameter tree, the same
checkpoints and the same function with either implementation:

  * ``"xla"``: `jax.lax.conv_general_dilated`, what `flax.linen.Conv` runs.
  * ``"patches"``: im2col written as kh x kw shifted slices of the (padded) input,
    concatenated on the channel axis, then one matmul with the reshaped kernel. Its gradient
    is slices, pads and matmuls: no convolution primitive is left in the program.

Why both: on XLA:CPU a convolution's gradient inside a loop body (the `lax.scan` of local
steps, or the scan over rounds) runs tens of times slower than the same convolution alone
(reported upstream as jax-ml/jax#12868; measured here by `benchmarks/conv_loop_diagnostic.py`),
and a convolution vmapped over per-client kernels becomes a grouped convolution that XLA:CPU
runs slowly too. The patches form turns both into (batched) matmuls, which loops and vmap do
not slow down. It costs kh·kw times the layer's input in memory, which is why accelerators
keep ``"xla"`` (see `resolve_conv_impl`).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

CONV_IMPLS = ("auto", "xla", "patches")


def resolve_conv_impl(impl: str, backend: str | None = None) -> str:
    """``"auto"`` -> ``"patches"`` on the CPU backend, ``"xla"`` elsewhere; others unchanged."""
    if impl not in CONV_IMPLS:
        raise ValueError(f"unknown conv implementation '{impl}'; choose one of: "
                         f"{', '.join(CONV_IMPLS)}")
    if impl != "auto":
        return impl
    return "patches" if (backend or jax.default_backend()) == "cpu" else "xla"


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
    sh, sw = strides
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(x.shape[1:3], (kh, kw), strides, padding)
    (plo, phi), (qlo, qhi) = padding
    x = jnp.pad(x, ((0, 0), (plo, phi), (qlo, qhi), (0, 0)))
    ho = (x.shape[1] - kh) // sh + 1
    wo = (x.shape[2] - kw) // sw + 1
    cols = [x[:, i:i + (ho - 1) * sh + 1:sh, j:j + (wo - 1) * sw + 1:sw, :]
            for i in range(kh) for j in range(kw)]
    patches = cols[0] if len(cols) == 1 else jnp.concatenate(cols, axis=-1)
    return patches @ kernel.reshape(kh * kw * c, o)  # row order (i, j, c) = HWIO row-major


class Conv(nn.Module):
    """2-D convolution on NHWC inputs, parameter-compatible with `flax.linen.Conv`.

    Attributes:
      features: output channels.
      kernel_size: (kh, kw).
      strides: (sh, sw).
      padding: "SAME", "VALID" or explicit ((lo, hi), (lo, hi)).
      use_bias: add a learned bias.
      impl: "xla" or "patches" (module docstring); resolve "auto" with `resolve_conv_impl`.
      kernel_init: as `flax.linen.Conv` (LeCun normal).
    """

    features: int
    kernel_size: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: str | Sequence[tuple[int, int]] = "SAME"
    use_bias: bool = True
    impl: str = "xla"
    kernel_init: nn.initializers.Initializer = nn.linear.default_kernel_init

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kh, kw = self.kernel_size
        kernel = self.param("kernel", self.kernel_init, (kh, kw, x.shape[-1], self.features))
        if self.impl == "patches":
            y = patches_conv(x, kernel, tuple(self.strides), self.padding)
        elif self.impl == "xla":
            y = jax.lax.conv_general_dilated(x, kernel, tuple(self.strides), self.padding,
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
        else:
            raise ValueError(f"Conv.impl must be 'xla' or 'patches', got '{self.impl}'")
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros_init(), (self.features,))
        return y
