"""core/conv_pool.py: a convolution, ReLU and 2x2 max-pooling folded into one product equal
the three layers run one after the other (values, the gradients of the input, kernel and
bias, ties among a window's maxima, Hessian-vector products, vmap over per-client kernels),
and its kernel fold and window gather are the adjoints of their gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.conv import Conv, _pads, max_pool_2x2, xla_conv
from fedjax_appeal.core.conv_pool import (
    conv_relu_pool,
    fold_kernel,
    foldable,
    unfold_kernel,
    windows,
    windows_adjoint,
)


def _ref(x, w, b, pads):
    """The three layers as the models ran them before folding."""
    return max_pool_2x2(jax.nn.relu(xla_conv(x, w, (1, 1), pads) + b))


def _case(h, w, c, o, k, padding, seed=0):
    keys = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(keys[0], (2, h, w, c))
    x = x.at[:, : h // 2, : w // 2].set(0.0)  # a blank corner: windows whose four maxima tie
    kernel = jax.random.normal(keys[1], (k, k, c, o))
    bias = 0.3 * jax.random.normal(keys[2], (o,))
    pads = _pads(x.shape, (k, k), (1, 1), padding)
    t = jax.random.normal(keys[3], _ref(x, kernel, bias, pads).shape)
    return x, kernel, bias, pads, t


CASES = [(28, 28, 1, 6, 5, "SAME"), (14, 14, 6, 16, 5, "VALID"), (9, 11, 3, 4, 3, "SAME"),
         (10, 7, 2, 5, 5, "VALID"), (8, 9, 2, 3, 3, ((2, 1), (0, 3)))]


@pytest.mark.parametrize("h, w, c, o, k, padding", CASES)
def test_values_and_gradients_equal_conv_relu_pool(h, w, c, o, k, padding):
    x, kernel, bias, pads, t = _case(h, w, c, o, k, padding)
    want = _ref(x, kernel, bias, pads)
    got = conv_relu_pool(x, kernel, bias, pads)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    def loss(f):
        return lambda *a: jnp.sum(f(*a) * t)

    gw = jax.grad(loss(lambda *a: _ref(*a, pads)), (0, 1, 2))(x, kernel, bias)
    gg = jax.grad(loss(lambda *a: conv_relu_pool(*a, pads)), (0, 1, 2))(x, kernel, bias)
    for a, b in zip(gw, gg, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * float(jnp.abs(a).max()))


def test_tied_maxima_share_the_gradient_as_jnp_max_does():
    """A window of four equal conv outputs (a constant input, a kernel whose taps sum to the
    same at each offset) passes a quarter of the gradient to each."""
    x = jnp.ones((1, 6, 6, 1))
    kernel = jnp.ones((5, 5, 1, 1))
    bias = jnp.zeros((1,))
    pads = _pads(x.shape, (5, 5), (1, 1), "SAME")
    f = lambda k: jnp.sum(conv_relu_pool(x, k, bias, pads))  # noqa: E731
    r = lambda k: jnp.sum(_ref(x, k, bias, pads))  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(kernel), jax.grad(r)(kernel), rtol=1e-6)


def test_hessian_vector_product_and_vmap_over_kernels():
    x, kernel, bias, pads, t = _case(12, 12, 3, 4, 5, "SAME", seed=1)
    v = jax.random.normal(jax.random.key(7), kernel.shape)

    def sq(f):
        return lambda k: jnp.sum(f(x, k, bias, pads) ** 2)

    hr = jax.jvp(jax.grad(sq(_ref)), (kernel,), (v,))[1]
    ho = jax.jvp(jax.grad(sq(conv_relu_pool)), (kernel,), (v,))[1]
    np.testing.assert_allclose(ho, hr, rtol=1e-4, atol=1e-4 * float(jnp.abs(hr).max()))
    ks = jnp.stack([kernel, -kernel, 2 * kernel])
    gr = jax.vmap(jax.grad(sq(_ref)))(ks)
    go = jax.jit(jax.vmap(jax.grad(sq(conv_relu_pool))))(ks)
    np.testing.assert_allclose(go, gr, rtol=1e-4, atol=1e-4 * float(jnp.abs(gr).max()))
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda k: conv_relu_pool(x, k, bias, pads), (kernel,), (v,))


def test_fold_and_windows_are_the_adjoints_of_their_gradients():
    """<fold(k), g> = <k, unfold(g)> and <windows(x), d> = <x, windows_adjoint(d)>, exactly
    the pairs the backward pass uses."""
    keys = jax.random.split(jax.random.key(3), 4)
    k = jax.random.normal(keys[0], (5, 3, 2, 4))
    g = jax.random.normal(keys[1], (6 * 4 * 2, 16))
    np.testing.assert_allclose(jnp.vdot(fold_kernel(k), g), jnp.vdot(k, unfold_kernel(g, k.shape)),
                               rtol=1e-5)
    x = jax.random.normal(keys[2], (2, 3, 13, 11))  # [C, N, H, W]; rows used: 2P + 6 - 2
    d = jax.random.normal(keys[3], (6 * 4 * 2, 3 * 4 * 4))
    xs = x[:, :, :2 * 4 + 4, :2 * 4 + 2]
    np.testing.assert_allclose(jnp.vdot(windows(x, (6, 4), (4, 4)), d),
                               jnp.vdot(xs, windows_adjoint(d, (6, 4), (4, 4), 2, 3)),
                               rtol=1e-4)
    # fold by hand: the kernel's (i, j) tap lands at window row (a + i, b + j), offset (a, b)
    f = fold_kernel(k).reshape(6, 4, 2, 4, 4)
    assert float(f[1 + 2, 0 + 1, 1, 2, 3]) == float(k[2, 1, 1, 3])  # offset (1, 0) = block 2
    assert float(f[0, 3, 0, 0, 0]) == 0.0  # beyond the kernel at offset (0, 0)


def test_conv_module_folds_only_with_pooled_cf_in_training_and_a_foldable_layer():
    x = jax.random.normal(jax.random.key(0), (2, 12, 12, 3))
    base = Conv(4, (5, 5), padding="SAME", relu_pool=True, impl="xla")
    v = base.init(jax.random.key(1), x)
    want = base.apply(v, x, True)
    for impl, train, folded in (("pooled_cf", True, True), ("pooled_cf_train", True, True),
                                ("pooled_winograd", True, True),
                                ("pooled_winograd_train", True, True),
                                ("pooled_cf_train", False, False), ("winograd", True, False)):
        layer = base.clone(impl=impl)
        jaxpr = str(jax.make_jaxpr(lambda p, layer=layer, t=train: layer.apply(p, x, t))(v))
        assert ("custom_vjp_call" in jaxpr) == folded, (impl, train)
        np.testing.assert_allclose(layer.apply(v, x, train), want, rtol=1e-5, atol=1e-5)
    # no bias, an even kernel and a stride: the same three layers, unfolded
    for kw in (dict(use_bias=False), dict(kernel_size=(4, 4)), dict(strides=(2, 2))):
        ref = base.clone(**kw)
        p = ref.init(jax.random.key(2), x)
        np.testing.assert_allclose(ref.clone(impl="pooled_cf").apply(p, x, True),
                                   ref.apply(p, x, True), rtol=1e-5, atol=1e-5)
    assert foldable((5, 5), (1, 1)) and not foldable((4, 5), (1, 1))
    assert not foldable((3, 3), (2, 1))
    with pytest.raises(ValueError, match="odd kernel sizes"):
        conv_relu_pool(x, jnp.ones((4, 4, 3, 2)), jnp.zeros(2), ((1, 2), (1, 2)))
