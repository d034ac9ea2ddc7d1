"""A convolution, its ReLU and a 2x2 max-pooling as one product per pass ("pooled_cf").

LeNet-5 (LeCun et al. 1998) and the MaxFL CIFAR-10 CNN follow each convolution by a ReLU and
a 2x2, stride-2 max-pooling. The pooled output at (p, q) depends on one (kh + 1) x (kw + 1)
window of the input, at stride 2, and the four convolution outputs it pools are the kernel
applied at the window's four offsets (a, b) in {0, 1}^2. Placing the kernel at those offsets
gives a folded kernel [(kh + 1)(kw + 1) C, 4 O]; the windows, in channels-first form, are one
patch matrix [(kh + 1)(kw + 1) C, N P Q] over the pooled pixels, and

    pooled = relu(max over the 4 offset blocks of (folded^T @ windows) + bias)

is the layer's output (the max commutes with adding the bias and with the ReLU, both
monotone). Against im2col of the convolution followed by the pooling (`core/conv.py`,
"patches_cf"), the products do (kh + 1)(kw + 1) 4 / (kh kw) times the multiplies (1.44x for
5x5 kernels), but the patch matrix holds (kh + 1)(kw + 1) / (4 kh kw) of the entries (0.36x),
the products have 4 O columns instead of O (24 for LeNet-5's first layer, not 6), the pooling
is a max of four contiguous blocks, and the gradient of the input is nine block additions
on the half-resolution grid instead of a col2im at full resolution. On a 2-core CPU the
gradient of LeNet-5 on a 71-row client ran in 0.49-0.50 process CPU s per 100 clients against
0.71-0.76 with "winograd_train" (benchmarks/RESULTS.md).

The gradients are written out (`jax.custom_vjp`): the pooling's gradient goes to the
window's maxima, shared equally among ties, as `jnp.max`'s does; reverse mode and
forward-over-reverse (Per-FedAvg's Hessian-vector product) go through it, forward mode
(`jax.jvp` of the layer itself) does not. Only odd kernel sizes at stride 1 fold; `Conv`
runs any other layer as convolution, ReLU and `max_pool_2x2`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

OFFSETS = ((0, 0), (0, 1), (1, 0), (1, 1))


def foldable(kernel_size: tuple[int, int], strides: tuple[int, int]) -> bool:
    """Whether `conv_relu_pool` takes a layer: odd kernel sizes, stride 1."""
    return tuple(strides) == (1, 1) and all(k % 2 == 1 for k in kernel_size)


def fold_kernel(kernel: jax.Array) -> jax.Array:
    """[kh, kw, C, O] -> [(kh + 1)(kw + 1) C, 4 O]: the kernel at each offset (a, b) of a
    2x2 pooling window (columns offset-major, rows (u, v, c) as the windows')."""
    kh, kw, c, o = kernel.shape
    placed = [jnp.pad(kernel, ((a, 1 - a), (b, 1 - b), (0, 0), (0, 0))) for a, b in OFFSETS]
    return jnp.stack(placed, axis=3).reshape((kh + 1) * (kw + 1) * c, 4 * o)


def unfold_kernel(g: jax.Array, shape: tuple[int, int, int, int]) -> jax.Array:
    """The adjoint of `fold_kernel`: [(kh + 1)(kw + 1) C, 4 O] -> [kh, kw, C, O], the sum of
    the four offsets' slices."""
    kh, kw, c, o = shape
    g = g.reshape(kh + 1, kw + 1, c, 4, o)
    return sum(g[a:a + kh, b:b + kw, :, i, :] for i, (a, b) in enumerate(OFFSETS))


def _parity(x_cf: jax.Array, rows: int, cols: int) -> jax.Array:
    """[C, N, H, W] -> [C, N, rows/2, 2, cols/2, 2] (the first `rows` x `cols` pixels)."""
    c, n = x_cf.shape[:2]
    return x_cf[:, :, :rows, :cols].reshape(c, n, rows // 2, 2, cols // 2, 2)


def windows(x_cf: jax.Array, window: tuple[int, int], pooled: tuple[int, int]) -> jax.Array:
    """[C, N, H, W] -> [wh ww C, N P Q]: the wh x ww windows at stride 2 of `pooled` = (P, Q)
    pixels, rows in (u, v, c) order (wh, ww even)."""
    (wh, ww), (p, q) = window, pooled
    c, n = x_cf.shape[:2]
    xr = _parity(x_cf, 2 * p + wh - 2, 2 * q + ww - 2)
    # rows first, then columns: wh + ww slices of the input instead of wh * ww
    rows = jnp.stack([xr[:, :, u // 2:u // 2 + p, u % 2] for u in range(wh)])
    cols = jnp.stack([rows[..., v // 2:v // 2 + q, v % 2] for v in range(ww)], axis=1)
    return cols.reshape(wh * ww * c, n * p * q)


def windows_adjoint(d: jax.Array, window: tuple[int, int], pooled: tuple[int, int],
                    c: int, n: int) -> jax.Array:
    """The adjoint of `windows`: [wh ww C, N P Q] -> [C, N, 2P + wh - 2, 2Q + ww - 2], as
    (wh / 2)(ww / 2) block additions of the four parities at once.

    The additions run in a loop over the window's row blocks: a loop's result is an array of
    its own, so XLA:CPU does not fuse the last addition (a dynamic-update-slice) into the
    layer below, which would then recompute it element by element with six-dimensional
    index arithmetic (LeNet-5's gradient, 100 clients of 64 rows, one core: 0.327 -> 0.304
    CPU s, the same bits)."""
    (wh, ww), (p, q) = window, pooled
    sh, sw = wh // 2, ww // 2
    d = d.reshape(sh, 2, sw, 2, c, n, p, q)
    out = jnp.zeros((c, n, p + sh - 1, 2, q + sw - 1, 2), d.dtype)

    def row_block(s, out):
        ds = jax.lax.dynamic_index_in_dim(d, s, 0, keepdims=False)  # t s2 t' c n p q
        for s2 in range(sw):
            block = jnp.transpose(ds[:, s2], (2, 3, 4, 0, 5, 1))  # c n p t q t'
            at = (0, 0, s, 0, s2, 0)
            cur = jax.lax.dynamic_slice(out, at, block.shape)
            out = jax.lax.dynamic_update_slice(out, cur + block, at)
        return out

    out = jax.lax.fori_loop(0, sh, row_block, out)
    return out.reshape(c, n, 2 * (p + sh - 1), 2 * (q + sw - 1))


def _max4(z: jax.Array, o: int) -> tuple[jax.Array, jax.Array]:
    """z [4 O, R] -> (the max of its four O-row blocks [O, R], the max's gradient mask
    [4 O, R]: 1 at the maxima, shared equally among ties)."""
    # a loop's result is an array of its own: XLA:CPU would fuse elementwise maxima into,
    # and recompute them in, every consumer (the ReLU, the mask, each of the next layer's
    # window slices, each with its index arithmetic); LeNet-5's gradient as in
    # `windows_adjoint`: 0.304 -> 0.279 CPU s, the same bits
    top = jax.lax.fori_loop(
        1, 4, lambda i, t: jnp.maximum(t, jax.lax.dynamic_slice_in_dim(z, i * o, o, 0)), z[:o])
    blocks = [z[i * o:(i + 1) * o] for i in range(4)]
    hits = [(b == top).astype(z.dtype) for b in blocks]
    share = 1 / (hits[0] + hits[1] + hits[2] + hits[3])
    return top, jnp.concatenate([h * share for h in hits], axis=0)


def _geometry(shape, kernel_size, pads):
    n, h, w, c = shape
    kh, kw = kernel_size
    hp, wp = h + sum(pads[0]), w + sum(pads[1])
    pooled = ((hp - kh + 1) // 2, (wp - kw + 1) // 2)
    return (kh + 1, kw + 1), pooled


def _forward(geometry, x, kernel, bias):
    (h, w), pads = geometry
    kh, kw, c, o = kernel.shape
    n = x.shape[0]
    window, pooled = _geometry(x.shape, (kh, kw), pads)
    x_cf = jnp.pad(jnp.transpose(x, (3, 0, 1, 2)), ((0, 0), (0, 0), *pads))
    patches = windows(x_cf, window, pooled)
    folded = fold_kernel(kernel)
    z = jax.lax.dot_general(folded, patches, (((0,), (0,)), ((), ())))  # [4 O, N P Q]
    top, mask = _max4(z, o)
    act = jax.nn.relu(top + bias[:, None].astype(top.dtype))
    out = jnp.transpose(act.reshape(o, n, *pooled), (1, 2, 3, 0))
    return out, (patches, folded, mask, act)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _conv_relu_pool(geometry, x, kernel, bias):
    return _forward(geometry, x, kernel, bias)[0]


def _fwd(geometry, x, kernel, bias):
    out, (patches, folded, mask, act) = _forward(geometry, x, kernel, bias)
    return out, (patches, folded, mask, act, kernel, bias)


def _bwd(geometry, res, g):
    (h, w), pads = geometry
    patches, folded, mask, act, kernel, bias = res
    kh, kw, c, o = kernel.shape
    n, p, q, _ = g.shape
    window = (kh + 1, kw + 1)
    g = jnp.transpose(g, (3, 0, 1, 2)).reshape(o, n * p * q) * (act > 0)
    dz = mask * jnp.tile(g, (4, 1))  # [4 O, N P Q]
    d_folded = jax.lax.dot_general(patches, dz, (((1,), (1,)), ((), ())))  # [K, 4 O]
    d_patches = folded @ dz  # [K, N P Q]
    d_cf = windows_adjoint(d_patches, window, (p, q), c, n)
    hp, wp = h + sum(pads[0]), w + sum(pads[1])
    d_cf = jnp.pad(d_cf, ((0, 0), (0, 0), (0, hp - d_cf.shape[2]), (0, wp - d_cf.shape[3])))
    d_cf = d_cf[:, :, pads[0][0]:pads[0][0] + h, pads[1][0]:pads[1][0] + w]
    dx = jnp.transpose(d_cf, (1, 2, 3, 0))
    return (dx.astype(patches.dtype), unfold_kernel(d_folded, kernel.shape).astype(kernel.dtype),
            g.sum(axis=1).astype(bias.dtype))


_conv_relu_pool.defvjp(_fwd, _bwd)


def conv_relu_pool(x: jax.Array, kernel: jax.Array, bias: jax.Array,
                   pads: tuple[tuple[int, int], tuple[int, int]]) -> jax.Array:
    """`max_pool_2x2(relu(conv(x, kernel, stride 1, pads) + bias))`, folded (module doc).

    Args:
      x: [N, H, W, C] inputs.
      kernel: [kh, kw, C, O] weights, kh and kw odd.
      bias: [O].
      pads: ((lo, hi), (lo, hi)) of the convolution (`core.conv._pads`).

    Returns:
      [N, (H + pads - kh + 1) // 2, (W + pads - kw + 1) // 2, O], an odd last row or column
      of the convolution's output dropped as VALID pooling does.
    """
    if not foldable(kernel.shape[:2], (1, 1)):
        raise ValueError(f"conv_relu_pool folds odd kernel sizes only; got "
                         f"{kernel.shape[0]}x{kernel.shape[1]}: use conv, relu and "
                         f"max_pool_2x2")
    pads = tuple(tuple(int(v) for v in pr) for pr in pads)
    return _conv_relu_pool(((x.shape[1], x.shape[2]), pads), x, kernel, bias)
