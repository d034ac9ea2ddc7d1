"""Winograd's minimal filtering F(2x2, 3x3) for a 3x3, stride-1 convolution (Lavin & Gray,
"Fast Algorithms for Convolutional Neural Networks", CVPR 2016).

Each 2x2 output tile is computed from a 4x4 input tile d and the 3x3 kernel g as

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A

with the constant matrices `BT` (4x4), `G` (4x3) and `AT` (2x4) below. Summed over input
channels, the element-wise product (.) becomes, for each of the 16 tile positions, one matmul
[tiles, C] x [C, O]: 16 multiplies per 2x2 output tile and channel pair where the direct
convolution (or im2col) takes 4 x 9 = 36, a 2.25x cut in the products of the forward pass
and of both gradients. The input and output transforms only add and subtract.

Layout: inputs NHWC, kernel HWIO, as `core/conv.py`. The input transform reads the padded
input as 2x2 blocks ([N, H/2, 2, W/2, 2, C]), so each of the four block offsets of a tile
is one contiguous slice; the transforms' gradients are written out (`jax.custom_vjp`): the
transpose JAX derives for the slices is a sum of zero-padded copies of the whole input,
which XLA:CPU ran slowly (a profile of one `simple_cnn` SGD step on FEMNIST, one core: that
sum took 10.5 ms of a 25.5 ms step; with the gradients below the whole step took 11.8 ms). Hence
forward-mode differentiation (`jax.jvp`, `jax.jacfwd`) cannot go through a Winograd
convolution; reverse mode and forward-over-reverse (the Hessian-vector product of
Per-FedAvg, `jax.hessian`) can.

Rounding: the transforms only add, subtract and halve (exact in binary), so the result
differs from a direct convolution by float rounding of the sums (relative 1e-6 in fp32 on
the layers of `simple_cnn`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float32)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float32)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float32)


def _bt(v):
    """B^T applied along a list of 4 arrays (one per tile row or column)."""
    return [v[0] - v[2], v[1] + v[2], v[2] - v[1], v[1] - v[3]]


def _bt_transposed(v):
    """B applied along a list of 4 arrays: the transpose of `_bt`."""
    return [v[0], v[1] - v[2] + v[3], v[2] + v[1] - v[0], -v[3]]


def _at(v):
    """A^T applied along a list of 4 arrays -> 2."""
    return [v[0] + v[1] + v[2], v[1] - v[2] - v[3]]


def _at_transposed(v):
    """A applied along a list of 2 arrays -> 4: the transpose of `_at`."""
    return [v[0], v[0] + v[1], v[0] - v[1], -v[1]]


def _input_transform(x: jax.Array) -> jax.Array:
    """[N, 2(th+1), 2(tw+1), C] -> B^T d B of every overlapping 4x4 tile: [4, 4, N, th, tw, C]."""
    n, h, w, c = x.shape
    th, tw = h // 2 - 1, w // 2 - 1
    blocks = x.reshape(n, th + 1, 2, tw + 1, 2, c)
    # tile row i of tile t is block row t + i // 2 at offset i % 2
    rows = _bt([blocks[:, i // 2:i // 2 + th, i % 2] for i in range(4)])  # [N, th, W/2, 2, C]
    v = [_bt([r[:, :, j // 2:j // 2 + tw, j % 2] for j in range(4)]) for r in rows]
    return jnp.stack([jnp.stack(row) for row in v])


def _overlap_add(parts, axis: int) -> jax.Array:
    """The transpose of reading tile elements 0..3 from blocks: 4 arrays of length t on
    `axis` -> the blocks they came from, [..., t + 1, 2, ...] (offset axis after `axis`)."""
    def shifted(v, lo):
        pads = [(0, 0)] * v.ndim
        pads[axis] = (lo, 1 - lo)
        return jnp.pad(v, pads)
    return jnp.stack([shifted(parts[k], 0) + shifted(parts[2 + k], 1) for k in range(2)],
                     axis=axis + 1)


def _input_transform_fwd(x):
    return _input_transform(x), x.shape


def _input_transform_bwd(shape, g):
    g = [[g[a, b] for b in range(4)] for a in range(4)]  # [N, th, tw, C] each
    rows = [_overlap_add(_bt_transposed(ga), 2) for ga in g]  # [N, th, tw + 1, 2, C]
    return (_overlap_add(_bt_transposed(rows), 1).reshape(shape),)


input_transform = jax.custom_vjp(_input_transform)
input_transform.defvjp(_input_transform_fwd, _input_transform_bwd)


def _output_transform(m: jax.Array) -> jax.Array:
    """[4, 4, N, th, tw, O] -> A^T m A of every tile, in place: [N, 2 th, 2 tw, O]."""
    _, _, n, th, tw, o = m.shape
    cols = [_at([m[a, b] for a in range(4)]) for b in range(4)]  # cols[b][i]
    y = [_at([cols[b][i] for b in range(4)]) for i in range(2)]  # y[i][j]: [N, th, tw, O]
    y = jnp.stack([jnp.stack(yi, axis=3) for yi in y], axis=2)  # [N, th, 2, tw, 2, O]
    return y.reshape(n, 2 * th, 2 * tw, o)


def _output_transform_fwd(m):
    return _output_transform(m), None


def _output_transform_bwd(_, g):
    n, h, w, o = g.shape
    g = g.reshape(n, h // 2, 2, w // 2, 2, o)
    gi = [_at_transposed([g[:, :, i, :, j] for j in range(2)]) for i in range(2)]  # gi[i][b]
    gb = [_at_transposed([gi[i][b] for i in range(2)]) for b in range(4)]  # gb[b][a]
    return (jnp.stack([jnp.stack([gb[b][a] for b in range(4)]) for a in range(4)]),)


output_transform = jax.custom_vjp(_output_transform)
output_transform.defvjp(_output_transform_fwd, _output_transform_bwd)


def kernel_transform(kernel: jax.Array) -> jax.Array:
    """[3, 3, C, O] -> G g G^T: [4, 4, C, O]."""
    g = jnp.asarray(G, kernel.dtype)
    return jnp.einsum("ai,ijco,bj->abco", g, kernel, g)


def winograd_conv(x: jax.Array, kernel: jax.Array,
                  pads: tuple[tuple[int, int], tuple[int, int]]) -> jax.Array:
    """A 3x3, stride-1 convolution by Winograd F(2x2, 3x3).

    Args:
      x: [N, H, W, C] inputs.
      kernel: [3, 3, C, O] weights (HWIO).
      pads: ((top, bottom), (left, right)) zero padding, as `lax.conv_general_dilated`'s
        explicit padding.

    Returns:
      [N, H_out, W_out, O], H_out = H + top + bottom - 2 (W_out alike): the same function as
      `lax.conv_general_dilated(x, kernel, (1, 1), pads)` up to float rounding.
    """
    kh, kw, c, o = kernel.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"winograd_conv takes a 3x3 kernel; got {kh}x{kw}")
    (top, bottom), (left, right) = pads
    n, h, w, _ = x.shape
    ho, wo = h + top + bottom - 2, w + left + right - 2
    # an odd output size gets one more row / column of zeros (a partial last tile), cut below
    x = jnp.pad(x, ((0, 0), (top, bottom + ho % 2), (left, right + wo % 2), (0, 0)))
    th, tw = (ho + 1) // 2, (wo + 1) // 2
    v = input_transform(x).reshape(16, n * th * tw, c)
    u = kernel_transform(kernel).reshape(16, c, o)
    m = jax.lax.dot_general(v, u, (((2,), (1,)), ((0,), (0,))))  # 16 x [tiles, C] @ [C, O]
    return output_transform(m.reshape(4, 4, n, th, tw, o))[:, :ho, :wo]
