"""Winograd's minimal filtering F(m x m, 3x3) for a 3x3, stride-1 convolution, m = 4 (the
default) or 2 (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016).

Each m x m output tile is computed from an r x r input tile d (r = m + 2) and the 3x3
kernel g as

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A

with the constant matrices of `MATRICES` (B^T r x r, G r x 3, A^T m x r; those of the
paper's Sec. 4). Summed over input channels, the element-wise product (.) becomes, for each
of the r^2 tile positions, one matmul [tiles, C] x [C, O]: per output tile and channel pair
r^2 multiplies where the direct convolution (or im2col) takes 9 m^2, i.e. 16 against 36
for F(2x2, 3x3) (2.25x fewer) and 36 against 144 for F(4x4, 3x3) (4x fewer), in the
forward pass and in both gradients. The input and output transforms are sums with small
constant weights.

Layout: inputs NHWC, kernel HWIO, as `core/conv.py`. The input transform reads the padded
input as m x m blocks ([N, H/m, m, W/m, m, C]); tiles overlap by two rows (columns), so tile
row i is block row t + i // m at offset i % m, one contiguous slice. The transforms'
gradients are written out (`jax.custom_vjp`): the transpose JAX derives for the slices is
a sum of zero-padded copies of the whole input, which XLA:CPU ran slowly (a profile of one
`simple_cnn` SGD step on FEMNIST with F(2x2, 3x3), one core: that sum took 10.5 ms of a
25.5 ms step; with the gradients below the whole step took 11.8 ms). Hence forward-mode
differentiation (`jax.jvp`, `jax.jacfwd`) cannot go through a Winograd convolution; reverse
mode and forward-over-reverse (the Hessian-vector product of Per-FedAvg, `jax.hessian`) can.

Rounding: the result differs from a direct convolution by float rounding, larger for the
larger tile, whose transforms weigh by up to 8 and 1/24 (fp32, `simple_cnn`'s 32 -> 64
layer on random inputs: relative error 7e-7 with F(2x2, 3x3), 7e-6 with F(4x4, 3x3); the
paper trains with F(4x4, 3x3) in fp32 without loss of accuracy).
"""

from __future__ import annotations

from functools import cache

import jax
import jax.numpy as jnp
import numpy as np

# m -> (B^T [r, r], G [r, 3], A^T [m, r]), r = m + 2
MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]])),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                  [0, 1, -1, 8, -8, 1]])),
}
TILES = tuple(MATRICES)


def combine(matrix: np.ndarray, parts: list) -> list:
    """`matrix` [p, q] applied along a list of q arrays -> p arrays (sums with the matrix's
    weights; zero weights skipped, +-1 without a multiply)."""
    out = []
    for row in matrix:
        acc = None
        for weight, part in zip(row, parts, strict=True):
            if weight == 0:
                continue
            term = part if weight == 1 else -part if weight == -1 else part * float(weight)
            acc = term if acc is None else acc + term
        out.append(acc)
    return out


def _overlap_add(parts: list, m: int, axis: int) -> jax.Array:
    """The transpose of reading tile rows 0..r-1 from m-row blocks: r arrays of length t on
    `axis` -> the blocks they came from, [..., t + 1, m, ...] (offset axis after `axis`)."""
    def shifted(v, lo):
        pads = [(0, 0)] * v.ndim
        pads[axis] = (lo, 1 - lo)
        return jnp.pad(v, pads)
    blocks = []
    for k in range(m):  # offset k of a block: tile row k (same block), row m + k (next)
        b = shifted(parts[k], 0)
        if m + k < len(parts):
            b = b + shifted(parts[m + k], 1)
        blocks.append(b)
    return jnp.stack(blocks, axis=axis + 1)


def _transform_functions(m: int):
    """(input transform, its gradient, output transform, its gradient) of F(m x m, 3x3):

      input: [N, m(th+1), m(tw+1), C] -> B^T d B of every overlapping r x r tile,
        [r, r, N, th, tw, C];
      output: [r, r, N, th, tw, O] -> A^T M A of every tile, in place: [N, m th, m tw, O].
    """
    bt, _, at = MATRICES[m]
    r = m + 2

    def input_transform(x):
        n, h, w, c = x.shape
        th, tw = h // m - 1, w // m - 1
        blocks = x.reshape(n, th + 1, m, tw + 1, m, c)
        rows = combine(bt, [blocks[:, i // m:i // m + th, i % m] for i in range(r)])
        v = [combine(bt, [q[:, :, j // m:j // m + tw, j % m] for j in range(r)]) for q in rows]
        return jnp.stack([jnp.stack(row) for row in v])

    def input_bwd(shape, g):
        rows = [_overlap_add(combine(bt.T, [g[a, b] for b in range(r)]), m, 2)
                for a in range(r)]  # [N, th, tw + 1, m, C] each
        return (_overlap_add(combine(bt.T, rows), m, 1).reshape(shape),)

    def output_transform(mm):
        n, th, tw, o = mm.shape[2:]
        cols = [combine(at, [mm[a, b] for a in range(r)]) for b in range(r)]  # cols[b][i]
        y = [combine(at, [cols[b][i] for b in range(r)]) for i in range(m)]  # y[i][j]
        y = jnp.stack([jnp.stack(yi, axis=3) for yi in y], axis=2)  # [N, th, m, tw, m, O]
        return y.reshape(n, m * th, m * tw, o)

    def output_bwd(_, g):
        n, h, w, o = g.shape
        g = g.reshape(n, h // m, m, w // m, m, o)
        gi = [combine(at.T, [g[:, :, i, :, j] for j in range(m)]) for i in range(m)]
        gb = [combine(at.T, [gi[i][b] for i in range(m)]) for b in range(r)]  # gb[b][a]
        return (jnp.stack([jnp.stack([gb[b][a] for b in range(r)]) for a in range(r)]),)

    return input_transform, input_bwd, output_transform, output_bwd


@cache
def transforms(m: int):
    """(input transform, output transform) of F(m x m, 3x3) (`_transform_functions`), each a
    `jax.custom_vjp` with its written-out gradient."""
    input_transform, input_bwd, output_transform, output_bwd = _transform_functions(m)
    fin = jax.custom_vjp(input_transform)
    fin.defvjp(lambda x: (input_transform(x), x.shape), input_bwd)
    fout = jax.custom_vjp(output_transform)
    fout.defvjp(lambda mm: (output_transform(mm), None), output_bwd)
    return fin, fout


def kernel_transform(kernel: jax.Array, m: int = 4) -> jax.Array:
    """[3, 3, C, O] -> G g G^T: [r, r, C, O]."""
    g = jnp.asarray(MATRICES[m][1], kernel.dtype)
    return jnp.einsum("ai,ijco,bj->abco", g, kernel, g)


def winograd_conv(x: jax.Array, kernel: jax.Array,
                  pads: tuple[tuple[int, int], tuple[int, int]], m: int = 4) -> jax.Array:
    """A 3x3, stride-1 convolution by Winograd F(m x m, 3x3).

    Args:
      x: [N, H, W, C] inputs.
      kernel: [3, 3, C, O] weights (HWIO).
      pads: ((top, bottom), (left, right)) zero padding, as `lax.conv_general_dilated`'s
        explicit padding.
      m: output tile size, 4 (the default) or 2.

    Returns:
      [N, H_out, W_out, O], H_out = H + top + bottom - 2 (W_out alike): the same function as
      `lax.conv_general_dilated(x, kernel, (1, 1), pads)` up to float rounding.
    """
    kh, kw, c, o = kernel.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"winograd_conv takes a 3x3 kernel; got {kh}x{kw}")
    if m not in MATRICES:
        raise ValueError(f"winograd_conv's tile m must be one of {TILES}; got {m}")
    (top, bottom), (left, right) = pads
    n, h, w, _ = x.shape
    ho, wo = h + top + bottom - 2, w + left + right - 2
    th, tw = -(-ho // m), -(-wo // m)
    # zeros up to whole tiles and one more block (partial last tiles are cut below)
    x = jnp.pad(x, ((0, 0), (top, bottom + m * th - ho + m - 2),
                    (left, right + m * tw - wo + m - 2), (0, 0)))
    input_transform, output_transform = transforms(m)
    r = m + 2
    v = input_transform(x).reshape(r * r, n * th * tw, c)
    u = kernel_transform(kernel, m).reshape(r * r, c, o)
    prods = jax.lax.dot_general(v, u, (((2,), (1,)), ((0,), (0,))))  # r^2 x [tiles, C] @ [C, O]
    return output_transform(prods.reshape(r, r, n, th, tw, o))[:, :ho, :wo]
